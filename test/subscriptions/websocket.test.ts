// Subscriptions over WebSocket against a listening server, with the real graphql-ws client
// (graphql-transport-ws) and raw sockets (legacy graphql-ws, protocol violations): subprotocols,
// identity at connection_init, close codes, Origin, caps, and validation of subscription documents.
import { Writable } from 'node:stream'
import { test } from 'tap'
import { createSigner } from 'fast-jwt'
import { buildApp } from '../../app/app.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { gql, listenTestApp, testConfig } from '../helpers/app.ts'
import { collect, eventually, rawSocket, refusedUpgrade, within, wsClient } from './clients.ts'

const COUNT = 'subscription { count(target: 2) }'

test('graphql-transport-ws (graphql-ws client): count emits 0, 1 and completes', async (t) => {
  const { url, token } = await listenTestApp(t)
  const client = wsClient(url, { authToken: `Bearer ${token('2')}` })
  t.teardown(() => client.dispose())
  const outcome = await collect(client, COUNT).done
  t.same(outcome.values, [{ data: { count: 0 } }, { data: { count: 1 } }])
  t.ok(outcome.completed)
  t.notOk(outcome.error)
})

test('legacy graphql-ws subprotocol: connection_ack, data, complete', async (t) => {
  const { url, token } = await listenTestApp(t)
  const ws = await rawSocket(url, 'graphql-ws')
  t.teardown(() => ws.socket.close())
  t.equal(ws.socket.protocol, 'graphql-ws')
  ws.send({ type: 'connection_init', payload: { authToken: `Bearer ${token('2')}` } })
  await ws.next('connection_ack')
  ws.send({ id: '1', type: 'start', payload: { query: COUNT } })
  t.same((await ws.next('data')).payload, { data: { count: 0 } })
  t.same((await ws.next('data')).payload, { data: { count: 1 } })
  t.match(await ws.next('complete'), { id: '1' })
})

test('a client naming no subprotocol speaks graphql-transport-ws; an unsupported one is refused', async (t) => {
  const { url } = await listenTestApp(t)
  const ws = await rawSocket(url)
  t.teardown(() => ws.socket.close())
  t.equal(ws.socket.protocol, '')
  ws.send({ type: 'connection_init' })
  await ws.next('connection_ack')
  ws.send({ id: 'a', type: 'subscribe', payload: { query: 'subscription { count(target: 1) }' } })
  t.same((await ws.next('next')).payload, { data: { count: 0 } })
  t.match(await ws.next('complete'), { id: 'a' })

  const refused = await refusedUpgrade(url, 'mqtt')
  t.equal(refused.status, 400)
  t.match(refused.body.errors[0], { message: /Unsupported WebSocket subprotocol/, extensions: { code: 'BAD_REQUEST' } })
  // Offering both picks graphql-transport-ws.
  const both = await rawSocket(url, ['graphql-ws', 'graphql-transport-ws'])
  t.equal(both.socket.protocol, 'graphql-transport-ws')
  both.socket.close()
})

test('identity comes from connection_init: good, missing, bad, expired, wrong type', async (t) => {
  const { url, token, config } = await listenTestApp(t)
  const ROOM = 'subscription { messageAdded(roomId: "r") { id } }'

  const good = wsClient(url, { authToken: `Bearer ${token('2')}` })
  const ok = collect(good, 'subscription { count(target: 1) }')
  t.ok((await ok.done).completed, 'a valid token is accepted')
  good.dispose()

  const anonymous = wsClient(url)
  const anon = await collect(anonymous, 'subscription { count(target: 1) }').done
  t.ok(anon.completed, 'no token: an anonymous connection (fields decide, as over HTTP)')
  anonymous.dispose()

  const refusals: [Record<string, unknown>, RegExp][] = [
    [{ authToken: 'Bearer not-a-jwt' }, /^Forbidden: Malformed bearer token/],
    [{ authToken: `Bearer ${token('2').slice(0, -2)}xx` }, /^Forbidden: Invalid token$/],
    // A bare JWT is accepted (test/clients.test.ts); another scheme is not, and the refusal names the
    // payload's field (there is no Authorization header on a WebSocket's connection_init).
    [{ authToken: 'Basic dXNlcjpwYXNz' }, /^Forbidden: authToken must be "Bearer <token>" or the token itself$/],
    [{ headers: { Authorization: 'Basic dXNlcjpwYXNz' } }, /^Forbidden: headers\.Authorization must be "Bearer <token>" or the token itself$/],
    [{ authToken: 42 }, /^Forbidden: authToken must be a string/]
  ]
  const expired = createSigner({
    key: config.jwt.secret!,
    expiresIn: 60_000,
    clockTimestamp: Date.now() - 3_600_000,
    ...(config.jwt.issuer ? { iss: config.jwt.issuer } : {}),
    ...(config.jwt.audience ? { aud: config.jwt.audience } : {})
  })({ sub: '2', role: 'USER' })
  refusals.push([{ authToken: `Bearer ${expired}` }, /^Forbidden: Token expired$/])
  // A bound on waiting, not a speed check: a refusal comes in milliseconds, but in the full suite (two
  // test files on two cores) one took over 3 s to arrive.
  for (const [payload, reason] of refusals) {
    const client = wsClient(url, { payload })
    const outcome = await within(collect(client, ROOM).done, 10_000, 'refused credential (4403)')
    const closed = await within(client.closed, 10_000, 'refused credential (4403)')
    t.equal(closed.code, 4403, `refused with 4403: ${JSON.stringify(payload).slice(0, 40)}`)
    t.match(closed.reason, reason)
    t.match(outcome.error, { code: 4403 })
    client.dispose()
  }

  // Legacy subprotocol: connection_error first, then the same close code.
  const legacy = await rawSocket(url, 'graphql-ws')
  legacy.send({ type: 'connection_init', payload: { authToken: 'Bearer bad.token.here' } })
  t.match(await legacy.next('connection_error'), { payload: { message: /^Forbidden/ } })
  t.equal((await within(legacy.closed, 10_000, 'refused credential, legacy (4403)')).code, 4403)
})

test('the upgrade request does not authenticate: its Authorization header and cookies are ignored', async (t) => {
  const { url, token, store } = await listenTestApp(t)
  const admin = `Bearer ${token('1', 'ADMIN')}`
  const user2 = await store.usersByIds(['2'])
  // An admin's header on the upgrade, no authToken: the connection is anonymous.
  const client = wsClient(url, { headers: { authorization: admin, cookie: `token=${admin}` } })
  t.teardown(() => client.dispose())
  const sub = collect(client, 'subscription { messageAdded(roomId: "lobby") { author { id email } } }')
  // A broken header does not refuse the upgrade either.
  const broken = wsClient(url, { headers: { authorization: 'Bearer broken' }, authToken: `Bearer ${token('2')}` })
  t.teardown(() => broken.dispose())
  t.ok((await collect(broken, 'subscription { count(target: 1) }').done).completed)

  await eventually(async () => {
    await gql(url, 'mutation { postMessage(roomId: "lobby", content: "hello") { id } }', undefined, {
      authorization: `Bearer ${token('2')}`
    })
    return sub.outcome.values.length > 0
  }, 5000, 'an event')
  const first = sub.outcome.values[0] as any
  t.equal(first.data.messageAdded.author.id, '2')
  t.equal(first.data.messageAdded.author.email, null, 'email hidden: the connection is anonymous')
  t.match(first.errors, [{ extensions: { code: 'UNAUTHENTICATED' }, message: 'Must be logged in' }])
  t.ok(user2[0]!.email)
})

test('late or repeated initialisation and operations before it', async (t) => {
  const { url, token } = await listenTestApp(t, { WS_INIT_TIMEOUT_MS: '300' })

  const silent = await rawSocket(url, 'graphql-transport-ws')
  const started = Date.now()
  const closed = await within(silent.closed, 3000, 'init timeout (4408)')
  t.equal(closed.code, 4408)
  t.equal(closed.reason, 'Connection initialisation timeout')
  t.ok(Date.now() - started >= 250, 'not before the configured time')

  const late = await rawSocket(url, 'graphql-transport-ws')
  await new Promise((resolve) => setTimeout(resolve, 450))
  late.send({ type: 'connection_init', payload: { authToken: `Bearer ${token('2')}` } })
  t.equal((await within(late.closed, 3000, 'init timeout (4408)')).code, 4408, 'a token that arrives after the timeout is too late')

  const twice = await rawSocket(url, 'graphql-transport-ws')
  twice.send({ type: 'connection_init', payload: { authToken: `Bearer ${token('2')}` } })
  await twice.next('connection_ack')
  twice.send({ type: 'connection_init', payload: { authToken: `Bearer ${token('1', 'ADMIN')}` } })
  t.same(await within(twice.closed, 3000, 'one init (4429)'), { code: 4429, reason: 'Too many initialisation requests' }, 'no identity swap')

  const early = await rawSocket(url, 'graphql-transport-ws')
  early.send({ id: '1', type: 'subscribe', payload: { query: COUNT } })
  t.equal((await within(early.closed, 3000, 'nothing before the ack (4401)')).code, 4401)

  const garbage = await rawSocket(url, 'graphql-transport-ws')
  garbage.send('not json')
  t.equal((await within(garbage.closed, 3000, 'bad message (4400)')).code, 4400)
})

test('Origin is checked against the allowlist', async (t) => {
  const { url } = await listenTestApp(t, { WS_ALLOWED_ORIGINS: 'https://app.example.com' })
  const refused = await refusedUpgrade(url, 'graphql-transport-ws', { origin: 'https://evil.example.com' })
  t.equal(refused.status, 403)
  t.match(refused.body.errors[0], { message: 'WebSocket connections from origin https://evil.example.com are not allowed', extensions: { code: 'FORBIDDEN' } })

  const allowed = await rawSocket(url, 'graphql-transport-ws', { origin: 'https://app.example.com' })
  allowed.send({ type: 'connection_init' })
  await allowed.next('connection_ack')
  allowed.socket.close()
  const noOrigin = await rawSocket(url, 'graphql-transport-ws')
  noOrigin.send({ type: 'connection_init' })
  await noOrigin.next('connection_ack')
  noOrigin.socket.close()

  const { url: closedUrl } = await listenTestApp(t)
  t.equal((await refusedUpgrade(closedUrl, 'graphql-transport-ws', { origin: 'https://app.example.com' })).status, 403, 'empty allowlist: browsers refused')
})

test('connections are capped per IP and per user', async (t) => {
  const { url, token, app } = await listenTestApp(t, { WS_MAX_CONNECTIONS_PER_CLIENT: '2', TRUST_PROXY: '127.0.0.1' })
  const from = (ip: string) => ({ 'x-forwarded-for': ip })
  const a = await rawSocket(url, 'graphql-transport-ws', from('10.0.0.1'))
  const b = await rawSocket(url, 'graphql-transport-ws', from('10.0.0.1'))
  const refused = await refusedUpgrade(url, 'graphql-transport-ws', from('10.0.0.1'))
  t.equal(refused.status, 429)
  t.match(refused.body.errors[0], {
    message: 'Too many connections from this address: at most 2',
    extensions: { code: 'RATE_LIMITED' }
  })
  a.socket.close()
  await a.closed
  await eventually(() => app.graphqlInspection.subscriptionStats().webSockets === 1, 2000, 'the slot to be released')
  const c = await rawSocket(url, 'graphql-transport-ws', from('10.0.0.1'))
  b.socket.close()
  c.socket.close()

  // One user, connections from different addresses.
  const auth = { type: 'connection_init', payload: { authToken: `Bearer ${token('3')}` } }
  const u1 = await rawSocket(url, 'graphql-transport-ws', from('10.0.1.1'))
  u1.send(auth)
  await u1.next('connection_ack')
  const u2 = await rawSocket(url, 'graphql-transport-ws', from('10.0.1.2'))
  u2.send(auth)
  await u2.next('connection_ack')
  const u3 = await rawSocket(url, 'graphql-transport-ws', from('10.0.1.3'))
  u3.send(auth)
  t.same(await u3.closed, { code: 1013, reason: 'Too many connections for this user' })
  u1.socket.close()
  u2.socket.close()
})

test('subscriptions per connection and message size are capped', async (t) => {
  const { url, token } = await listenTestApp(t, {
    WS_MAX_SUBSCRIPTIONS_PER_CONNECTION: '2',
    WS_MAX_MESSAGE_BYTES: '1024'
  })
  const ws = await rawSocket(url, 'graphql-transport-ws')
  ws.send({ type: 'connection_init', payload: { authToken: `Bearer ${token('2')}` } })
  await ws.next('connection_ack')
  const room = (id: string) => ({
    id,
    type: 'subscribe',
    payload: { query: 'subscription { messageAdded(roomId: "r") { id } }' }
  })
  ws.send(room('1'))
  ws.send(room('2'))
  ws.send(room('3'))
  const error = await ws.next('error')
  t.equal(error.id, '3')
  t.match(error.payload, [
    { message: 'Too many active subscriptions on this connection: at most 2', extensions: { code: 'RATE_LIMITED' } }
  ])
  ws.send({ id: '1', type: 'complete' })
  await new Promise((resolve) => setTimeout(resolve, 100))
  ws.send(room('4'))
  ws.send(room('4'))
  t.same(
    await within(ws.closed, 3000, 'duplicate id (4409)'),
    { code: 4409, reason: 'Subscriber for 4 already exists' },
    'a duplicate id closes the connection'
  )

  const big = await rawSocket(url, 'graphql-transport-ws')
  big.send({ type: 'connection_init', payload: { authToken: `Bearer ${token('2')}`, filler: 'x'.repeat(2000) } })
  t.equal((await within(big.closed, 3000, 'message size cap (1009)')).code, 1009, 'message too big')
})

test('subscription documents are validated and limited like any operation', async (t) => {
  const { url, app } = await listenTestApp(t, {
    MAX_DEPTH: '2',
    COST_BUDGET_ANONYMOUS: '20',
    MAX_STRING_LENGTH: '50',
    MAX_ALIASES: '100'
  })
  const client = wsClient(url)
  t.teardown(() => client.dispose())
  const errorOf = async (query: string, variables?: Record<string, unknown>) => {
    const outcome = await collect(client, query, variables).done
    t.same(outcome.values, [], `no event for ${query.slice(0, 50)}`)
    return (outcome.error as any[])[0]
  }
  t.match(await errorOf('subscription { messageAdded(roomId: "r") { author { name } } }'),
    { message: 'Query depth 3 exceeds the maximum depth of 2', extensions: { code: 'DEPTH_LIMIT_EXCEEDED' } })
  const aliases = Array.from({ length: 30 }, (_, i) => `a${i}: id`).join(' ')
  t.match(await errorOf(`subscription { messageAdded(roomId: "r") { ${aliases} } }`),
    { message: 'Query cost 31 exceeds the budget of 20 for this caller', extensions: { code: 'COST_LIMIT_EXCEEDED' } })
  t.match(await errorOf('subscription { messageAdded(roomId: "r") { nope } }'),
    { message: /Cannot query field "nope"/, extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } })
  t.match(await errorOf('subscription { count messageAdded(roomId: "r") { id } }'),
    { message: /must select only one top level field/, extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } })
  t.match(await errorOf(`subscription { messageAdded(roomId: "${'r'.repeat(60)}") { id } }`),
    { message: 'Too long', extensions: { code: 'BAD_USER_INPUT' } })
  t.match(await errorOf('subscription ($r: String!) { messageAdded(roomId: $r) { id } }', { r: 'r'.repeat(60) }),
    { message: 'Too long', extensions: { code: 'BAD_USER_INPUT' } })
  t.match(await errorOf('subscription { messageAdded(roomId: "no/wildcards/#") { id } }'),
    { extensions: { code: 'BAD_USER_INPUT' } })
  t.match(await errorOf('subscription { count(target: 101) }'),
    { message: 'target must be between 0 and 100', extensions: { code: 'BAD_USER_INPUT' } })
  t.match(await errorOf('subscription {'), { extensions: { code: 'GRAPHQL_PARSE_FAILED' } })
  t.equal(app.graphqlInspection.subscriptionStats().webSocketSubscriptions, 0, 'nothing was started')
  // The connection survives refused operations.
  t.ok((await collect(client, 'subscription { count(target: 0) }').done).completed)
})

test('queries and mutations run over the socket too, through the same admission as over HTTP', async (t) => {
  const { url, token } = await listenTestApp(t, { COST_BUDGET_ANONYMOUS: '20' })
  const admin = wsClient(url, { authToken: `Bearer ${token('1', 'ADMIN')}` })
  t.teardown(() => admin.dispose())
  t.same((await collect(admin, '{ user(id: "2") { name email } }').done).values, [
    { data: { user: { name: 'Ada Lovelace', email: 'ada@example.com' } } }
  ])
  const created = await collect(
    admin,
    'mutation { createUser(input: { name: "Over WS", email: "ws@example.com" }) { name } }'
  ).done
  t.same(created.values, [{ data: { createUser: { name: 'Over WS' } } }])
  t.ok(created.completed)
  const anonymous = wsClient(url)
  t.teardown(() => anonymous.dispose())
  t.match(
    (await collect(anonymous, '{ users(limit: 30) { id } }').done).error,
    [{ extensions: { code: 'COST_LIMIT_EXCEEDED' } }],
    'priced as over HTTP'
  )
  t.match(
    (await collect(anonymous, 'mutation { deleteUser(id: "2") }').done).values,
    [{ data: null, errors: [{ extensions: { code: 'UNAUTHENTICATED' } }] }],
    'authorized as over HTTP'
  )

  const legacy = await rawSocket(url, 'graphql-ws')
  legacy.send({ type: 'connection_init' })
  await legacy.next('connection_ack')
  legacy.send({ id: 'q', type: 'start', payload: { query: '{ user(id: "3") { name } }' } })
  t.same((await legacy.next('data')).payload, { data: { user: { name: 'Alan Turing' } } }, 'the legacy subprotocol too')
  t.match(await legacy.next('complete'), { id: 'q' })
  legacy.socket.close()
})

test('persisted-only mode applies to subscriptions too', async (t) => {
  const { url } = await listenTestApp(t, { PERSISTED_ONLY: 'true' })
  const client = wsClient(url)
  t.teardown(() => client.dispose())
  const outcome = await collect(client, COUNT).done
  t.match((outcome.error as any[])[0], { extensions: { code: 'PERSISTED_QUERY_REQUIRED' } })
})

test('a connection ends when its token expires: closed with 4403, its subscriptions with it', async (t) => {
  const { url, config } = await listenTestApp(t)
  const shortLived = createSigner({
    key: config.jwt.secret!,
    expiresIn: 1500,
    ...(config.jwt.issuer ? { iss: config.jwt.issuer } : {}),
    ...(config.jwt.audience ? { aud: config.jwt.audience } : {})
  })({ sub: '1', role: 'ADMIN' })
  const client = wsClient(url, { authToken: `Bearer ${shortLived}` })
  t.teardown(() => client.dispose())
  const running = collect(client, 'subscription { count(target: 100) }')
  const closed = await within(client.closed, 5000, 'token expiry (4403)')
  t.match(closed, { code: 4403, reason: 'Forbidden: Token expired' })
  t.ok(
    running.outcome.values.length < 5,
    `the subscription delivered ${running.outcome.values.length} events, then stopped with the connection`
  )
})

test('a connection ends after SUBSCRIBER_MAX_LIFETIME_MS: closed with 1001, so clients reconnect', async (t) => {
  const { url } = await listenTestApp(t, { SUBSCRIBER_MAX_LIFETIME_MS: '1000' })
  const started = Date.now()
  const client = wsClient(url)
  t.teardown(() => client.dispose())
  const running = collect(client, 'subscription { messageAdded(roomId: "lifetime") { id } }')
  const closed = await within(client.closed, 4000, 'connection lifetime: the connection was not closed')
  const lived = Date.now() - started
  t.match(closed, { code: 1001, reason: 'Connection lifetime ended' })
  t.ok(lived >= 850, `not before the lifetime, less its random tenth (${lived} ms)`)
  t.notOk(running.outcome.completed, 'no complete: the client subscribes again when it reconnects')
})

test('every frame counts toward the slow-reader bound: a client that pings and never reads is closed 4503', async (t) => {
  // Pings well within the frame budget (30 a second of 40 KB, against 100 frames and 4 MiB a second),
  // from clients that never read their pongs: the pongs pile up, and pass SUBSCRIBER_MAX_BUFFERED_BYTES.
  const { url, app } = await listenTestApp(t, {
    SUBSCRIBER_MAX_BUFFERED_BYTES: '65536',
    WS_MAX_RECEIVED_BYTES_PER_SECOND: '4194304'
  })
  const ping = JSON.stringify({ type: 'ping', payload: { pad: 'p'.repeat(40_000) } })
  const readers = await Promise.all(Array.from({ length: 3 }, async () => {
    const ws = await rawSocket(url, 'graphql-transport-ws')
    ws.send({ type: 'connection_init' })
    await ws.next('connection_ack')
    // Protocol-level pings are answered by the connection, through the same send path.
    const pong = new Promise<Buffer>((resolve) => ws.socket.once('pong', resolve))
    ws.socket.ping('are you there')
    t.equal(String(await within(pong, 2000, 'protocol-level pong')), 'are you there')
    ws.socket.pause()
    return ws
  }))
  const pinging = setInterval(() => {
    for (const { socket } of readers) if (socket.readyState === socket.OPEN) socket.send(ping)
  }, 33)
  t.teardown(() => {
    clearInterval(pinging)
    for (const { socket } of readers) socket.terminate()
  })
  // The server gives a closed slow reader a second to read its close frame: watch its side, then read.
  const serverSockets = [...app.graphqlInspection.webSocketClients()]
  t.equal(serverSockets.length, 3)
  await within(
    new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (serverSockets.every((socket) => socket.readyState !== socket.OPEN)) {
          clearInterval(poll)
          resolve()
        }
      }, 20)
      t.teardown(() => clearInterval(poll))
    }),
    10_000,
    'slow-reader bound on pongs: connections that ping and never read were not closed'
  )
  clearInterval(pinging)
  for (const { socket } of readers) socket.resume()
  for (const { closed } of readers) {
    t.match(await within(closed, 3000, 'the slow reader\'s close frame'), { code: 4503, reason: /^Subscriber too slow/ })
  }
})

test('close reasons holding client text are cut on a character boundary, so the close code is kept', async (t) => {
  const { url } = await listenTestApp(t)
  /** The close, bounded; its reason is at most 123 bytes and a prefix of `expected` (no broken character). */
  type Raw = Awaited<ReturnType<typeof rawSocket>>
  const closedWith = async (ws: Raw, rule: string, code: number, expected: string) => {
    const closed = await within(ws.closed, 3000, rule)
    t.equal(closed.code, code, rule)
    t.ok(Buffer.byteLength(closed.reason) <= 123, `${rule}: reason within 123 bytes`)
    t.ok(expected.startsWith(closed.reason) && closed.reason.length > 60, `${rule}: the reason is cut before a character (${closed.reason})`)
  }
  const id = `${'i'.repeat(93)}${'é'.repeat(20)}`
  const duplicate = await rawSocket(url, 'graphql-transport-ws')
  duplicate.send({ type: 'connection_init' })
  await duplicate.next('connection_ack')
  const subscribe = { id, type: 'subscribe', payload: { query: 'subscription { messageAdded(roomId: "r") { id } }' } }
  duplicate.send(subscribe)
  duplicate.send(subscribe)
  await closedWith(duplicate, 'duplicate id (4409)', 4409, `Subscriber for ${id} already exists`)

  const type = `${'t'.repeat(90)}${'ü'.repeat(30)}`
  const legacy = await rawSocket(url, 'graphql-ws')
  legacy.send({ type })
  await closedWith(legacy, 'legacy unknown message type (4400)', 4400, `Invalid message type ${JSON.stringify(type)}`)

  const key = `authKey${'ß'.repeat(70)}`
  const credential = await rawSocket(url, 'graphql-transport-ws')
  credential.send({ type: 'connection_init', payload: { [key]: 'x' } })
  await closedWith(credential, 'credential in an unread field (4403)', 4403, `Forbidden: Unrecognised credential ${key}: send`)
})

test('an oversized frame closes 1009 and logs no error: a client\'s mistake is not a server error', async (t) => {
  const lines: { level: number; msg?: string; code?: string; err?: unknown }[] = []
  const stream = new Writable({
    write (chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line))
      done()
    }
  })
  const store = openSqliteStore(':memory:')
  const app = await buildApp(testConfig({ WS_MAX_MESSAGE_BYTES: '1024' }), { store, logger: { stream, level: 'debug' } })
  t.teardown(async () => { await app.close(); await store.close() })
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  for (const protocol of ['graphql-transport-ws', 'graphql-ws']) {
    const ws = await rawSocket(url, protocol)
    ws.send({ type: 'connection_init', payload: { filler: 'x'.repeat(2000) } })
    t.equal((await within(ws.closed, 3000, 'message size cap (1009)')).code, 1009, `${protocol}: message too big`)
  }
  const logged = (line: object) => JSON.stringify(line).includes('WS_ERR_UNSUPPORTED_MESSAGE_LENGTH')
  await eventually(() => lines.filter(logged).length === 2, 2000, 'a line for each refused frame')
  t.same(lines.filter((line) => line.level >= 40), [], 'nothing at warn or error')
  t.notOk(lines.some((line) => JSON.stringify(line).includes('"stack"')), 'no stack trace')
  t.match(lines.find(logged), {
    level: 20,
    msg: 'WebSocket closed: the client broke the protocol or left'
  })
})

test('the frame budget allows bursts within it: 60% in bursts stays open, 150% is closed 1008', async (t) => {
  const { url } = await listenTestApp(t, { WS_MAX_MESSAGES_PER_SECOND: '20', WS_MAX_RECEIVED_BYTES_PER_SECOND: '1048576' })
  const ping = JSON.stringify({ type: 'ping', payload: { pad: 'b'.repeat(50_000) } })
  // Bursts of 12 pings of 50 KB every 900 ms: 60% of the frames and 57% of the bytes a second, on
  // average; two bursts fall within one second.
  const bursty = await rawSocket(url, 'graphql-transport-ws')
  bursty.send({ type: 'connection_init' })
  await bursty.next('connection_ack')
  for (let burst = 0; burst < 4; burst++) {
    if (burst > 0) await new Promise((resolve) => setTimeout(resolve, 900))
    for (let i = 0; i < 12; i++) bursty.send(ping)
  }
  await eventually(() => bursty.received.filter((m) => m.type === 'pong').length === 48 ||
    bursty.socket.readyState !== bursty.socket.OPEN, 5000, 'the pongs')
  t.equal(bursty.socket.readyState, bursty.socket.OPEN, 'frame budget: a bursty client under it stays open')
  t.equal(bursty.received.filter((m) => m.type === 'pong').length, 48, 'every ping answered')
  bursty.socket.close()

  // 30 frames a second, sustained: over the budget, closed within seconds.
  const flooding = await rawSocket(url, 'graphql-transport-ws')
  flooding.send({ type: 'connection_init' })
  await flooding.next('connection_ack')
  const flood = setInterval(() => {
    if (flooding.socket.readyState === flooding.socket.OPEN) for (let i = 0; i < 3; i++) flooding.send({ type: 'ping' })
  }, 100)
  t.teardown(() => clearInterval(flood))
  t.match(await within(flooding.closed, 5000, 'frame budget (1008)'), { code: 1008, reason: /^Too many messages/ })
  clearInterval(flood)
})

test('near MAX_CONNECTIONS idle connections give their slots up, the longest idle first (4410)', async (t) => {
  const { url, app } = await listenTestApp(t, {
    MAX_CONNECTIONS: '20',
    WS_MAX_CONNECTIONS_PER_CLIENT: '100',
    RATE_LIMIT_REQUESTS: '100000'
  })
  // A connection with a subscription is never chosen.
  const busy = wsClient(url)
  t.teardown(() => busy.dispose())
  const room = collect(busy, 'subscription { messageAdded(roomId: "cap") { id } }')
  await eventually(() => app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 1, 3000, 'the busy subscription')
  // Twice the cap of idle connections, one after another: each is accepted.
  const idle: Awaited<ReturnType<typeof rawSocket>>[] = []
  t.teardown(() => { for (const ws of idle) ws.socket.terminate() })
  for (let i = 0; i < 40; i++) {
    const ws = await rawSocket(url, 'graphql-transport-ws').catch((err: Error) => {
      throw new Error(`idle eviction: connection ${i} refused near MAX_CONNECTIONS (${err.message})`)
    })
    idle.push(ws)
    ws.send({ type: 'connection_init' })
    await ws.next('connection_ack')
  }
  // The longest idle gave their slots up.
  for (const [i, ws] of idle.slice(0, 20).entries()) {
    t.match(await within(ws.closed, 3000, `idle eviction (4410) of connection ${i}`), {
      code: 4410,
      reason: 'Idle connection closed: its slot is needed'
    })
  }
  t.ok(idle.slice(-5).every((ws) => ws.socket.readyState === ws.socket.OPEN), 'the most recent stay open')
  // A new client is served, and the busy connection kept its subscription.
  const late = wsClient(url)
  t.teardown(() => late.dispose())
  const counted = await within(collect(late, 'subscription { count(target: 1) }').done, 5000, 'a new client near the cap')
  t.same(counted.values, [{ data: { count: 0 } }])
  t.equal(app.graphqlInspection.subscriptionStats().webSocketSubscriptions, 1, 'the busy subscription is still live')
  t.notOk(room.outcome.error ?? room.outcome.completed, 'and was not ended')
})
