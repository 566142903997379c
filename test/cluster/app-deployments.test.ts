// App deployments as a release pipeline uses them, on two instances in persisted-only mode sharing
// PostgreSQL and Redis: a version published (by `npm run app` against the database, or over HTTP by an
// administrator) is served by both within seconds; a retired one is refused by name while operations
// another version still ships keep working; usage is counted across instances; nothing that does not
// check is written; schema:check names the app versions a schema change would break.
import { test } from 'tap'
import { writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../../app/core/config/index.ts'
import { openStore } from '../../app/core/store/index.ts'
import { operationLimits } from '../../app/graphql/operation-limits.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { runApp } from '../../cli/app-deployments.ts'
import { exportedSDL, runCheck } from '../../cli/schema-tool.ts'
import {
  JWT_SECRET,
  PARTNER_SECRET_KEY,
  eventually,
  request,
  startInstances,
  token,
  type Instance
} from './harness.ts'

const USERS = 'query AppUsers($limit: Int) { users(limit: $limit) { id name } }'
const ONE_USER = 'query AppUser($id: ID!) { user(id: $id) { id name } }'
const MESSAGES = 'query AppMessages($roomId: String!) { messages(roomId: $roomId, limit: 2) { id content } }'

const manifestOf = (...texts: string[]) => ({
  format: 'apollo-persisted-query-manifest',
  version: 1,
  operations: texts.map((body) => ({ id: sha256Hex(body), body }))
})

/** A persisted operation by its hash, as an app sends it (with its name and version when given). */
async function persisted (
  instance: Instance,
  text: string,
  variables: Record<string, unknown>,
  app?: { name: string; version: string }
) {
  const response = await request(`${instance.url}/graphql`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${token('2')}`,
      ...(app ? { 'apollographql-client-name': app.name, 'apollographql-client-version': app.version } : {})
    },
    body: JSON.stringify({ variables, extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(text) } } })
  })
  return { status: response.status, body: response.json() }
}

const codeOf = (body: any): string | undefined => body?.errors?.[0]?.extensions?.code

test('app deployments on two instances in persisted-only mode', async (t) => {
  const { db, instances } = await startInstances(t, {
    env: { PERSISTED_ONLY: 'true', DEPLOYMENT_USAGE_FLUSH_MS: '200' }
  })
  const [a, b] = instances as [Instance, Instance]
  const config = loadConfig({
    NODE_ENV: 'production', JWT_SECRET, PARTNER_SECRET_KEY, DATABASE_URL: db.url, DATABASE_SCHEMA: db.schema
  })
  const dir = tmpdir()
  const file = (label: string, json: unknown) => {
    const path = join(dir, `app-deployment-${db.schema}-${label}.json`)
    writeFileSync(path, JSON.stringify(json))
    return path
  }
  /** `npm run app -- ...` in this process: its exit code, what it printed, and the problems it refused with. */
  const app = async (...argv: string[]) => {
    const out: string[] = []
    try {
      return { code: await runApp(argv, config, (line) => out.push(line)), out, problems: [] as string[] }
    } catch (err) {
      return { code: 1, out, problems: (err as { problems?: string[] }).problems ?? [(err as Error).message] }
    }
  }
  const listed = async () => JSON.parse((await app('list', '--json')).out.join('\n')) as any[]
  /** What a publish changes (usage is written meanwhile by the instances). */
  const deploymentStates = async () => (await listed()).map((d) => `${d.name} ${d.version} ${d.state} ${d.operations}`)
  const admin = token('1', 'ADMIN')
  const adminRequest = (instance: Instance, method: string, path: string, body?: unknown, bearer = admin) =>
    request(`${instance.url}/admin/app-deployments${path}`, {
      method,
      headers: { authorization: `Bearer ${bearer}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })

  await t.test('before any publish, persisted-only refuses the operation on both instances', async (t) => {
    for (const instance of [a, b]) {
      const refused = await persisted(instance, USERS, { limit: 1 })
      t.equal(codeOf(refused.body), 'PERSISTED_QUERY_NOT_FOUND', instance.name)
    }
  })

  await t.test('npm run app publish: both instances serve the version within 5 seconds', async (t) => {
    const published = await app('publish', '--name', 'ios', '--version', '1.0.0', file('ios-1.0.0', manifestOf(USERS, ONE_USER)))
    t.equal(published.code, 0, published.problems.join('\n'))
    t.match(published.out.join('\n'), /published ios 1\.0\.0: 2 operations/)
    const started = Date.now()
    for (const instance of [a, b]) {
      const answered = await eventually(`${instance.name} serves ios 1.0.0`, async () => {
        const answer = await persisted(instance, ONE_USER, { id: '2' })
        return answer.body.data?.user ? answer : null
      }, 5_000, 50)
      t.same(answered.body.data.user.id, '2', instance.name)
    }
    t.ok(Date.now() - started < 5_000, `live on both in ${Date.now() - started} ms`)
    t.equal((await app('publish', '--name', 'ios', '--version', '1.0.0', file('ios-1.0.0-again', manifestOf(USERS, ONE_USER)))).code,
      0, 'publishing the same content again is a no-op, not an error')
  })

  await t.test('a changed manifest under a published name and version is refused, and nothing is written', async (t) => {
    const before = await deploymentStates()
    const changed = await app('publish', '--name', 'ios', '--version', '1.0.0', file('ios-1.0.0-changed', manifestOf(USERS, MESSAGES)))
    t.equal(changed.code, 1)
    t.match(changed.problems.join('\n'), /ios 1\.0\.0 is published already with other operations/)
    t.same(await deploymentStates(), before)
    t.equal(codeOf((await persisted(a, MESSAGES, { roomId: 'general' })).body), 'PERSISTED_QUERY_NOT_FOUND')
  })

  await t.test('check and publish refuse an operation the service cannot run, or a wrong hash, naming it', async (t) => {
    const before = await deploymentStates()
    const invalid = manifestOf(USERS, 'query Broken { users { id nickname } }')
    const checked = await app('check', file('invalid', invalid))
    t.equal(checked.code, 1)
    t.match(checked.problems.join('\n'), /query Broken \(sha256:[0-9a-f]{12}…\): Cannot query field "nickname" on type "User"/)
    const wrongHash = { ...manifestOf(USERS), operations: [{ id: sha256Hex('query Other { users { id } }'), body: USERS }] }
    const mismatched = await app('publish', '--name', 'android', '--version', '2', file('wrong-hash', wrongHash))
    t.equal(mismatched.code, 1)
    t.match(mismatched.problems.join('\n'), /does not match the sha256 of its text/)
    const overHttp = await adminRequest(a, 'PUT', '/android/2', invalid)
    t.equal(overHttp.status, 400)
    t.equal(codeOf(overHttp.json()), 'BAD_USER_INPUT')
    t.match(overHttp.json().errors[0].message, /nickname/)
    t.same(await deploymentStates(), before, 'nothing was written')
  })

  await t.test('over HTTP: refused to a USER and without a token, published by an ADMIN', async (t) => {
    const manifest = manifestOf(USERS, MESSAGES)
    t.equal((await adminRequest(a, 'PUT', '/web/5.0.0', manifest, token('2'))).status, 403)
    t.equal(codeOf((await adminRequest(a, 'PUT', '/web/5.0.0', manifest, token('2'))).json()), 'FORBIDDEN')
    const anonymous = await request(`${a.url}/admin/app-deployments`, { method: 'GET' })
    t.equal(anonymous.status, 401)
    t.equal((await adminRequest(b, 'GET', '', undefined, token('3'))).status, 403)
    const checked = await adminRequest(a, 'POST', '/check', manifest)
    t.equal(checked.status, 200)
    t.same(checked.json(), { operations: 2 })
    const published = await adminRequest(a, 'PUT', '/web/5.0.0', manifest)
    t.equal(published.status, 201)
    t.match(published.json(), { name: 'web', version: '5.0.0', outcome: 'published', operations: 2 })
    t.equal((await adminRequest(a, 'PUT', '/web/5.0.0', manifest)).status, 200, 'the same again: unchanged')
    t.ok((await persisted(a, MESSAGES, { roomId: 'general' })).body.data, 'the instance that published serves it when it answers')
    await eventually('the other instance serves web 5.0.0', async () =>
      (await persisted(b, MESSAGES, { roomId: 'general' })).body.data, 5_000, 50)
    const list = (await adminRequest(b, 'GET', '')).json().deployments
    t.same(list.map((d: any) => `${d.name} ${d.version} ${d.state}`).sort(), ['ios 1.0.0 active', 'web 5.0.0 active'])
  })

  await t.test('usage is counted across instances, by the version the client names', async (t) => {
    const ios = { name: 'ios', version: '1.0.0' }
    for (let i = 0; i < 3; i++) t.ok((await persisted(a, ONE_USER, { id: '3' }, ios)).body.data)
    for (let i = 0; i < 4; i++) t.ok((await persisted(b, ONE_USER, { id: '3' }, ios)).body.data)
    for (let i = 0; i < 2; i++) t.ok((await persisted(b, USERS, { limit: 1 }, { name: 'web', version: '5.0.0' })).body.data)
    const counted = await eventually('usage written by both instances', async () => {
      const all = await listed()
      const iosRow = all.find((d) => d.name === 'ios')
      const webRow = all.find((d) => d.name === 'web')
      return iosRow?.requests >= 9 && webRow?.requests >= 4 ? { iosRow, webRow } : null
    }, 5_000, 100)
    // Refused requests count for nobody; a client that does not name its version counts once, for the newest holder.
    t.equal(counted.iosRow.requests, 9, 'ios 1.0.0: 7 AppUser named ios, and the first AppUser each instance served')
    t.ok(counted.iosRow.lastUsedAt, 'the last use is recorded')
    t.equal(counted.webRow.requests, 4, 'web 5.0.0: 2 AppUsers named web (not ios, which holds it too), 2 AppMessages')
    const metrics = await request(a.metricsUrl)
    t.match(metrics.text, /graphql_app_deployment_requests_total\{app="ios",version="1\.0\.0"\} \d+/)
  })

  await t.test('npm run app retire: its own operation is refused naming it, a shared one keeps working', async (t) => {
    const retired = await app('retire', '--name', 'ios', '--version', '1.0.0')
    t.equal(retired.code, 0, retired.problems.join('\n'))
    for (const instance of [a, b]) {
      const refused = await eventually(`${instance.name} refuses AppUser`, async () => {
        const answer = await persisted(instance, ONE_USER, { id: '2' })
        return codeOf(answer.body) === 'PERSISTED_QUERY_NOT_FOUND' ? answer : null
      }, 5_000, 50)
      t.match(refused.body.errors[0].message, /was retired with ios 1\.0\.0/, instance.name)
      t.ok((await persisted(instance, USERS, { limit: 1 })).body.data?.users, `${instance.name}: AppUsers, shipped by web 5.0.0 too, is served`)
    }
    t.match((await app('list')).out.join('\n'), /ios {2}1\.0\.0 {2}retired/)
    const metrics = (await request(a.metricsUrl)).text
    t.notMatch(metrics, /graphql_app_deployment_requests_total\{app="ios"/, 'a retired version leaves the metrics')
    t.match(metrics, /graphql_app_deployment_requests_total\{app="web",version="5\.0\.0"\} \d+/)
  })

  await t.test('schema:check names the published app versions a breaking change would break', async (t) => {
    const store = await openStore(config)
    t.teardown(() => store.close())
    const live = exportedSDL()
    const withoutContent = live.replace(/\n {2}content: String!/, '')
    t.not(withoutContent, live)
    const out: string[] = []
    const err: string[] = []
    const limits = operationLimits(config)
    t.equal(await runCheck(store, limits, (l) => out.push(l), (l) => err.push(l), live, withoutContent), 1)
    t.match(out.join('\n'), /BREAKS APP web 5\.0\.0: query AppMessages \(sha256:[0-9a-f]{12}…\): Cannot query field "content" on type "Message"/)
    t.notMatch(out.join('\n'), /ios 1\.0\.0/, 'a retired version is not in the way')
    t.match(err.join('\n'), /1 operation\(s\) of published app versions would fail/)
    t.equal(await runCheck(store, limits, () => {}, () => {}, live, live), 0, 'the unchanged schema breaks none')
  })
})
