// The two gauges the alerts on a lost dependency read (deploy/prometheus/alerts.yml), through a listening
// service and real outages: `event_bus_connected` (Redis pub/sub, which carries subscriptions' events
// between instances) and `graphql_response_cache_serving` (the response cache stops answering while the
// store's change feed, PostgreSQL's LISTEN connection, is down).
import { test } from 'tap'
import { randomBytes } from 'node:crypto'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { listenTestApp } from '../helpers/app.ts'
import { freshSchema, postgresRelay } from '../helpers/postgres.ts'
import { startPrivateRedis } from '../cluster/harness.ts'
import { eventually } from '../subscriptions/clients.ts'

/** The value of the one sample of `name` whose labels include `labels` (undefined when there is none). */
async function gauge (url: string, name: string, labels = ''): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith(name) && l.slice(name.length).match(/^(\{[^}]*\})? /) && l.includes(labels))
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1))
}

test('event_bus_connected: 1 in process; with Redis, 0 while Redis is down and 1 again once it is back', async (t) => {
  const alone = await listenTestApp(t)
  t.equal(await gauge(alone.url, 'event_bus_connected'), 1, 'an in-process bus is always connected')

  const redis = await startPrivateRedis(t)
  const { url } = await listenTestApp(t, { REDIS_URL: redis.url, REDIS_PREFIX: `bus${randomBytes(3).toString('hex')}:` })
  t.equal(await gauge(url, 'event_bus_connected'), 1)
  await redis.stop()
  await eventually(async () => (await gauge(url, 'event_bus_connected')) === 0, 10_000, 'the gauge to read 0')
  t.pass('0 while Redis is down')
  await redis.start()
  await eventually(async () => (await gauge(url, 'event_bus_connected')) === 1, 15_000, 'the gauge to read 1 again')
  t.pass('1 once the pub/sub connections are back')
})

test('graphql_response_cache_serving: 0 while the PostgreSQL change feed is down, 1 once it listens again; no series without a cache', async (t) => {
  const relay = await postgresRelay(t)
  const schema = await freshSchema(t, 'feed')
  const store = await openPostgresStore({ url: relay.url, poolSize: 2, schema, ownWrites: true })
  t.teardown(() => store.close())
  const { url } = await listenTestApp(t, { REDIS_URL: 'redis://127.0.0.1:6379', REDIS_PREFIX: `feed${randomBytes(3).toString('hex')}:` }, { store })
  await eventually(async () => (await gauge(url, 'graphql_response_cache_serving', 'store="redis"')) === 1, 10_000, 'the feed to listen')
  t.pass('1 while the change feed listens')
  relay.cut()
  await eventually(async () => (await gauge(url, 'graphql_response_cache_serving', 'store="redis"')) === 0, 10_000, 'the gauge to read 0')
  t.pass('0 while PostgreSQL is unreachable: the cache answers nothing')
  await relay.restore()
  await eventually(async () => (await gauge(url, 'graphql_response_cache_serving', 'store="redis"')) === 1, 15_000, 'the gauge to read 1 again')
  t.pass('1 once the feed listens again')

  const uncached = await listenTestApp(t, { RESPONSE_CACHE: 'false' })
  t.equal(await gauge(uncached.url, 'graphql_response_cache_serving'), undefined, 'without a cache there is no series')
  const embedded = await listenTestApp(t)
  t.equal(await gauge(embedded.url, 'graphql_response_cache_serving', 'store="memory"'), 1, 'the embedded store\'s cache answers')
})

test('an event stream is counted in http_requests_total but not timed: the p99 alert reads requests, not subscriptions', async (t) => {
  const { url } = await listenTestApp(t)
  const stream = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ query: 'subscription { count(target: 2) }' })
  })
  t.match(stream.headers.get('content-type'), /^text\/event-stream/, 'the headers still reach the client')
  t.match(await stream.text(), /event: complete/, 'a stream of about a second')
  const query = await fetch(`${url}/graphql`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"query":"{ users { id } }"}' })
  t.equal(query.status, 200)
  const labels = 'method="POST",route="/graphql"'
  t.equal(await gauge(url, 'http_requests_total', `${labels},status_code="200"`), 2, 'both requests counted')
  t.equal(await gauge(url, 'http_request_duration_seconds_count', labels), 1, 'only the query timed')
  t.ok((await gauge(url, 'http_request_duration_seconds_sum', labels))! < 0.5, 'and not the stream\'s second')
})
