// Operations basics: health, readiness, redacted logs, graceful shutdown (in-process and of the real process).
import { test } from 'tap'
import { Writable } from 'node:stream'
import { buildApp } from '../app/app.ts'
import { openSqliteStore } from '../app/core/store/sqlite.ts'
import { loadDemoData } from '../app/core/store/sample-data.ts'
import {
  gql,
  listenTestApp,
  testConfig,
  TEST_JWT_SECRET,
  TEST_PARTNER_SECRET_KEY,
  type TestLike
} from './helpers/app.ts'
import { mintToken } from '../cli/mint-token.ts'
import { startService } from './helpers/server-process.ts'
import { MANIFEST_FILE, persistedGetUrl, queryIdOf } from './persisted/helpers.ts'

test('liveness and readiness; readiness reflects a failing store', async (t) => {
  // Every call checks (no shared verdict): the store changes between calls.
  const { url, store } = await listenTestApp(t, { READINESS_CACHE_MS: '0' })
  t.same(await (await fetch(`${url}/health/live`)).json(), { status: 'ok' })
  const ready = await fetch(`${url}/health/ready`)
  t.equal(ready.status, 200)
  t.match(await ready.json(), { status: 'ready', checks: { store: 'ok' } })
  store.ping = async () => { throw new Error('database is down') }
  const notReady = await fetch(`${url}/health/ready`)
  t.equal(notReady.status, 503)
  t.match(await notReady.json(), { status: 'not ready', checks: { store: 'failing: database is down' } })

  // A dependency that does not answer at all fails its check after a second, not never.
  store.ping = () => new Promise(() => {})
  const started = Date.now()
  const hanging = await fetch(`${url}/health/ready`)
  t.equal(hanging.status, 503)
  t.match(await hanging.json(), { status: 'not ready', checks: { store: 'failing: timed out' } })
  t.ok(Date.now() - started < 2000, 'answered after the one-second check deadline')
})

async function appLoggingTo (t: TestLike, level: string, env: Record<string, string> = {}) {
  const lines: string[] = []
  const stream = new Writable({ write (chunk, _encoding, done) { lines.push(String(chunk)); done() } })
  // Requests come from 127.0.0.1 as from the load balancer, whose X-Request-Id is kept.
  const config = testConfig({ LOG_LEVEL: level, TRUST_PROXY: '127.0.0.1', ...env })
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  const app = await buildApp(config, { store, logger: { stream } })
  t.teardown(async () => { await app.close(); await store.close() })
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  return { url, lines, token: mintToken(config.jwt, '2', 'USER') }
}

test('production logging: one access line per request with its request id, no headers', async (t) => {
  const { url, lines, token } = await appLoggingTo(t, 'info')
  const { headers } = await gql(url, '{ users(limit: 1) { id } }', undefined, {
    authorization: `Bearer ${token}`,
    'x-request-id': 'req-abc'
  })
  t.equal(headers.get('x-request-id'), 'req-abc')
  const access = lines.map((l) => JSON.parse(l)).filter((l) => l.reqId === 'req-abc')
  t.match(access, [{ msg: 'request completed', method: 'POST', url: '/graphql', statusCode: 200, ms: Number }])
  t.notMatch(lines.join(''), new RegExp(token.split('.')[2]!), 'the token never reaches the logs')
  // The line is pino's at info, with pino's base fields, whatever the path holds (quotes, backslashes, non-ASCII).
  t.match(access[0], { level: 30, time: Number, pid: process.pid, hostname: String, ip: String })
  const odd = await fetch(`${url}/odd"path\\é%22`)
  await odd.arrayBuffer()
  const parsed = lines.map((l) => JSON.parse(l)).filter((l) => l.statusCode === 404)
  t.equal(parsed.length, 1, 'every line is one JSON document')
  t.equal(parsed[0].url, new URL(`${url}/odd"path\\é%22`).pathname, 'the path exactly as received')
})

test('logs carry no user data: a persisted GET is logged by path and persisted id, never its variables', async (t) => {
  for (const level of ['info', 'debug']) {
    const { url, lines } = await appLoggingTo(t, level, { PERSISTED_MANIFEST: MANIFEST_FILE })
    const secret = 'private-e-mail-of-someone@example.com'
    const id = queryIdOf('UserById')
    await fetch(persistedGetUrl(url, id, { id: '2', note: secret }), {
      headers: { 'x-request-id': `req-get-${level}` }
    })
    const apqHash = 'a'.repeat(64)
    await fetch(
      `${url}/graphql?variables=${encodeURIComponent(JSON.stringify({ q: secret }))}&extensions=${encodeURIComponent(JSON.stringify({ persistedQuery: { version: 1, sha256Hash: apqHash } }))}`,
      { headers: { 'x-request-id': `req-apq-${level}` } }
    )
    await gql(url, `{ user(id: "${secret}") { id } }`, { also: secret }, { 'x-request-id': `req-post-${level}` })
    const log = lines.join('')
    t.notMatch(log, /private-e-mail/, `${level}: neither variables nor bodies reach the logs`)
    if (level === 'info') {
      const access = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request completed')
      t.match(
        access.find((l) => l.reqId === 'req-get-info'),
        { method: 'GET', url: '/graphql', persistedId: id, statusCode: 200 },
        'the path and the persisted id'
      )
      t.match(
        access.find((l) => l.reqId === 'req-apq-info'),
        { url: '/graphql', persistedId: `sha256:${apqHash}` },
        'an APQ hash as the id'
      )
      t.match(access.find((l) => l.reqId === 'req-post-info'), { method: 'POST', url: '/graphql' })
    }
  }
})

test('debug logging: one line per request, with its id and without headers (credentials never logged)', async (t) => {
  const { url, lines, token } = await appLoggingTo(t, 'debug')
  await gql(url, '{ users(limit: 1) { id } }', undefined, {
    authorization: `Bearer ${token}`,
    cookie: 'session=secret-cookie',
    'x-request-id': 'req-def'
  })
  const log = lines.join('')
  t.equal(lines.filter((line) => line.includes('"reqId":"req-def"')).length, 1, `one line for the request:\n${log}`)
  t.match(log, /"reqId":"req-def","method":"POST","url":"\/graphql"/)
  t.notMatch(log, /authorization|cookie/i, 'no header')
  t.notMatch(log, new RegExp(token.split('.')[2]!), 'the token never reaches the logs')
  t.notMatch(log, /secret-cookie/)
})

test('closing finishes in-flight requests', async (t) => {
  const { app, url, store } = await listenTestApp(t)
  const listUsers = store.listUsers.bind(store)
  store.listUsers = async (limit) => {
    await new Promise((resolve) => setTimeout(resolve, 300))
    return listUsers(limit)
  }
  const inFlight = gql(url, '{ users(limit: 2) { name } }')
  await new Promise((resolve) => setTimeout(resolve, 50))
  const started = Date.now()
  const closed = app.close()
  const { status, body } = await inFlight
  t.equal(status, 200)
  t.same(body.data, { users: [{ name: 'Admin' }, { name: 'Ada Lovelace' }] })
  await closed
  // The in-flight response closes its keep-alive connection, so the server does not wait for it to idle out.
  t.ok(Date.now() - started < 5000, `closed promptly (${Date.now() - started} ms)`)
})

test('npm start: the service is the process that receives signals; SIGTERM to npm stops it gracefully', async (t) => {
  const dir = t.testdir()
  const server = await startService(t, { PORT: '0', HOST: '127.0.0.1', SQLITE_PATH: `${dir}/service.db`, JWT_SECRET: TEST_JWT_SECRET, PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY, LOG_LEVEL: 'info', NODE_ENV: 'development' }, { command: ['npm', 'start'] })
  const pid = Number(/"pid":(\d+)/.exec(server.stdout())![1])
  t.not(pid, server.child.pid, 'npm runs the service in a process of its own')
  const alive = () => { try { process.kill(pid, 0); return true } catch { return false } }
  t.teardown(() => { if (alive()) process.kill(pid, 'SIGKILL') })
  const { body } = await gql(server.url, '{ users { name } }')
  t.equal(body.data.users[1].name, 'Ada Lovelace', 'a new embedded store starts with the demo data set in development')
  t.notMatch(server.stderr(), /FSTDEP|DeprecationWarning/, 'no deprecation warning at start')
  // As a process manager does: the signal goes to the process it started (npm), not to a process group.
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0, 'npm exits with the service\'s exit code')
  t.match(server.stdout(), /"signal":"SIGTERM","msg":"shutting down"/, 'the service received SIGTERM and shut down gracefully')
  for (let i = 0; i < 50 && alive(); i++) await new Promise((resolve) => setTimeout(resolve, 100))
  t.notOk(alive(), 'no server process is left running')
  await t.rejects(fetch(`${server.url}/health/live`), 'nothing listens any more')
})

test('the access log is buffered off the request path, yet every line reaches stdout by the time the process exits', async (t) => {
  const dir = t.testdir()
  const server = await startService(t, { PORT: '0', HOST: '127.0.0.1', SQLITE_PATH: `${dir}/service.db`, JWT_SECRET: TEST_JWT_SECRET, PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY, LOG_LEVEL: 'info', NODE_ENV: 'development' })
  const requests = 30
  for (let i = 0; i < requests; i++) {
    // Any route but the health probes, which have no access line (test/ops/readiness.test.ts).
    const response = await fetch(`${server.url}/no-such-route`)
    await response.arrayBuffer()
  }
  // Fewer than a batch's 16 KiB: written by the periodic flush or at exit, not because the batch filled.
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0)
  const access = server.stdout().split('\n').filter((l) => l.includes('"msg":"request completed"')).map((l) => JSON.parse(l))
  t.equal(access.filter((l) => l.url === '/no-such-route').length, requests, 'one access line per request, none lost')
  t.match(server.stdout(), /"msg":"shutting down"/, 'lines logged during shutdown are written too')
})
