// App deployments' refusals and bounds on one listening instance: every kind of bad manifest is refused
// with its reason and publishes nothing; the byte bound refuses a publish past it; the HTTP verbs spend
// the caller's request budget and log who published. (Two instances on PostgreSQL and Redis:
// test/cluster/app-deployments.test.ts.)
import { test } from 'tap'
import { writeFileSync } from 'node:fs'
import { buildSchema } from 'graphql'
import { buildApp } from '../../app/app.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { mintToken } from '../../cli/mint-token.ts'
import { checkManifest, publishManifest } from '../../app/graphql/app-deployments.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { schemaSDL } from '../../app/graphql/schema.ts'
import { runApp } from '../../cli/app-deployments.ts'
import { capturedLog, listenTestApp, testConfig } from '../helpers/app.ts'
import { operationLimits } from '../../app/graphql/operation-limits.ts'

const apollo = (operations: { id: string; body: string }[]) =>
  ({ format: 'apollo-persisted-query-manifest', version: 1, operations })
const entry = (body: string) => ({ id: sha256Hex(body), body })
const USERS = 'query Users { users { id } }'

test('a manifest that does not check is refused with every reason, and nothing is published', async (t) => {
  const config = testConfig({ MAX_DEPTH: '2' })
  const schema = buildSchema(schemaSDL)
  const limits = operationLimits(config)
  const problemsOf = async (manifest: unknown) => (await checkManifest(manifest, schema, limits)).problems
  t.match(await problemsOf('not a manifest'), [/./], 'not an object')
  t.match(await problemsOf({ format: 'some-other-format', operations: [] }), [/format/], 'an unknown format')
  t.match(await problemsOf(apollo([])), ['the manifest holds no operation'])
  t.match(await problemsOf(apollo([{ id: sha256Hex('query Other { users { id } }'), body: USERS }])),
    [/does not match the sha256 of its text/], 'a hash that is not its text\'s')
  t.match(await problemsOf(apollo([entry('query A { users { id } } query B { users { id } }')])), [/2 operations/])
  t.match(await problemsOf(apollo([entry('query Broken { users { id')])), [/does not parse/])
  const deep = 'subscription Deep { messageAdded(roomId: "general") { author { id } } }'
  t.match(await problemsOf(apollo([entry(USERS), entry(deep), entry('query Unknown { nobody }')])), [
    /^subscription Deep \(sha256:[0-9a-f]{12}…\): .*depth/,
    /^query Unknown \(sha256:[0-9a-f]{12}…\): Cannot query field "nobody"/
  ], 'every refused operation is named, a subscription the limits refuse too')

  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  await t.rejects(publishManifest(store, {
    name: 'ios', version: '1', manifest: apollo([entry(USERS), entry(deep)]), schema, limits: operationLimits(config), maxBytes: 1 << 20
  }), { code: 'BAD_USER_INPUT', message: /Deep/ })
  await t.rejects(publishManifest(store, {
    name: 'ios app', version: '1', manifest: apollo([entry(USERS)]), schema, limits: operationLimits(config), maxBytes: 1 << 20
  }), { code: 'BAD_USER_INPUT', message: /name must be 1 to 100 letters/ })
  t.same(await store.listDeployments(), [], 'nothing published')
})

test('the active operations\' weight stays within DEPLOYMENTS_MAX_BYTES: a publish past it is refused', async (t) => {
  const config = testConfig()
  const schema = buildSchema(schemaSDL)
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const publish = (version: string, body: string, maxBytes: number) =>
    publishManifest(store, { name: 'web', version, manifest: apollo([entry(body)]), schema, limits: operationLimits(config), maxBytes })
  // What the first operation weighs in memory (its plan and compiled code), and a little room: not a second one.
  const second = 'query UsersAgain { users { id name } }'
  const weightOf = async (body: string) =>
    (await checkManifest(apollo([entry(body)]), schema, operationLimits(config))).operations[0]!.weight
  const weights = [await weightOf(USERS), await weightOf(second)]
  t.ok(weights[0]! > Buffer.byteLength(USERS) * 50, `an operation weighs far more than its text (${weights[0]} bytes)`)
  const maxBytes = Math.max(...weights) + 10
  t.match(await publish('1', USERS, maxBytes), { outcome: 'published' })
  await t.rejects(publish('2', second, maxBytes), { code: 'BAD_USER_INPUT', message: /over DEPLOYMENTS_MAX_BYTES/ })
  t.same((await store.listDeployments()).map((d) => d.version), ['1'])
  await store.retireDeployment('web', '1')
  t.match(await publish('2', second, maxBytes), { outcome: 'published' }, 'retired versions do not count')
})

test('the HTTP verbs spend the caller\'s request budget and log the administrator who published', async (t) => {
  const { lines, stream } = capturedLog()
  const config = testConfig({ LOG_LEVEL: 'info', RATE_LIMIT_REQUESTS: '3' })
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  const app = await buildApp(config, { store, logger: { stream } })
  t.teardown(async () => {
    await app.close()
    await store.close()
  })
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  const admin = mintToken(config.jwt, '1', 'ADMIN')
  const put = await fetch(`${url}/admin/app-deployments/web/1.0.0`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
    body: JSON.stringify(apollo([entry(USERS)]))
  })
  t.equal(put.status, 201)
  t.same((await (await fetch(`${url}/graphql?queryId=sha256:${sha256Hex(USERS)}`)).json()).data.users.length, 5,
    'served by this instance as soon as the publish answers')
  const list = () => fetch(`${url}/admin/app-deployments`, { headers: { authorization: `Bearer ${admin}` } })
  t.equal((await list()).status, 200)
  t.equal((await list()).status, 200)
  const limited = await list()
  t.equal(limited.status, 429, 'the fourth request of the window')
  t.equal((await limited.json()).errors[0].extensions.code, 'RATE_LIMITED')
  await new Promise((resolve) => setTimeout(resolve, 300)) // the log's batch is handed on every 200 ms
  t.match(lines.find((line) => line.includes('app deployment published')), /"caller":"1".*"app":"web","version":"1\.0\.0"/)
})

test('on the embedded store, a version published by the command beside the running service is served within 5 s', async (t) => {
  const dir = t.testdir()
  const env = { SQLITE_PATH: `${dir}/service.db`, PERSISTED_ONLY: 'true' }
  const service = openSqliteStore(env.SQLITE_PATH)
  await loadDemoData(service)
  const { app, url } = await listenTestApp(t, env, { store: service, demo: false })
  t.teardown(async () => {
    await app.close()
    await service.close()
  })
  const get = async () => (await fetch(`${url}/graphql?queryId=sha256:${sha256Hex(USERS)}`)).json()
  t.equal((await get()).errors[0].extensions.code, 'PERSISTED_QUERY_NOT_FOUND')

  const file = `${dir}/manifest.json`
  writeFileSync(file, JSON.stringify(apollo([entry(USERS)])))
  // The command opens the file on a connection of its own, as `npm run app` in another process does.
  t.equal(await runApp(['publish', '--name', 'web', '--version', '1', file], testConfig(env), () => {}), 0)
  const started = Date.now()
  let answer = await get()
  while (answer.errors && Date.now() - started < 5000) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    answer = await get()
  }
  t.equal(answer.data?.users.length, 5, `served ${Date.now() - started} ms after the command published it`)
})

test('GET /admin/app-deployments: staleDays marks what has not been used for that many days; a bad value is refused', async (t) => {
  const { url, token } = await listenTestApp(t)
  const admin = { authorization: `Bearer ${token('1', 'ADMIN')}` }
  const put = await fetch(`${url}/admin/app-deployments/web/1`, {
    method: 'PUT', headers: { ...admin, 'content-type': 'application/json' }, body: JSON.stringify(apollo([entry(USERS)]))
  })
  t.equal(put.status, 201)
  const list = async (query: string) => {
    const response = await fetch(`${url}/admin/app-deployments${query}`, { headers: admin })
    return { status: response.status, body: await response.json() }
  }
  t.match((await list('')).body.deployments, [{ name: 'web', version: '1', state: 'active', requests: 0, lastUsedAt: null, stale: null }])
  t.match((await list('?staleDays=0')).body.deployments, [{ stale: true }], 'published before now and never used')
  t.match((await list('?staleDays=30')).body.deployments, [{ stale: false }], 'published less than 30 days ago')
  for (const bad of ['abc', '-1', '1.5', '']) {
    const refused = await list(`?staleDays=${bad}`)
    t.equal(refused.status, 400, `staleDays=${bad}`)
    t.equal(refused.body.errors[0].extensions.code, 'BAD_USER_INPUT')
  }
})
