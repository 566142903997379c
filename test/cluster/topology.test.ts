// Two real instances behind a real nginx, on the machine's PostgreSQL and Redis: what one instance
// does, the other sees; shared limits are shared; client addresses come from the load balancer only.
import { test } from 'tap'
import { randomBytes } from 'node:crypto'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { collect, sseClient, wsClient } from '../subscriptions/clients.ts'
import {
  SOAP_PUBLIC_URL,
  eventually,
  gql,
  newUser,
  request,
  soapEnvelope,
  startCluster,
  token,
  type Cluster
} from './harness.ts'

const REQUEST_LIMIT = 8
const COST_LIMIT = 50

test('two instances behind nginx', async (t) => {
  const cluster: Cluster = await startCluster(t, {
    env: {
      RATE_LIMIT_REQUESTS: String(REQUEST_LIMIT),
      RATE_LIMIT_COST: String(COST_LIMIT),
      RATE_LIMIT_WINDOW_MS: '60000'
    }
  })
  const { lb, instances } = cluster
  const [a, b] = instances as [typeof instances[0], typeof instances[0]]
  t.comment(`instances ${a.url} ${b.url}, nginx ${lb.url} (pinned ${lb.pinned.join(', ')})`)

  await t.test('round robin reaches both instances, and readiness answers through the load balancer', async (t) => {
    const upstreams = new Set<string>()
    for (let i = 0; i < 4; i++) {
      const ready = await request(`${lb.url}/health/ready`, { from: '127.0.0.10' })
      t.equal(ready.status, 200)
      upstreams.add(String(ready.headers['x-upstream']))
    }
    t.same([...upstreams].sort(), [`127.0.0.1:${a.port}`, `127.0.0.1:${b.port}`].sort(), 'both instances answered')
  })

  await t.test('a user created on one instance is read on the other (shared PostgreSQL)', async (t) => {
    const admin = token('1', 'ADMIN')
    const created = await gql(lb.pinned[0]!, 'mutation Create($input: CreateUserInput!) { createUser(input: $input) { id name email } }',
      { input: { name: 'Cross Instance', email: 'cross.instance@example.com' } }, { token: admin, from: '127.0.0.11' })
    t.equal(created.status, 200)
    t.equal(created.headers['x-upstream'], `127.0.0.1:${a.port}`)
    const id = created.body.data.createUser.id
    const read = await gql(
      lb.pinned[1]!,
      'query One($id: ID!) { user(id: $id) { id name email } }',
      { id },
      { token: admin, from: '127.0.0.11' }
    )
    t.equal(read.headers['x-upstream'], `127.0.0.1:${b.port}`)
    t.same(read.body.data, { user: { id, name: 'Cross Instance', email: 'cross.instance@example.com' } })
  })

  await t.test('the request limit is shared: a client spread over both instances gets 429 after the limit', async (t) => {
    const statuses: number[] = []
    const upstreams = new Set<string>()
    for (let i = 0; i < REQUEST_LIMIT + 2; i++) {
      // A forged X-Forwarded-For on every request: the load balancer replaces it, so it changes nothing.
      const response = await gql(lb.url, '{ users(limit: 1) { id } }', undefined, {
        from: '127.0.0.12',
        headers: { 'x-forwarded-for': `10.9.8.${i}` }
      })
      statuses.push(response.status)
      upstreams.add(String(response.headers['x-upstream']))
      if (response.status === 429) {
        t.equal(response.body.errors[0].extensions.code, 'RATE_LIMITED')
        t.ok(Number(response.headers['retry-after']) > 0, 'Retry-After')
      }
    }
    t.equal(upstreams.size, 2, 'both instances served this client')
    t.same(
      statuses,
      [...Array(REQUEST_LIMIT).fill(200), 429, 429],
      `${REQUEST_LIMIT} requests pass in total, not per instance`
    )

    // Another client address (as the load balancer reports it) has a budget of its own: the instances
    // key on the forwarded address, not on the load balancer's own (every connection comes from 127.0.0.2).
    const other = await gql(lb.url, '{ users(limit: 1) { id } }', undefined, { from: '127.0.0.13' })
    t.equal(other.status, 200, 'a different client is not limited')
  })

  await t.test('the cost-unit limit is shared across instances', async (t) => {
    const user = token('3', 'USER')
    const spent: { status: number; remaining?: number; upstream: string; code?: string }[] = []
    for (let i = 0; i < 5; i++) {
      const response = await gql(lb.url, '{ users(limit: 20) { id } }', undefined, { token: user, from: '127.0.0.14' })
      spent.push({
        status: response.status,
        remaining: response.body.extensions?.cost?.remaining,
        upstream: String(response.headers['x-upstream']),
        code: response.body.errors?.[0]?.extensions?.code
      })
    }
    t.comment(JSON.stringify(spent))
    t.equal(new Set(spent.map((s) => s.upstream)).size, 2, 'both instances served')
    const remaining = spent.filter((s) => s.status === 200).map((s) => s.remaining!)
    t.ok(
      remaining.length >= 1 && remaining.every((r, i) => i === 0 || r < remaining[i - 1]!),
      `remaining units fall across instances: ${remaining.join(', ')}`
    )
    const refused = spent.filter((s) => s.status === 429)
    t.ok(refused.length >= 1, 'refused once the shared cost budget is spent')
    t.ok(refused.every((s) => s.code === 'RATE_LIMITED'))
  })

  await t.test('client IPs come from the load balancer\'s X-Forwarded-For only', async (t) => {
    // Through nginx, from 127.0.0.15, with a forged X-Forwarded-For: the instance sees 127.0.0.15.
    const through = await gql(lb.url, '{ users(limit: 1) { id } }', undefined, {
      from: '127.0.0.15',
      headers: { 'x-forwarded-for': '6.6.6.6' }
    })
    const throughId = String(through.headers['x-request-id'])
    t.match(throughId, /^[0-9a-f]{32}$/, 'the request id is nginx\'s $request_id')
    const throughLog = await eventually('the request in an instance log', () =>
      [...a.logs, ...b.logs].find((l) => l.reqId === throughId && l.ip)
    )
    t.equal(throughLog.ip, '127.0.0.15', 'the address nginx saw, not the forged one')
    t.ok(lb.accessLog().some((line) => line.includes(`request_id=${throughId}`)), 'the same id in nginx\'s access log')

    // Straight to an instance (not from the load balancer): X-Forwarded-For is not trusted.
    const direct = await gql(a.url, '{ users(limit: 1) { id } }', undefined, {
      from: '127.0.0.16',
      headers: { 'x-forwarded-for': '6.6.6.6' }
    })
    const directId = String(direct.headers['x-request-id'])
    const directLog = await eventually('the direct request in the log', () =>
      a.logs.find((l) => l.reqId === directId && l.ip)
    )
    t.equal(directLog.ip, '127.0.0.16', 'a forged header from an untrusted peer is ignored')
  })

  await t.test('a message posted on one instance reaches a WebSocket and an SSE subscriber on the other (Redis pub/sub)', async (t) => {
    const room = `cluster-${randomBytes(3).toString('hex')}`
    const query = `subscription { messageAdded(roomId: "${room}") { id content author { id } } }`
    // Both subscribers reach instance b through nginx: the WebSocket upgrade and the event stream pass the proxy.
    // Subscribers of their own (rate limits are per user, and earlier checks spent some users' budgets).
    const [wsUser, sseUser] = [await newUser(lb.url, 'ws-subscriber'), await newUser(lb.url, 'sse-subscriber')]
    const ws = wsClient(lb.pinned[1]!, { authToken: `Bearer ${token(wsUser)}` })
    t.teardown(() => ws.dispose())
    const overWs = collect(ws, query)
    const overSse = collect(sseClient(lb.pinned[1]!, `Bearer ${token(sseUser)}`), query)
    t.teardown(() => { overWs.dispose(); overSse.dispose() })
    await eventually('both subscriptions open on instance b', async () => {
      const metrics = (await request(b.metricsUrl)).text
      return /graphql_open_subscriptions\{transport="ws"\} 1/.test(metrics) && /graphql_open_subscriptions\{transport="sse"\} 1/.test(metrics)
    })

    const posted = await gql(
      lb.pinned[0]!,
      'mutation Post($room: String!) { postMessage(roomId: $room, content: "across instances") { id } }',
      { room },
      { token: token('4'), from: '127.0.0.21' }
    )
    t.equal(posted.headers['x-upstream'], `127.0.0.1:${a.port}`, 'posted on instance a')
    const id = posted.body.data.postMessage.id
    const expected = { data: { messageAdded: { id, content: 'across instances', author: { id: '4' } } } }
    await eventually(
      'the message on both subscriptions',
      () => overWs.outcome.values.length > 0 && overSse.outcome.values.length > 0,
      10_000
    )
    t.same(overWs.outcome.values, [expected], 'WebSocket subscriber on instance b got it')
    t.same(overSse.outcome.values, [expected], 'SSE subscriber on instance b got it')
  })

  await t.test('an APQ registration on one instance serves on the other (Redis registry)', async (t) => {
    const query = `query ApqAcross { cross_${randomBytes(4).toString('hex')}: user(id: "2") { id name } }`
    const extensions = { persistedQuery: { version: 1, sha256Hash: sha256Hex(query) } }
    const byHash = (base: string) =>
      request(`${base}/graphql?extensions=${encodeURIComponent(JSON.stringify(extensions))}`, {
        from: '127.0.0.18',
        headers: { 'apollo-require-preflight': 'true' }
      })
    const miss = await byHash(lb.pinned[1]!)
    t.equal(miss.json().errors[0].extensions.code, 'PERSISTED_QUERY_NOT_FOUND', 'unknown on b before registration')
    const registered = await request(`${lb.pinned[0]}/graphql`, {
      method: 'POST',
      from: '127.0.0.18',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query, extensions })
    })
    t.equal(registered.status, 200)
    t.equal(registered.headers['x-upstream'], `127.0.0.1:${a.port}`, 'registered on instance a')
    const hit = await byHash(lb.pinned[1]!)
    t.equal(hit.headers['x-upstream'], `127.0.0.1:${b.port}`)
    t.same(Object.values(hit.json().data), [{ id: '2', name: 'Ada Lovelace' }], 'served by hash on instance b')
  })

  await t.test('a WS-Security nonce used on one instance is refused as a replay on the other (Redis)', async (t) => {
    const envelope = soapEnvelope('GetUser', '<id>2</id>')
    const headers = {
      'content-type': 'text/xml; charset=utf-8',
      soapaction: `"${SOAP_PUBLIC_URL}/v1/UserService/GetUser"`
    }
    const first = await request(`${lb.pinned[0]}/v1/UserService`, {
      method: 'POST',
      from: '127.0.0.19',
      headers,
      body: envelope
    })
    t.equal(first.status, 200, first.text)
    t.match(first.text, /<name>Ada Lovelace<\/name>/)
    const replay = await request(`${lb.pinned[1]}/v1/UserService`, {
      method: 'POST',
      from: '127.0.0.19',
      headers,
      body: envelope
    })
    t.equal(replay.headers['x-upstream'], `127.0.0.1:${b.port}`)
    t.equal(replay.status, 500)
    t.match(replay.text, /FailedAuthentication/)
    t.match(replay.text, /already been used/)
  })

  await t.test('a user created over SOAP on one instance is read over GraphQL on the other', async (t) => {
    const email = `soap.${randomBytes(3).toString('hex')}@example.com`
    const envelope = soapEnvelope('CreateUser', `<name>Made Over Soap</name><email>${email}</email>`)
    const created = await request(`${lb.pinned[0]}/v1/UserService`, {
      method: 'POST',
      from: '127.0.0.20',
      body: envelope,
      headers: {
        'content-type': 'text/xml; charset=utf-8',
        soapaction: `"${SOAP_PUBLIC_URL}/v1/UserService/CreateUser"`
      }
    })
    t.equal(created.status, 200, created.text)
    const id = /<id>([^<]+)<\/id>/.exec(created.text)?.[1]
    t.ok(id, 'the SOAP response carries the new id')
    const read = await gql(
      lb.pinned[1]!,
      'query One($id: ID!) { user(id: $id) { name email } }',
      { id },
      { token: token('1', 'ADMIN'), from: '127.0.0.20' }
    )
    t.equal(read.headers['x-upstream'], `127.0.0.1:${b.port}`)
    t.same(read.body.data, { user: { name: 'Made Over Soap', email } })
  })

  await t.test('nginx: metrics not published, bodies capped, its own errors in the service\'s shape', async (t) => {
    const metrics = await request(`${lb.url}/metrics`, { from: '127.0.0.17' })
    t.equal(metrics.status, 404)
    t.equal(metrics.json().errors[0].extensions.code, 'NOT_FOUND')
    t.equal((await request(a.metricsUrl)).status, 200, 'each instance serves its metrics to a scraper on METRICS_PORT')
    t.equal((await request(`${a.url}/metrics`)).status, 404, 'and not on its API port')

    const tooLarge = await request(`${lb.url}/graphql`, {
      method: 'POST',
      from: '127.0.0.17',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: 'x'.repeat(1_100_000) })
    })
    t.equal(tooLarge.status, 413)
    t.same(tooLarge.json(), {
      errors: [{ message: 'Request body too large', extensions: { code: 'PAYLOAD_TOO_LARGE' } }]
    })
  })
})
