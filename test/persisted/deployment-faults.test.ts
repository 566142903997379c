// App deployments under faults and at the bound, on one listening instance over the embedded store: a
// failed reload is retried and, past the stale window, the operations are refused (not served retired)
// and /health/ready says so; an instance serves whole deployments only, newest first within its bound,
// and names the others in /health/ready; only admitted requests count, a request without client headers
// once; the usage flush never waits on another process's lock. (Two instances: test/cluster/app-deployments.test.ts.)
import { test } from 'tap'
import { writeFileSync } from 'node:fs'
import { DatabaseSync } from 'node:sqlite'
import { buildSchema } from 'graphql'
import { buildApp } from '../../app/app.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import type { ChangeListener, Store } from '../../app/core/store/types.ts'
import { checkManifest, publishManifest } from '../../app/graphql/app-deployments.ts'
import { createDeploymentCatalog, STALE_AFTER_MS } from '../../app/graphql/deployment-catalog.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { schemaSDL } from '../../app/graphql/schema.ts'
import { runApp } from '../../cli/app-deployments.ts'
import { capturedLog, testConfig, type TestLike } from '../helpers/app.ts'
import { operationLimits } from '../../app/graphql/operation-limits.ts'

const apollo = (operations: { id: string; body: string }[]) =>
  ({ format: 'apollo-persisted-query-manifest', version: 1, operations })
const entry = (body: string) => ({ id: sha256Hex(body), body })
const USERS = 'query Users { users { id } }'
const NAMES = 'query Names { users { name } }'
const ALIASED = 'query Aliased { a: users { id } b: users { name } c: users { email } }'
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A real store whose deployment reads fail while `failing`, and whose change feed the test rings. */
function faultyStore (store: Store) {
  const state = { failing: false, reads: 0, listener: null as ChangeListener | null }
  const wrapped: Store = new Proxy(store, {
    get (target, property, receiver) {
      if (property === 'listDeployments') {
        return async () => {
          state.reads++
          if (state.failing) throw new Error('terminating connection due to administrator command')
          return target.listDeployments()
        }
      }
      if (property === 'watchChanges') {
        return (listener: ChangeListener) => {
          state.listener = listener
          return { stop: async () => {} }
        }
      }
      const value = Reflect.get(target, property, receiver)
      return typeof value === 'function' ? value.bind(target) : value
    }
  })
  return { store: wrapped, state }
}

async function listening (t: TestLike, store: Store, env: Record<string, string> = {}) {
  const { lines, stream } = capturedLog()
  const config = testConfig({ PERSISTED_ONLY: 'true', LOG_LEVEL: 'info', ...env })
  const app = await buildApp(config, { store, logger: { stream } })
  t.teardown(() => app.close())
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  const get = async (body: string, headers: Record<string, string> = {}) => {
    const response = await fetch(`${url}/graphql?queryId=sha256:${sha256Hex(body)}`, { headers })
    return { status: response.status, body: await response.json() as any }
  }
  const ready = async () => {
    const response = await fetch(`${url}/health/ready`)
    return { status: response.status, body: await response.json() as any }
  }
  return { app, url, config, lines, get, ready }
}

const codeOf = (body: any) => body.errors?.[0]?.extensions?.code

test('a failed reload is retried with backoff; past the stale window the operations are refused, not served retired', async (t) => {
  const base = openSqliteStore(':memory:')
  t.teardown(() => base.close())
  await loadDemoData(base)
  const { store, state } = faultyStore(base)
  const config = testConfig()
  await publishManifest(base, { name: 'ios', version: '1', manifest: apollo([entry(USERS)]), schema: buildSchema(schemaSDL), limits: operationLimits(config), maxBytes: 1e9 })
  const { get, ready, lines } = await listening(t, store)
  t.ok((await get(USERS)).body.data, 'served')

  // Retired elsewhere; the feed tells this instance, whose reloads now fail.
  state.failing = true
  await base.retireDeployment('ios', '1')
  const readsBefore = state.reads
  state.listener!.changed(['deployments'])
  await sleep(1500)
  t.ok(state.reads - readsBefore >= 3, `the failed reload was retried (${state.reads - readsBefore} reads in 1.5 s)`)
  t.ok((await get(USERS)).body.data, 'within the stale window the last view is still served')
  t.equal((await ready()).status, 200)

  await sleep(STALE_AFTER_MS)
  const refused = await get(USERS)
  t.equal(codeOf(refused.body), 'SERVICE_UNAVAILABLE', 'past the window: refused rather than served retired')
  t.match(refused.body.errors[0].message, /could not be reloaded/)
  await sleep(1100) // READINESS_CACHE_MS: the verdict is checked again after it
  const notReady = await ready()
  t.equal(notReady.status, 503, '/health/ready takes the instance out of rotation')
  t.match(notReady.body.checks['app deployments'], /^failing: app deployments not reloaded/)

  state.failing = false
  let answer = await get(USERS)
  for (const started = Date.now(); codeOf(answer.body) !== 'PERSISTED_QUERY_NOT_FOUND' && Date.now() - started < 10_000;) {
    await sleep(100)
    answer = await get(USERS)
  }
  t.match(answer.body.errors[0].message, /was retired with ios 1/, 'the store back: the retry loads the retirement by itself')
  await sleep(1100)
  t.equal((await ready()).status, 200)
  t.ok(lines.some((l) => l.includes('app deployments not reloaded: retrying')), 'each failure is logged')
  t.ok(lines.some((l) => l.includes('their operations are served again')), 'and the recovery')
})

test('an instance serves whole deployments only, newest first within its bound, and says which it does not', async (t) => {
  const dir = t.testdir()
  const path = `${dir}/service.db`
  const config = testConfig()
  const schema = buildSchema(schemaSDL)
  const weightOf = async (body: string) =>
    (await checkManifest(apollo([entry(body)]), schema, operationLimits(config))).operations[0]!.weight
  {
    // Published by a release job whose instances allow more (a larger bound, more aliases).
    const store = openSqliteStore(path)
    await loadDemoData(store)
    const publish = (version: string, bodies: string[]) => publishManifest(store, {
      name: 'ios', version, manifest: apollo(bodies.map(entry)), schema, limits: operationLimits(config), maxBytes: 1e9
    })
    await publish('1', [NAMES])
    await sleep(5)
    await publish('2', [USERS, ALIASED])
    await sleep(5)
    await publish('3', [USERS])
    await store.close()
  }
  const store = openSqliteStore(path)
  t.teardown(() => store.close())
  // Room for ios 3 (USERS) and either of the others' alone, not both; and at most 2 aliases here.
  const bound = (await weightOf(USERS)) + Math.max(await weightOf(NAMES), await weightOf(ALIASED)) + 10
  const { get, ready, lines } = await listening(t, store, { DEPLOYMENTS_MAX_BYTES: String(bound), MAX_ALIASES: '2' })
  t.ok((await get(USERS)).body.data, 'ios 3, the newest, is served')
  t.equal(codeOf((await get(ALIASED)).body), 'PERSISTED_QUERY_NOT_FOUND', 'ios 2 holds an operation this instance cannot run: none of it is served')
  t.ok((await get(NAMES)).body.data, 'ios 1 fits once ios 2 is refused: served whole')
  const { status, body } = await ready()
  t.equal(status, 200, 'an instance serving part of the active set stays in rotation')
  t.match(body.checks['app deployments'], /^ok, but 1 active app deployment\(s\) not served: ios 2 \(query Aliased .*ALIAS|alias/i)

  // Reloads that change nothing for it: the refusal is logged once, not on every reload.
  const refusals = () => lines.filter((l) => l.includes('app deployment not served by this instance')).length
  await sleep(300) // the log's batch is handed on every 200 ms
  t.equal(refusals(), 1)
  const other = new DatabaseSync(path)
  for (let i = 0; i < 3; i++) {
    // Another process's commit: the embedded store reports it (any change), and the catalog reloads.
    other.exec("UPDATE app_deployments SET state = state WHERE name = 'ios'")
    await sleep(600)
  }
  other.close()
  t.equal(refusals(), 1, 'logged once')
  t.ok((await get(NAMES)).body.data, 'still served whole after the reloads')
})

test('usage: only admitted requests count; without client headers a request counts once, for the newest holder', async (t) => {
  const base = openSqliteStore(':memory:')
  t.teardown(() => base.close())
  await loadDemoData(base)
  const config = testConfig()
  const schema = buildSchema(schemaSDL)
  const MUTATION = 'mutation Rename($id: ID!) { updateUser(id: $id, input: { name: "x" }) { id } }'
  for (const version of ['1', '2', '3', '4']) {
    await publishManifest(base, { name: 'ios', version, manifest: apollo([entry(USERS), entry(MUTATION)]), schema, limits: operationLimits(config), maxBytes: 1e9 })
    await sleep(5)
  }
  const { get } = await listening(t, base, { DEPLOYMENT_USAGE_FLUSH_MS: '100' })
  for (let i = 0; i < 5; i++) t.ok((await get(USERS)).body.data)
  for (let i = 0; i < 2; i++) t.ok((await get(USERS, { 'apollographql-client-name': 'ios', 'apollographql-client-version': '1' })).body.data)
  const refused = await get(MUTATION)
  t.equal(refused.status, 405, 'a mutation by GET is refused')
  await sleep(400)
  const requests = Object.fromEntries((await base.listDeployments()).map((d) => [d.version, d.requests]))
  t.same(requests, { 1: 2, 2: 0, 3: 0, 4: 5 }, '5 without headers count once each, for ios 4; 2 named ios 1; the refused one for nobody')
})

test('the embedded usage flush never waits on another process\'s write lock: the counts wait instead', async (t) => {
  const dir = t.testdir()
  const path = `${dir}/service.db`
  const store = openSqliteStore(path)
  t.teardown(() => store.close())
  await loadDemoData(store)
  const config = testConfig()
  await publishManifest(store, { name: 'ios', version: '1', manifest: apollo([entry(USERS)]), schema: buildSchema(schemaSDL), limits: operationLimits(config), maxBytes: 1e9 })
  const { get } = await listening(t, store, { DEPLOYMENT_USAGE_FLUSH_MS: '100' })
  for (let i = 0; i < 3; i++) t.ok((await get(USERS)).body.data)

  // Another process's long write transaction (an operator's, a command's) holds the file's write lock for 3 s.
  const other = new DatabaseSync(path)
  other.exec('BEGIN IMMEDIATE')
  // The event loop's longest stall meanwhile: a flush waiting on SQLite's busy timeout (5 s) would be one.
  let last = performance.now()
  let longest = 0
  const ticks = setInterval(() => {
    const now = performance.now()
    longest = Math.max(longest, now - last)
    last = now
  }, 20)
  await sleep(3000)
  clearInterval(ticks)
  t.equal((await store.listDeployments())[0]!.requests, 0, 'nothing written while locked')
  other.exec('COMMIT')
  other.close()
  t.ok(longest < 1000, `the event loop never waited on the lock (longest stall ${Math.round(longest)} ms)`)
  await sleep(500)
  t.equal((await store.listDeployments())[0]!.requests, 3, 'the counts kept and written by a later flush')
})

test('a publish is checked against what the running instances run, not the release job\'s own settings', async (t) => {
  const dir = t.testdir()
  const env = { SQLITE_PATH: `${dir}/service.db` }
  const service = openSqliteStore(env.SQLITE_PATH)
  t.teardown(() => service.close())
  await loadDemoData(service)
  // The instance runs MAX_ALIASES=15 (the default); the release job's environment says 50.
  const { get, app } = await listening(t, service, env)
  const aliases = Array.from({ length: 20 }, (_, i) => `a${i}: users { id }`).join(' ')
  const MANY = `query Many { ${aliases} }`
  const file = `${dir}/manifest.json`
  writeFileSync(file, JSON.stringify(apollo([entry(MANY), entry(USERS)])))
  const job = testConfig({ ...env, MAX_ALIASES: '50' })
  const out: string[] = []
  const refusal = await runApp(['publish', '--name', 'ios', '--version', '1', file], job, (line) => out.push(line))
    .then(() => null, (err: { problems: string[] }) => err.problems)
  t.match(refusal, [/^refused by the 1 running instance\(s\) of profile [0-9a-f]{12}: query Many .*alias/i], 'refused with the instances\' answer')
  t.same(await service.listDeployments(), [], 'nothing published')
  t.equal(codeOf((await get(USERS)).body), 'PERSISTED_QUERY_NOT_FOUND')

  writeFileSync(file, JSON.stringify(apollo([entry(USERS)])))
  t.equal(await runApp(['publish', '--name', 'ios', '--version', '2', file], job, (line) => out.push(line)), 0)
  t.match(out.at(-1), /^published ios 2: 1 operations, checked by the 1 running instance\(s\) of profile [0-9a-f]{12}; live/)

  // Stopped, the instance says so: a publish then has only the job's own settings to go by, and says that.
  await app.close()
  writeFileSync(file, JSON.stringify(apollo([entry(MANY)])))
  t.equal(await runApp(['publish', '--name', 'ios', '--version', '3', file], job, (line) => out.push(line)), 0)
  t.match(out.at(-1), /checked against this checkout's schema and limits \(no running instance has said what it runs\)/)
})

test('a deployment refused by an operation that cannot be planned keeps none of its others retained', async (t) => {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  const config = testConfig()
  const schema = buildSchema(schemaSDL)
  await publishManifest(store, { name: 'ios', version: '1', manifest: apollo([entry(USERS), entry(NAMES)]), schema, limits: operationLimits(config), maxBytes: 1e9 })
  // The instance's planner refuses NAMES (as a changed schema would); USERS, first, plans.
  const retained = new Set<string>()
  const quiet = { error () {}, warn () {}, info () {} }
  const catalog = createDeploymentCatalog({
    store,
    retain (text) {
      if (text === NAMES) throw new Error('Cannot query field "name"')
      retained.add(text)
      return 1000
    },
    release: (text) => { retained.delete(text) },
    maxBytes: 1e9,
    usageFlushMs: 100000,
    profile: { schema: schemaSDL, limits: operationLimits(config), maxBytes: 1e9 },
    log: quiet
  })
  await catalog.refresh()
  t.equal(catalog.registered.find(`sha256:${sha256Hex(USERS)}`), undefined, 'refused whole')
  t.same([...retained], [], 'the operation planned before the refusal was let go')
  t.match(catalog.readiness(), /ios 1 \(query Names .*Cannot query field "name"/)
})
