// Faults during traffic, on real processes: Redis stopped and restarted, PostgreSQL connections killed
// (pg_terminate_backend) and PostgreSQL unreachable, an instance killed with SIGKILL. Throughout, every
// request is answered (never hangs) with data or a clear error (a catalogue code, no stack, no internal
// message), readiness reflects each outage, the service recovers by itself, and no acknowledged write
// is lost. While Redis is down, rate limits are enforced by each instance on its own traffic.
import { test } from 'tap'
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { collect, wsClient } from '../subscriptions/clients.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { PG_URL, SOAP_PUBLIC_URL, eventually, gql, newUser, request, soapEnvelope, startCluster, startPrivateRedis, startTcpLink, terminateBackends, token, type Instance } from './harness.ts'

const REQUEST_LIMIT = 20
const CLIENT_TIMEOUT_MS = 20_000
/** Anything in an answer that belongs in the logs only. */
const LEAK = /\n\s+at |\.ts:\d+|node_modules|ECONNREFUSED|ECONNRESET|terminating connection|Connection terminated|getaddrinfo|stack/i

interface Outcome {
  phase: string
  kind: 'query' | 'user' | 'message'
  key: string
  status: number
  code?: string
  id?: string
  ms: number
  text: string
  upstream: string
}

/** Mixed traffic through the load balancer until stopped; every identity stays well under the request limit. */
function startTraffic (lbUrl: string, run: string, concurrency: number) {
  const outcomes: Outcome[] = []
  let phase = 'warm-up'
  let running = true
  let n = 0
  const one = async () => {
    const i = n++
    const kind = (['query', 'user', 'message'] as const)[i % 3]!
    const key = `${run}-${i}`
    const started = performance.now()
    let outcome: Omit<Outcome, 'ms' | 'phase'>
    try {
      const response = kind === 'query'
        ? await gql(lbUrl, '{ users(limit: 3) { id name } }', undefined, { token: token(`bg-${i % 2000}`), timeoutMs: CLIENT_TIMEOUT_MS })
        : kind === 'user'
          ? await gql(lbUrl, 'mutation Create($input: CreateUserInput!) { createUser(input: $input) { id } }', { input: { name: `Fault ${i}`, email: `${key}@faults.example.com` } }, { token: token(`bg-admin-${i}`, 'ADMIN'), timeoutMs: CLIENT_TIMEOUT_MS })
          : await gql(lbUrl, 'mutation Post($content: String!) { postMessage(roomId: "faults", content: $content) { id } }', { content: key }, { token: token(`bg-${i % 2000}`), timeoutMs: CLIENT_TIMEOUT_MS })
      const data = response.body?.data
      outcome = {
        kind,
        key,
        status: response.status,
        code: response.body?.errors?.[0]?.extensions?.code,
        id: data?.createUser?.id ?? data?.postMessage?.id ?? (data?.users ? 'read' : undefined),
        text: JSON.stringify(response.body),
        upstream: String(response.headers['x-upstream'] ?? '')
      }
    } catch (err) {
      outcome = { kind, key, status: 0, code: 'NO_ANSWER', text: (err as Error).message, upstream: '' }
    }
    outcomes.push({ ...outcome, phase, ms: Math.round(performance.now() - started) })
  }
  const workers = Array.from({ length: concurrency }, async () => {
    while (running) {
      await one()
      await sleep(5)
    }
  })
  return {
    outcomes,
    // eslint-disable-next-line accessor-pairs -- the phase is only ever set (it tags the outcomes)
    set phase (name: string) { phase = name },
    async stop () { running = false; await Promise.all(workers) }
  }
}

async function readiness (instance: Instance) {
  const response = await request(`${instance.url}/health/ready`, { timeoutMs: 5000 })
  return { status: response.status, body: response.json() as { status: string; checks: Record<string, string> } }
}

test('faults during traffic: answered clearly, readiness reflects them, recovery by itself, nothing acknowledged lost', async (t) => {
  const redis = await startPrivateRedis(t)
  const pgPort = Number(new URL(PG_URL).port || 5432)
  const link = await startTcpLink(t, pgPort)
  const pgThroughLink = PG_URL.replace(`:${pgPort}`, `:${link.port}`)
  const { lb, instances, db, applicationName } = await startCluster(t, {
    redisUrl: redis.url,
    env: {
      DATABASE_URL: pgThroughLink,
      RATE_LIMIT_REQUESTS: String(REQUEST_LIMIT),
      RATE_LIMIT_WINDOW_MS: '60000',
      LOG_LEVEL: 'warn',
      SHUTDOWN_GRACE_MS: '5000'
    }
  })
  const [a, b] = instances as [Instance, Instance]
  // Users for the background traffic: 2000 identities, so none of them reaches the request limit.
  await db.query(
    "INSERT INTO users (id, name, email, created_at) SELECT 'bg-' || g, 'Background ' || g, 'bg-' || g || '@faults.example.com', now() FROM generate_series(0, 1999) AS g"
  )
  const run = db.schema.replace(/_/g, '-')
  const traffic = startTraffic(lb.url, run, 6)
  t.teardown(() => traffic.stop())
  // An APQ registration made while Redis is up.
  const apqQuery = `query ApqOutage { outage_${randomBytes(3).toString('hex')}: user(id: "2") { name } }`
  const apqExtensions = { persistedQuery: { version: 1, sha256Hash: sha256Hex(apqQuery) } }
  const apqByHash = () =>
    request(`${lb.pinned[1]}/graphql?extensions=${encodeURIComponent(JSON.stringify(apqExtensions))}`, {
      from: '127.0.0.40',
      headers: { 'apollo-require-preflight': 'true' }
    })
  await request(`${lb.pinned[0]}/graphql`, {
    method: 'POST',
    from: '127.0.0.40',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query: apqQuery, extensions: apqExtensions })
  })
  t.equal((await apqByHash()).status, 200, 'APQ hit on the other instance while Redis is up')
  await sleep(1000)

  await t.test('Redis stopped: readiness says so, requests are still answered, rate limits hold per instance', async (t) => {
    traffic.phase = 'redis-down'
    await redis.stop()
    for (const instance of instances) {
      const ready = await eventually(`${instance.name} not ready without Redis`, async () => {
        const r = await readiness(instance)
        return r.status === 503 ? r : null
      })
      t.match(ready.body, { status: 'not ready', checks: { store: 'ok', redis: /^failing/ } }, `${instance.name}: readiness names Redis`)
    }
    // The chosen behaviour: each instance counts on its own while Redis is away (availability over
    // strictness: neither down nor unlimited). One client on instance a: limited after REQUEST_LIMIT;
    // the same client on instance b still has b's own budget.
    const limited = token('rate-check')
    const onA: number[] = []
    for (let i = 0; i <= REQUEST_LIMIT; i++) { onA.push((await gql(lb.pinned[0]!, '{ users(limit: 1) { id } }', undefined, { token: limited })).status) }
    t.same(onA, [...Array(REQUEST_LIMIT).fill(200), 429], `instance a enforces ${REQUEST_LIMIT} requests on its own`)
    t.equal(
      (await gql(lb.pinned[1]!, '{ users(limit: 1) { id } }', undefined, { token: limited })).status,
      200,
      'instance b counts separately'
    )

    // SOAP: WS-Security nonces cannot be checked for replays without Redis, so the binding fails closed, clearly.
    const soap = await request(`${lb.url}/v1/UserService`, {
      method: 'POST',
      from: '127.0.0.41',
      body: soapEnvelope('GetUser', '<id>2</id>'),
      headers: { 'content-type': 'text/xml; charset=utf-8', soapaction: `"${SOAP_PUBLIC_URL}/v1/UserService/GetUser"` }
    })
    t.equal(soap.status, 500)
    t.match(soap.text, /<faultcode>soap:Server<\/faultcode>/)
    t.match(soap.text, /SERVICE_UNAVAILABLE/)
    t.notMatch(soap.text, LEAK, 'no internals in the fault')
    // APQ: the shared registry is unreachable; an instance answers a hash from its own copy when it has
    // one, otherwise with a miss, and the client resends the query, as on any miss.
    const byHash = (await apqByHash()).json()
    t.ok(
      byHash.data || byHash.errors?.[0]?.extensions?.code === 'PERSISTED_QUERY_NOT_FOUND',
      `APQ by hash: served or a miss (${JSON.stringify(byHash)})`
    )
    const resent = await request(`${lb.pinned[1]}/graphql`, {
      method: 'POST',
      from: '127.0.0.40',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: apqQuery, extensions: apqExtensions })
    })
    t.same(Object.values(resent.json().data), [{ name: 'Ada Lovelace' }], 'and the resent query is served')
    await sleep(1500)

    // A graceful shutdown does not wait for Redis to come back (nginx sends the traffic to a meanwhile).
    const stopping = performance.now()
    const exit = await b.stop()
    const stopMs = Math.round(performance.now() - stopping)
    t.equal(exit.code, 0, 'instance b shut down cleanly with Redis down', { output: b.output().slice(-4000) })
    t.ok(stopMs < 5000, `and promptly (${stopMs} ms)`)

    traffic.phase = 'redis-back'
    await redis.start()
    await b.start()
    for (const instance of instances) {
      await eventually(
        `${instance.name} ready again once Redis is back`,
        async () => (await readiness(instance)).status === 200,
        20_000
      )
    }
    t.pass('both instances ready again, by themselves')
  })

  await t.test('after Redis returns, pub/sub works across instances again', async (t) => {
    traffic.phase = 'redis-recovered'
    const room = `after-redis-${randomBytes(3).toString('hex')}`
    const ws = wsClient(lb.pinned[1]!, { authToken: `Bearer ${token(await newUser(lb.url, 'after-redis-subscriber'))}` })
    t.teardown(() => ws.dispose())
    const received = collect(ws, `subscription { messageAdded(roomId: "${room}") { content } }`)
    await eventually('the subscription open on b', async () => /graphql_open_subscriptions\{transport="ws"\} 1/.test((await request(b.metricsUrl)).text))
    // The subscription may reach b's Redis subscriber connection a moment after it re-subscribed: post until delivered.
    await eventually('a message posted on a delivered on b', async () => {
      await gql(
        lb.pinned[0]!,
        'mutation Post($room: String!) { postMessage(roomId: $room, content: "after the outage") { id } }',
        { room },
        { token: token('bg-1') }
      )
      return received.outcome.values.length > 0
    }, 15_000, 500)
    t.same(received.outcome.values[0], { data: { messageAdded: { content: 'after the outage' } } })
  })

  await t.test('PostgreSQL connections killed (pg_terminate_backend) during traffic', async (t) => {
    traffic.phase = 'pg-killed'
    let ended = 0
    for (let i = 0; i < 5; i++) {
      ended += await terminateBackends(applicationName)
      await sleep(300)
    }
    t.ok(ended > 0, `${ended} of the instances' connections ended`)
    traffic.phase = 'pg-killed-after'
    await sleep(1000)
    const after = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        gql(lb.url, '{ users(limit: 1) { id } }', undefined, { token: token(`pg-check-${i}`) })
      )
    )
    t.same(after.map((r) => r.status), Array(10).fill(200), 'served again on fresh connections')
    for (const instance of instances) t.equal((await readiness(instance)).status, 200, `${instance.name} ready`)
  })

  await t.test('PostgreSQL unreachable: readiness says so, requests fail clearly and fast, recovery when it returns', async (t) => {
    traffic.phase = 'pg-down'
    await link.cut()
    for (const instance of instances) {
      const ready = await eventually(`${instance.name} not ready without PostgreSQL`, async () => {
        const r = await readiness(instance)
        return r.status === 503 ? r : null
      })
      t.match(ready.body, { status: 'not ready', checks: { store: /^failing/, redis: 'ok' } }, `${instance.name}: readiness names the store`)
    }
    await sleep(1500)
    traffic.phase = 'pg-back'
    await link.restore()
    for (const instance of instances) {
      await eventually(
        `${instance.name} ready again once PostgreSQL is back`,
        async () => (await readiness(instance)).status === 200,
        20_000
      )
    }
    t.pass('both instances ready again, by themselves')
  })

  await t.test('an instance killed with SIGKILL: the other serves, the restarted one rejoins', async (t) => {
    traffic.phase = 'instance-killed'
    await a.kill()
    await sleep(1500)
    traffic.phase = 'instance-restarted'
    await a.start()
    const since = traffic.outcomes.length
    await eventually(
      'traffic reaching the restarted instance',
      () => traffic.outcomes.slice(since).some((o) => o.upstream.endsWith(`:${a.port}`) && o.status === 200),
      15_000
    )
    t.pass('the restarted instance serves again (nginx retries it after fail_timeout)')
  })

  traffic.phase = 'steady'
  await sleep(2000)
  await traffic.stop()

  // The record: per phase, what was sent and how it was answered.
  const phases = new Map<string, Outcome[]>()
  for (const o of traffic.outcomes) phases.set(o.phase, [...(phases.get(o.phase) ?? []), o])
  for (const [phase, list] of phases) {
    const answers: Record<string, number> = {}
    for (const o of list) {
      const label = o.status === 200 && o.id ? '200 ok' : `${o.status} ${o.code ?? '?'}`
      answers[label] = (answers[label] ?? 0) + 1
    }
    t.comment(
      `faults ${phase}: sent=${list.length} maxMs=${Math.max(...list.map((o) => o.ms))} answers=${JSON.stringify(answers)}`
    )
  }

  const unanswered = traffic.outcomes.filter((o) => o.status === 0)
  t.same(
    unanswered.map((o) => `${o.phase}: ${o.text}`),
    [],
    'every request was answered (none hung or was dropped without an answer)'
  )
  const unclear = traffic.outcomes.filter((o) => !(o.status === 200 && o.id) && (typeof o.code !== 'string' || !/^[A-Z_]+$/.test(o.code)))
  t.same(
    unclear.slice(0, 5).map((o) => `${o.phase}: ${o.status} ${o.text}`),
    [],
    'every failure carries a catalogue code'
  )
  const leaking = traffic.outcomes.filter((o) => LEAK.test(o.text))
  t.same(leaking.slice(0, 5).map((o) => `${o.phase}: ${o.text}`), [], 'no answer leaks a stack or an internal message')
  const steady = phases.get('steady') ?? []
  t.ok(
    steady.length > 0 && steady.every((o) => o.status === 200 && o.id),
    `after every fault, all traffic succeeds again (${steady.length} requests)`
  )

  // Writes: every acknowledged one is in PostgreSQL exactly once.
  const writes = traffic.outcomes.filter((o) => o.kind !== 'query')
  const acknowledged = writes.filter((o) => o.status === 200 && o.id)
  const users = await db.query<{ email: string }>('SELECT email FROM users WHERE email LIKE $1', [
    `${run}-%@faults.example.com`
  ])
  const messages = await db.query<{ content: string }>('SELECT content FROM messages WHERE room_id = $1', ['faults'])
  const stored = new Map<string, number>()
  for (const key of [...users.rows.map((r) => r.email.split('@')[0]!), ...messages.rows.map((r) => r.content)]) {
    stored.set(key, (stored.get(key) ?? 0) + 1)
  }
  const lost = acknowledged.filter((o) => !stored.has(o.key))
  const duplicated = [...stored.values()].filter((count) => count > 1).length
  const failedButWritten = writes.filter((o) => !(o.status === 200 && o.id) && stored.has(o.key)).length
  t.comment(
    `faults writes: sent=${writes.length} acknowledged=${acknowledged.length} found=${acknowledged.length - lost.length} lost=${lost.length} duplicated=${duplicated} failedButWritten=${failedButWritten}`
  )
  t.equal(lost.length, 0, 'lost = 0')
  t.equal(duplicated, 0, 'no write applied twice')
})
