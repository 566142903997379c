// Prometheus metrics (on the API port in development, on METRICS_PORT
// when set) and request ids, through a listening server.
import { test } from 'tap'
import { buildApp } from '../../app/app.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { mintToken } from '../../cli/mint-token.ts'
import { capturedLog, gql, listenTestApp, testConfig } from '../helpers/app.ts'
import { collect, eventually, sseClient, wsClient } from '../subscriptions/clients.ts'
import { freePort } from '../helpers/server-process.ts'

/** Parses the text exposition format into `name{labels} value` → number. */
function parseMetrics (text: string): Map<string, number> {
  const samples = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    samples.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return samples
}

function sample (samples: Map<string, number>, name: string, labels: Record<string, string>): number {
  for (const [key, value] of samples) {
    if (!key.startsWith(name + '{')) continue
    if (Object.entries(labels).every(([k, v]) => key.includes(`${k}="${v}"`))) return value
  }
  return 0
}

async function scrape (url: string) {
  const response = await fetch(`${url}/metrics`)
  return { response, samples: parseMetrics(await response.text()) }
}

test('the response cache\'s hits, misses, invalidations and bytes held', async (t) => {
  const { url, token } = await listenTestApp(t)
  const admin = { authorization: `Bearer ${token('1', 'ADMIN')}` }
  const read = () => gql(url, '{ user(id: "2") { name } }')
  t.equal((await read()).headers.get('age'), null, 'executed')
  t.equal((await read()).headers.get('age'), '0', 'a hit')
  const renamed = await gql(url, 'mutation { updateUser(id: "2", input: { name: "Ada King" }) { name } }', undefined, admin)
  t.equal(renamed.body.data.updateUser.name, 'Ada King')
  const after = await read()
  t.equal(after.headers.get('age'), null, 'the write dropped it: executed again')
  t.equal(after.body.data.user.name, 'Ada King')

  const { samples } = await scrape(url)
  t.equal(samples.get('graphql_response_cache_hits_total'), 1)
  t.equal(samples.get('graphql_response_cache_misses_total'), 2)
  t.equal(samples.get('graphql_response_cache_invalidations_total'), 2, 'the write told the cache before and after storing')
  t.equal(samples.get('graphql_response_cache_errors_total'), 0)
  t.ok(samples.get('graphql_response_cache_bytes')! > 0, 'the in-process cache holds the answer it kept')
})

test('GET /metrics exposes requests, latency, GraphQL operations by name and outcome, errors and rate-limit rejections', async (t) => {
  const { url, token } = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '4' })
  const admin = { authorization: `Bearer ${token('1', 'ADMIN')}` }

  t.equal((await gql(url, 'query ListUsers { users(limit: 2) { id } }', undefined, admin)).status, 200)
  t.equal((await gql(url, 'query ListUsers { users(limit: 2) { id } }', undefined, admin)).status, 200)
  const invalid = await gql(url, 'query Broken { noSuchField }', undefined, admin)
  t.equal(invalid.body.errors[0].extensions.code, 'GRAPHQL_VALIDATION_FAILED')
  // A budget of 4 requests: the admin's fourth passes, the fifth is refused with 429.
  t.equal((await gql(url, '{ users(limit: 1) { id } }', undefined, admin)).status, 200)
  const limited = await gql(url, '{ users { id } }', undefined, admin)
  t.equal(limited.status, 429)

  const { response, samples } = await scrape(url)
  t.equal(response.status, 200)
  t.match(response.headers.get('content-type'), /^text\/plain; version=0\.0\.4/)
  t.equal(
    sample(samples, 'graphql_operations_total', {
      operation_name: 'ListUsers',
      operation_type: 'query',
      outcome: 'success'
    }),
    2,
    'two successful ListUsers'
  )
  t.equal(
    sample(samples, 'graphql_operations_total', { operation_name: 'Broken', outcome: 'error' }),
    1,
    'the invalid operation counted as an error, by the name the client sent'
  )
  t.equal(sample(samples, 'graphql_errors_total', { code: 'GRAPHQL_VALIDATION_FAILED' }), 1)
  t.equal(sample(samples, 'rate_limit_rejections_total', { route: '/graphql' }), 1)
  t.ok(sample(samples, 'http_requests_total', { method: 'POST', route: '/graphql', status_code: '200' }) >= 3)
  t.equal(sample(samples, 'http_requests_total', { method: 'POST', route: '/graphql', status_code: '429' }), 1)
  t.ok(
    sample(samples, 'http_request_duration_seconds_count', { method: 'POST', route: '/graphql' }) >= 5,
    'latency histogram observed every request'
  )
  t.ok(
    [...samples.keys()].some((k) => k.startsWith('http_request_duration_seconds_bucket{') && k.includes('le="0.005"')),
    'histogram buckets'
  )
  // The histogram's series, as Prometheus reads one: cumulative buckets ending in +Inf = count, and a sum.
  const buckets = [...samples].filter(([k]) => k.startsWith('http_request_duration_seconds_bucket{') &&
    k.includes('method="POST"') && k.includes('route="/graphql"'))
  t.equal(buckets.length, 14, '13 bounds and +Inf')
  t.ok(buckets.every(([, v], i) => i === 0 || v >= buckets[i - 1]![1]), 'cumulative: never decreasing')
  t.equal(buckets.at(-1)![0], 'http_request_duration_seconds_bucket{le="+Inf",method="POST",route="/graphql"}')
  t.equal(buckets.at(-1)![1], sample(samples, 'http_request_duration_seconds_count', { method: 'POST', route: '/graphql' }))
  t.ok(sample(samples, 'http_request_duration_seconds_sum', { method: 'POST', route: '/graphql' }) > 0, 'a sum of seconds')
  t.match(response.headers.get('content-type'), /version=0\.0\.4/)
  const text = await (await fetch(`${url}/metrics`)).text()
  t.equal(text.match(/^# TYPE http_request_duration_seconds histogram$/gm)?.length, 1, 'one TYPE line for the histogram')
  t.ok([...samples.keys()].some((k) => k.startsWith('process_cpu_user_seconds_total')), 'process metrics')
  t.ok([...samples.keys()].some((k) => k.startsWith('nodejs_eventloop_lag_seconds')), 'event loop lag')

  // /metrics is not rate limited (scraping keeps working while a client is limited) and unmatched URLs share one label.
  await fetch(`${url}/no/such/${Math.random()}`)
  const again = await scrape(url)
  t.equal(again.response.status, 200)
  t.equal(sample(again.samples, 'http_requests_total', { route: '(unmatched)', status_code: '404' }), 1)
  // Counts are handed to prom-client when scraped: a scrape adds what happened since the last one, once.
  for (const [name, labels] of [
    ['graphql_operations_total', { operation_name: 'ListUsers', operation_type: 'query', outcome: 'success' }],
    ['http_requests_total', { method: 'POST', route: '/graphql', status_code: '429' }],
    ['rate_limit_rejections_total', { route: '/graphql' }]
  ] as const) {
    t.equal(sample(again.samples, name, labels), sample(samples, name, labels), `${name} unchanged by a second scrape`)
  }
  t.equal(
    (await gql(url, 'query ListUsers { users(limit: 1) { id } }', undefined, { authorization: `Bearer ${token('2')}` }))
      .status,
    200
  )
  const third = await scrape(url)
  t.equal(
    sample(third.samples, 'graphql_operations_total', {
      operation_name: 'ListUsers',
      operation_type: 'query',
      outcome: 'success'
    }),
    3,
    'and counts what came after it'
  )
})

test('operation names are bounded: a client cannot grow the label set without limit', async (t) => {
  const { url } = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '1000' })
  for (let i = 0; i < 210; i++) await gql(url, `query Op${i} { users(limit: 1) { id } }`)
  await gql(url, '{ users(limit: 1) { id } }')
  const { samples } = await scrape(url)
  const names = new Set([...samples.keys()].filter((k) => k.startsWith('graphql_operations_total{')).map((k) => /operation_name="([^"]*)"/.exec(k)![1]))
  t.ok(names.size <= 203, `at most 200 names + (other), (anonymous), (invalid): ${names.size}`)
  t.ok(names.has('(other)'))
  t.ok(names.has('(anonymous)'))
})

test('every response carries a request id; the load balancer\'s x-request-id is kept; log lines carry it', async (t) => {
  const { lines, stream } = capturedLog()
  const config = testConfig({ LOG_LEVEL: 'info', TRUST_PROXY: '127.0.0.1' })
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  const app = await buildApp(config, { store, logger: { stream } })
  t.teardown(async () => { await app.close(); await store.close() })
  const url = await app.listen({ host: '127.0.0.1', port: 0 })

  const first = await gql(url, '{ users(limit: 1) { id } }', undefined, {
    authorization: `Bearer ${mintToken(config.jwt, '2', 'USER')}`
  })
  const generated = first.headers.get('x-request-id')
  t.match(generated, /^[0-9a-f-]{36}$/, 'a UUID when the caller sends none')
  const second = await gql(url, '{ users(limit: 1) { id } }', undefined, { 'x-request-id': 'lb-0123456789abcdef' })
  t.equal(
    second.headers.get('x-request-id'),
    'lb-0123456789abcdef',
    "the load balancer's id is kept, so its log and ours line up"
  )

  const logged = lines.map((l) => JSON.parse(l) as { reqId?: string; msg?: string })
  t.ok(logged.some((l) => l.reqId === generated && l.msg === 'request completed'), 'the generated id is in the log')
  t.ok(
    logged.some((l) => l.reqId === 'lb-0123456789abcdef' && l.msg === 'request completed'),
    'the supplied id is in the log'
  )
})

test('open subscriptions are a gauge by transport, back to 0 when they end', async (t) => {
  const { url, token } = await listenTestApp(t)
  const ws = wsClient(url, { authToken: `Bearer ${token('2')}` })
  t.teardown(() => ws.dispose())
  const query = 'subscription { messageAdded(roomId: "metrics") { id } }'
  const overWs = collect(ws, query)
  const overSse = collect(sseClient(url, `Bearer ${token('3')}`), query)
  const open = async (transport: string) =>
    sample((await scrape(url)).samples, 'graphql_open_subscriptions', { transport })
  await eventually(
    async () => (await open('ws')) === 1 && (await open('sse')) === 1,
    5000,
    'one subscription open on each transport'
  )
  t.match((await (await fetch(`${url}/metrics`)).text()), /\ngraphql_websocket_connections 1\n/, 'one WebSocket connection')
  overWs.dispose()
  overSse.dispose()
  await eventually(async () => (await open('ws')) === 0 && (await open('sse')) === 0, 5000, 'both closed')
  t.pass('the gauge falls back to 0')
})

test('SOAP faults are counted by route and status', async (t) => {
  const { url } = await listenTestApp(t)
  const fault = await fetch(`${url}/v1/UserService`, {
    method: 'POST',
    headers: { 'content-type': 'text/xml; charset=utf-8' },
    body: '<not-an-envelope/>'
  })
  t.ok(fault.status >= 400, `a fault (${fault.status})`)
  t.match(await fault.text(), /Fault/)
  const { samples } = await scrape(url)
  t.equal(sample(samples, 'soap_faults_total', { route: '/v1/UserService', status_code: String(fault.status) }), 1)
  t.equal(sample(samples, 'soap_faults_total', { route: '/v2/UserService' }), 0)
})

test('operations are counted by the operation that executed, even when the request does not name it up front', async (t) => {
  const { url } = await listenTestApp(t)
  // The document opens with a fragment: only the executed operation tells its name.
  const { status } = await gql(url, 'fragment F on User { id } query LateName { users(limit: 1) { ...F } }')
  t.equal(status, 200)
  const { samples } = await scrape(url)
  t.equal(
    sample(samples, 'graphql_operations_total', {
      operation_name: 'LateName',
      operation_type: 'query',
      outcome: 'success'
    }),
    1
  )
})

test('production: /metrics is not served on the API port (METRICS_PORT unset)', async (t) => {
  const { url } = await listenTestApp(t, { NODE_ENV: 'production' })
  const response = await fetch(`${url}/metrics`)
  t.equal(response.status, 404)
  t.match(await response.json(), { errors: [{ extensions: { code: 'NOT_FOUND' } }] })
})

for (const profile of ['production', 'development']) {
  test(`${profile}: METRICS_PORT serves the metrics on a port of their own, and only there`, async (t) => {
    const port = await freePort()
    const { url, app } = await listenTestApp(t, { NODE_ENV: profile, METRICS_PORT: String(port) })
    await fetch(`${url}/health/live`)
    t.equal((await fetch(`${url}/metrics`)).status, 404, 'not on the API port')
    const metricsUrl = `http://127.0.0.1:${port}`
    const { response, samples } = await scrape(metricsUrl)
    t.equal(response.status, 200)
    t.match(response.headers.get('content-type'), /^text\/plain; version=0\.0\.4/)
    t.equal(
      sample(samples, 'http_requests_total', { method: 'GET', route: '/health/live', status_code: '200' }),
      1,
      "the API port's requests are counted"
    )
    t.equal((await fetch(`${metricsUrl}/graphql`)).status, 404, 'nothing else on the metrics port')
    await app.close()
    await t.rejects(fetch(`${metricsUrl}/metrics`), 'closed with the app')
  })
}
