// Graceful shutdown keeps idle keep-alive connections open for SHUTDOWN_IDLE_DRAIN_MS: a request that
// a load balancer sends on one just as the shutdown begins is served, not reset (which the balancer
// could only answer with a 502 for a POST).
import { test, type Test } from 'tap'
import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { connect } from 'node:net'
import { listenTestApp, TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { REPO, startService } from '../helpers/server-process.ts'

function post (
  url: string,
  agent: http.Agent
): Promise<{ status: number; connection: string | undefined; reused: boolean; body: string }> {
  const body = JSON.stringify({ query: '{ users(limit: 1) { id } }' })
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}/graphql`,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) }
      },
      (res) => {
        let text = ''
        res.on('data', (c) => {
          text += c
        })
        res.on('end', () =>
          resolve({ status: res.statusCode!, connection: res.headers.connection, reused: req.reusedSocket, body: text })
        )
      }
    )
    req.on('error', reject)
    req.end(body)
  })
}

async function requestDuringShutdown (t: Test, drainMs: string) {
  const { app, url } = await listenTestApp(t, { SHUTDOWN_IDLE_DRAIN_MS: drainMs })
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const first = await post(url, agent)
  t.equal(first.status, 200)
  const closing = app.close()
  await sleep(100) // the shutdown has begun; the connection sits idle in the agent's pool
  const second = await post(url, agent).catch((err: Error) => err)
  await closing
  return second
}

test('a request on an idle keep-alive connection during the drain is served, then the connection closes', async (t) => {
  const started = Date.now()
  const second = await requestDuringShutdown(t, '500')
  t.notOk(second instanceof Error, `answered (${second instanceof Error ? second.message : 'ok'})`)
  if (second instanceof Error) return
  t.equal(second.status, 200)
  t.ok(second.reused, 'on the connection that was idle when the shutdown began')
  t.equal(second.connection, 'close', 'and the connection is closed after it')
  t.ok(Date.now() - started < 3000, 'the shutdown still completes promptly')
})

test('without the drain, that connection is gone as soon as the shutdown begins', async (t) => {
  const second = await requestDuringShutdown(t, '0')
  t.ok(
    second instanceof Error || !second.reused,
    'the idle connection was closed at once (the request could not use it)'
  )
})

test('production shutdown takes SHUTDOWN_IDLE_DRAIN_MS (1 s) with connections open, even one that never sent a request', async (t) => {
  const dir = t.testdir()
  const service = await startService(t, {
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'info',
    SQLITE_PATH: `${dir}/service.db`,
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    PERSISTED_MANIFEST: `${REPO}/persisted/manifest.json`
  })
  const { hostname, port } = new URL(service.url)
  // An idle keep-alive connection (a balancer's pool), and one opened without a request (a preconnect).
  const agent = new http.Agent({ keepAlive: true })
  t.teardown(() => agent.destroy())
  await new Promise((resolve) => http.get(`${service.url}/health/live`, { agent }, (res) => { res.resume(); res.on('end', resolve) }))
  const silent = connect(Number(port), hostname)
  silent.on('error', () => {})
  t.teardown(() => silent.destroy())
  await new Promise((resolve) => silent.on('connect', resolve))

  const started = performance.now()
  service.child.kill('SIGTERM')
  const exit = await Promise.race([service.exited, sleep(5000).then(() => 'still running after 5 s')])
  const ms = performance.now() - started
  t.equal(exit, 0, `a graceful exit (not the SHUTDOWN_GRACE_MS timeout's exit 1):\n${service.stdout()}${service.stderr()}`)
  // Well under SHUTDOWN_GRACE_MS (10 s), whose timeout would exit 1: 1.03-1.09 s here, 1.9 s once on a CI
  // machine whose two CPUs other test files kept busy.
  t.ok(ms >= 900 && ms < 2500, `stopped after the 1 s drain, as docs/settings.md says (took ${Math.round(ms)} ms)`)
})
