// /health/ready is unbudgeted (load balancers probe it), so a flood of calls must not become a flood
// of store and Redis pings: calls share one check, and a finished check answers for READINESS_CACHE_MS.
// Nor a flood of log lines: the probes have no access line (metrics count them).
import { test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildApp } from '../../app/app.ts'
import { capturedLog, listenTestApp, testConfig } from '../helpers/app.ts'
import { countingStore } from '../helpers/counting-store.ts'

test('200 concurrent and 200 rapid calls to /health/ready make one store check and one of every other dependency', async (t) => {
  const { store, calls } = countingStore()
  t.teardown(() => store.close())
  const { app, url } = await listenTestApp(t, { READINESS_CACHE_MS: '60000', MAX_CONNECTIONS_PER_IP: '0' }, { store })
  // Stands for Redis (registered the same way by plugins/redis.ts when REDIS_URL is set).
  let redisPings = 0
  app.readinessChecks.set('redis', async () => { redisPings++; await sleep(50) })
  const pings = () => calls.filter((call) => call.method === 'ping').length
  const before = pings()

  const concurrent = await Promise.all(
    Array.from({ length: 200 }, () =>
      fetch(`${url}/health/ready`).then(async (r) => ({ status: r.status, body: await r.json() }))
    )
  )
  t.same([...new Set(concurrent.map((r) => r.status))], [200])
  t.match(concurrent[0]!.body, { status: 'ready', checks: { store: 'ok', redis: 'ok' } })
  const rapid: number[] = []
  for (let i = 0; i < 200; i++) rapid.push((await fetch(`${url}/health/ready`)).status)
  t.same([...new Set(rapid)], [200], 'the rapid calls are answered from the shared verdict')
  t.equal(pings() - before, 1, 'one store ping for 400 calls')
  t.equal(redisPings, 1, 'one Redis ping for 400 calls')
})

test('after READINESS_CACHE_MS the next call checks again, and sees a failure', async (t) => {
  const { store, calls } = countingStore()
  t.teardown(() => store.close())
  const { url } = await listenTestApp(t, { READINESS_CACHE_MS: '200' }, { store })
  const pings = () => calls.filter((call) => call.method === 'ping').length
  t.equal((await fetch(`${url}/health/ready`)).status, 200)
  const after = pings()
  store.ping = async () => { throw new Error('database is down') }
  t.equal((await fetch(`${url}/health/ready`)).status, 200, 'within the interval: the verdict just made')
  await sleep(300)
  const failing = await fetch(`${url}/health/ready`)
  t.equal(failing.status, 503, 'checked again once the interval passed')
  t.match(await failing.json(), { status: 'not ready', checks: { store: 'failing: database is down' } })
  t.equal(pings(), after + 1, 'one more check: the call after the interval')
})

test('a flood of health probes costs the cheapest path: one store check, no access line, still counted in metrics', async (t) => {
  const { store, calls } = countingStore()
  t.teardown(() => store.close())
  const { lines, stream } = capturedLog()
  // Production's logging (info: the access log's hand-made path); metrics on the API port as in development.
  const config = testConfig({ LOG_LEVEL: 'info', READINESS_CACHE_MS: '60000', MAX_CONNECTIONS_PER_IP: '0' })
  const app = await buildApp(config, { store, logger: { stream } })
  t.teardown(() => app.close())
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  const pings = () => calls.filter((call) => call.method === 'ping').length

  for (const path of ['/health/ready', '/health/live']) {
    const statuses = await Promise.all(Array.from({ length: 100 }, () => fetch(`${url}${path}`).then(async (r) => {
      await r.arrayBuffer()
      return `${r.status} ${r.headers.get('content-type')}`
    })))
    t.same([...new Set(statuses)], ['200 application/json; charset=utf-8'], path)
  }
  t.same(await (await fetch(`${url}/health/ready`)).json(), { status: 'ready', checks: { store: 'ok', 'app deployments': 'ok' } })
  t.equal(pings(), 1, 'one store ping for 101 readiness calls')
  await fetch(`${url}/no-such-route`)
  await new Promise((resolve) => setTimeout(resolve, 300)) // the log's batch is handed on every 200 ms
  const accessLines = lines.filter((line) => line.includes('"msg":"request completed"'))
  t.match(accessLines, [/"url":"\/no-such-route"/], 'only the other request has an access line')
  t.equal(accessLines.length, 1, `no access line for the probes:\n${accessLines.slice(0, 3).join('\n')}`)
  const metrics = await (await fetch(`${url}/metrics`)).text()
  t.match(metrics, /http_requests_total\{method="GET",route="\/health\/ready",status_code="200"\} 101/, 'the probes are counted')
})
