// Subscription events priced, shared and bounded (app/graphql/fanout.ts, app/graphql/operations.ts,
// routes/graphql/websocket.ts, routes/graphql/sse.ts), against a listening server with real clients.
import { request as httpRequest } from 'node:http'
import { test } from 'tap'
import WebSocket from 'ws'
import { gql, listenTestApp } from '../helpers/app.ts'
import { collect, eventually, rawSocket, sseClient, within, wsClient, wsUrl } from './clients.ts'

const ROOM_WITH_AUTHOR =
  'subscription ($room: String!) { messageAdded(roomId: $room) { content author { id email adminNotes } } }'

/** Counts the pipeline's executions of subscription events (those with a root value). */
function countEventExecutions (app: Awaited<ReturnType<typeof listenTestApp>>['app']): () => number {
  const execution = app.graphqlInspection.execution
  const execute = execution.execute
  let executions = 0
  execution.execute = (admission, root) => {
    if (root !== undefined) executions++
    return execute(admission, root)
  }
  return () => executions
}

test('one room, four callers: each sees only the fields its own rules allow, and each scope is executed once', async (t) => {
  const { url, app, token } = await listenTestApp(t)
  const executions = countEventExecutions(app)
  const A = wsClient(url, { authToken: `Bearer ${token('4')}` })
  const B = wsClient(url, { authToken: `Bearer ${token('3')}` })
  const admin = wsClient(url, { authToken: `Bearer ${token('1', 'ADMIN')}` })
  const anonymous = wsClient(url)
  const alsoA = sseClient(url, `Bearer ${token('4')}`)
  const clients = [A, B, admin, anonymous]
  t.teardown(() => { for (const c of clients) c.dispose(); alsoA.dispose() })
  const [a, b, ad, anon, a2] = [...clients, alsoA].map((c) => collect(c, ROOM_WITH_AUTHOR, { room: 'scopes' }))
  // A public query (no @auth field) in the same room: one shared execution for every caller.
  const publicOnes = clients.map((c) =>
    collect(c, 'subscription { messageAdded(roomId: "scopes") { content author { name } } }')
  )
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 9, 5000, 'nine subscribers')

  await gql(url, 'mutation { postMessage(roomId: "scopes", content: "by A") { id } }', undefined, {
    authorization: `Bearer ${token('4')}`
  })
  await eventually(
    () => [a, b, ad, anon, a2, ...publicOnes].every((s) => s!.outcome.values.length === 1),
    5000,
    'the event everywhere'
  )

  const author = (s: typeof a) => s!.outcome.values[0].data.messageAdded.author
  t.same(
    author(a),
    { id: '4', email: 'grace@example.com', adminNotes: null },
    'A sees its own email, not its admin notes'
  )
  t.same(author(a2), author(a), 'A over SSE: the same')
  t.same(author(b), { id: '4', email: null, adminNotes: null }, 'B sees neither')
  t.match(b!.outcome.values[0].errors, [{ extensions: { code: 'FORBIDDEN' } }, { extensions: { code: 'FORBIDDEN' } }])
  t.same(author(ad), { id: '4', email: 'grace@example.com', adminNotes: 'Prefers COBOL' }, 'the ADMIN sees both')
  t.same(author(anon), { id: '4', email: null, adminNotes: null }, 'anonymous sees neither')
  t.match(anon!.outcome.values[0].errors, [
    { extensions: { code: 'UNAUTHENTICATED' } },
    { extensions: { code: 'UNAUTHENTICATED' } }
  ])
  for (const s of publicOnes) {
    t.same(s.outcome.values[0], { data: { messageAdded: { content: 'by A', author: { name: 'Grace Hopper' } } } })
  }
  // Scopes user:4 (WS and SSE together), user:3, ADMIN, anonymous; and one public group.
  t.equal(executions(), 5, 'executed once per scope, not once per subscriber')
})

test('USER and SERVICE subscribers share one execution per event; only the author is executed as itself', async (t) => {
  const { url, app, token } = await listenTestApp(t)
  const executions = countEventExecutions(app)
  const query = 'subscription { messageAdded(roomId: "shared") { content author { id name email } } }'
  const clients = [
    wsClient(url, { authToken: `Bearer ${token('2')}` }),
    wsClient(url, { authToken: `Bearer ${token('3')}` }),
    wsClient(url, { authToken: `Bearer ${token('4')}` }),
    wsClient(url, { authToken: `Bearer ${token('5', 'SERVICE')}` })
  ]
  const overSse = sseClient(url, `Bearer ${token('2')}`)
  t.teardown(() => { for (const c of clients) c.dispose(); overSse.dispose() })
  const [u2, u3, u4, service, u2sse] = [...clients, overSse].map((c) => collect(c, query))
  const all = [u2, u3, u4, service, u2sse]
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 5, 5000, 'five subscribers')
  const post = (author: string, content: string) =>
    gql(url, 'mutation ($c: String!) { postMessage(roomId: "shared", content: $c) { id } }', { c: content }, {
      authorization: `Bearer ${token(author)}`
    })
  const emails = (i: number) => all.map((s) => s!.outcome.values[i].data.messageAdded.author.email)

  await post('4', 'by Grace')
  await eventually(() => all.every((s) => s!.outcome.values.length === 1), 5000, 'the first event everywhere')
  t.same(emails(0), [null, null, 'grace@example.com', null, null], 'the author alone sees its email')
  t.notOk(u4!.outcome.values[0].errors, 'the author: no error')
  for (const s of [u2, u3, service, u2sse]) {
    t.match(s!.outcome.values[0].errors, [{ path: ['messageAdded', 'author', 'email'], extensions: { code: 'FORBIDDEN' } }])
  }
  t.equal(executions(), 2, 'one shared execution, and one for the author')

  await post('2', 'by Ada')
  await eventually(() => all.every((s) => s!.outcome.values.length === 2), 5000, 'the second event everywhere')
  t.same(emails(1), ['ada@example.com', null, null, null, 'ada@example.com'], 'now Ada alone, on both carriers')
  t.equal(executions(), 4, 'again two: the author\'s two subscriptions share its execution')

  // An author who is not subscribed: nobody's answer differs, one execution.
  await post('1', 'by the admin')
  await eventually(() => all.every((s) => s!.outcome.values.length === 3), 5000, 'the third event everywhere')
  t.same(emails(2), [null, null, null, null, null])
  t.equal(executions(), 5, 'one execution for every subscriber')
})

test('a SERVICE subscriber is in no administrator scope: it sees neither the email nor the admin notes of others', async (t) => {
  const { url, app, token } = await listenTestApp(t)
  const service = wsClient(url, { authToken: `Bearer ${token('5', 'SERVICE')}` })
  const admin = wsClient(url, { authToken: `Bearer ${token('1', 'ADMIN')}` })
  t.teardown(() => { service.dispose(); admin.dispose() })
  const byService = collect(service, ROOM_WITH_AUTHOR, { room: 'service' })
  const byAdmin = collect(admin, ROOM_WITH_AUTHOR, { room: 'service' })
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 2, 5000, 'two subscribers')
  await gql(url, 'mutation { postMessage(roomId: "service", content: "by A") { id } }', undefined, {
    authorization: `Bearer ${token('4')}`
  })
  await eventually(
    () => byService.outcome.values.length === 1 && byAdmin.outcome.values.length === 1,
    5000,
    'the event for the SERVICE and the ADMIN subscriber'
  )
  const [seen] = byService.outcome.values
  t.same(seen.data.messageAdded.author, { id: '4', email: null, adminNotes: null }, 'a SERVICE caller sees neither')
  t.match(seen.errors, [{ extensions: { code: 'FORBIDDEN' } }, { extensions: { code: 'FORBIDDEN' } }])
  t.same(
    byAdmin.outcome.values[0].data.messageAdded.author,
    { id: '4', email: 'grace@example.com', adminNotes: 'Prefers COBOL' },
    'the ADMIN, subscribed alongside, sees both'
  )
})

test('guarded fields reached through named fragments decide the scope too: the author gets their own email', async (t) => {
  const { url, app, token } = await listenTestApp(t)
  const query = `subscription ($room: String!) { messageAdded(roomId: $room) { ...Message } }
    fragment Message on Message { content author { ...Author } }
    fragment Author on User { id email }`
  const A = wsClient(url, { authToken: `Bearer ${token('4')}` })
  const B = sseClient(url, `Bearer ${token('3')}`)
  const anonymous = wsClient(url)
  t.teardown(() => { A.dispose(); B.dispose(); anonymous.dispose() })
  const [a, b, anon] = [A, B, anonymous].map((c) => collect(c, query, { room: 'fragments' }))
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 3, 5000, 'three subscribers')
  await gql(url, 'mutation { postMessage(roomId: "fragments", content: "by A") { id } }', undefined, {
    authorization: `Bearer ${token('4')}`
  })
  await eventually(() => [a, b, anon].every((s) => s!.outcome.values.length === 1), 5000, 'the event everywhere')
  t.same(
    a!.outcome.values[0],
    { data: { messageAdded: { content: 'by A', author: { id: '4', email: 'grace@example.com' } } } },
    'the author: its own email, no error'
  )
  t.same(b!.outcome.values[0].data.messageAdded.author, { id: '4', email: null })
  t.match(b!.outcome.values[0].errors, [{ extensions: { code: 'FORBIDDEN' } }], 'another user: FORBIDDEN')
  t.match(anon!.outcome.values[0].errors, [{ extensions: { code: 'UNAUTHENTICATED' } }], 'anonymous: UNAUTHENTICATED')
})

test('every event is charged to whoever holds the subscription, one spend per payer, before it is sent', async (t) => {
  const { url, app, token } = await listenTestApp(t)
  const spends: { who: string; units: number }[] = []
  let broke = new Set<string>()
  const spend = app.budgets.spendCostUnits
  app.budgets.spendCostUnits = async (caller, ip, units) => {
    const who = caller ? `user:${caller.id}` : `ip:${ip}`
    spends.push({ who, units })
    if (broke.has(who)) return { remaining: -1, resetMs: 30_000 }
    return spend(caller, ip, units)
  }
  const query = 'subscription { messageAdded(roomId: "paid") { id content } }'
  const ws2 = wsClient(url, { authToken: `Bearer ${token('2')}` })
  const sse3 = sseClient(url, `Bearer ${token('3')}`)
  const anonymousWs = [wsClient(url), wsClient(url)]
  t.teardown(() => { ws2.dispose(); sse3.dispose(); for (const c of anonymousWs) c.dispose() })
  const byUser2 = collect(ws2, query)
  const byUser3 = collect(sse3, query)
  const anonymous = anonymousWs.flatMap((c) => [collect(c, query), collect(c, query)])
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 6, 5000, 'six subscribers')
  t.equal(spends.length, 0, 'an admission is charged (chargeCost), not spent per event')
  const admissions = spends.length

  const post = (content: string) =>
    gql(url, `mutation { postMessage(roomId: "paid", content: "${content}") { id } }`, undefined, {
      authorization: `Bearer ${token('4')}`
    })
  await post('one')
  await eventually(
    () =>
      byUser2.outcome.values.length === 1 &&
      byUser3.outcome.values.length === 1 &&
      anonymous.every((s) => s.outcome.values.length === 1),
    5000,
    'the first event'
  )
  const first = spends.slice(admissions).filter((s) => s.who !== 'user:4')
  const costOf = first.find((s) => s.who === 'user:2')!.units
  t.ok(costOf > 0, 'an event costs its subscriber units')
  t.same(first.sort((x, y) => x.who.localeCompare(y.who)), [
    { who: 'ip:127.0.0.1', units: 4 * costOf },
    { who: 'user:2', units: costOf },
    { who: 'user:3', units: costOf }
  ], 'one spend per payer, with the summed cost of its subscriptions')

  // User 2 and user 3 can no longer pay: their subscriptions end with RATE_LIMITED, on both carriers.
  broke = new Set(['user:2', 'user:3'])
  await post('two')
  const [over2, over3] = await within(Promise.all([byUser2.done, byUser3.done]), 5000, 'per-event charge (RATE_LIMITED)')
  t.equal(over2.values.length, 1, 'the unpaid event is not sent over WebSocket')
  t.match(
    over2.error,
    [{ extensions: { code: 'RATE_LIMITED', retryAfter: 30 } }],
    'graphql-transport-ws: an error message for that id'
  )
  t.equal(over3.values.length, 2, 'SSE: the unpaid event is replaced by a next carrying the error')
  t.notOk(over3.values[1].data)
  t.match(over3.values[1], { errors: [{ message: /Cost rate limit exceeded/, extensions: { code: 'RATE_LIMITED' } }] })
  t.ok(over3.completed, 'then complete')
  await eventually(
    () => anonymous.every((s) => s.outcome.values.length === 2),
    5000,
    'the anonymous subscribers, who paid, still get it'
  )
  await eventually(
    () => app.graphqlInspection.subscriptionStats().topicSubscribers === 4,
    5000,
    'the unpaid subscriptions left the room'
  )

  // The legacy subprotocol: an `error` message for that id.
  const legacy = await rawSocket(url, 'graphql-ws')
  t.teardown(() => legacy.socket.close())
  legacy.send({ type: 'connection_init', payload: { authToken: `Bearer ${token('2')}` } })
  await legacy.next('connection_ack')
  broke = new Set()
  legacy.send({ id: 'l', type: 'start', payload: { query } })
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 5, 5000, 'the legacy subscriber')
  broke = new Set(['user:2'])
  await post('three')
  t.match(await legacy.next('error'), { id: 'l', payload: [{ extensions: { code: 'RATE_LIMITED' } }] })
  t.notOk(legacy.received.some((m) => m.type === 'data'), 'nothing unpaid was sent')
})

test('count ticks are charged the same way', async (t) => {
  const { url, app, token } = await listenTestApp(t)
  const spend = app.budgets.spendCostUnits
  let ticks = 0
  app.budgets.spendCostUnits = async (caller, ip, units) => {
    if (++ticks > 1) return { remaining: -1, resetMs: 1000 }
    return spend(caller, ip, units)
  }
  // The admission is charged apart (chargeCost); the first tick is paid, the second cannot be.
  const outcome = await within(collect(
    wsClient(url, { authToken: `Bearer ${token('2')}` }),
    'subscription { count(target: 5) }'
  ).done, 5000, 'per-tick charge (RATE_LIMITED)')
  t.same(outcome.values, [{ data: { count: 0 } }])
  t.match(outcome.error, [{ extensions: { code: 'RATE_LIMITED' } }])
  await eventually(() => app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 0, 3000, 'released')
})

test('subscriptions are capped per caller across connections and carriers', async (t) => {
  const { url, app, token } = await listenTestApp(t, { SUBSCRIPTIONS_MAX_PER_CALLER: '2' })
  const bearer = `Bearer ${token('2')}`
  const query = 'subscription { messageAdded(roomId: "capped") { id } }'
  const one = wsClient(url, { authToken: bearer })
  const two = sseClient(url, bearer)
  const three = wsClient(url, { authToken: bearer })
  t.teardown(() => { one.dispose(); two.dispose(); three.dispose() })
  const first = collect(one, query)
  const second = collect(two, query)
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 2, 5000, 'two subscriptions')
  const refused = await collect(three, query).done
  t.match(refused.error, [
    {
      message: 'Too many active subscriptions for this client: at most 2 across its connections',
      extensions: { code: 'RATE_LIMITED' }
    }
  ])
  const refusedSse = await collect(sseClient(url, bearer), query).done
  t.match(refusedSse.values, [{ errors: [{ extensions: { code: 'RATE_LIMITED' } }] }])
  // Another caller is not affected; a slot given back is taken again.
  const anonymous = wsClient(url)
  t.teardown(() => anonymous.dispose())
  const other = collect(anonymous, query)
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 3, 5000, 'another caller subscribed')
  other.dispose()
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 2, 5000, 'another caller left')
  first.dispose()
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 1, 5000, 'a slot given back')
  const again = collect(three, query)
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 2, 5000, 'taken again')
  again.dispose()
  second.dispose()
})

test('frames on an open WebSocket are budgeted per connection: pings included; over it, close 1008', async (t) => {
  const { url } = await listenTestApp(t, {
    WS_MAX_MESSAGES_PER_SECOND: '10',
    WS_MAX_RECEIVED_BYTES_PER_SECOND: '20000'
  })
  const pings = await rawSocket(url, 'graphql-transport-ws')
  pings.send({ type: 'connection_init' })
  await pings.next('connection_ack')
  pings.send({ type: 'ping' })
  t.same(await pings.next('pong'), { type: 'pong' }, 'a ping within the budget is answered')
  for (let i = 0; i < 20; i++) pings.send({ type: 'ping' })
  t.match(await within(pings.closed, 3000, 'frame budget (1008)'), { code: 1008, reason: /Too many messages/ })

  const large = await rawSocket(url, 'graphql-transport-ws')
  large.send({ type: 'connection_init' })
  await large.next('connection_ack')
  for (let i = 0; i < 3; i++) large.send({ type: 'ping', payload: { pad: 'x'.repeat(9000) } })
  t.equal((await within(large.closed, 3000, 'byte budget (1008)')).code, 1008, 'bytes count too')

  const legacy = await rawSocket(url, 'graphql-ws')
  legacy.send({ type: 'connection_init' })
  await legacy.next('connection_ack')
  for (let i = 0; i < 20; i++) legacy.send({ id: String(i), type: 'stop' })
  t.equal((await within(legacy.closed, 3000, 'frame budget, legacy (1008)')).code, 1008, 'the legacy subprotocol too')

  const control = await rawSocket(url, 'graphql-transport-ws')
  for (let i = 0; i < 20; i++) control.socket.ping()
  t.equal((await within(control.closed, 3000, 'frame budget, protocol pings (1008)')).code, 1008,
    'WebSocket-level ping frames count too')
})

test('the answer cap counts UTF-8 bytes over WebSocket and SSE alike', async (t) => {
  const { url, app, token } = await listenTestApp(t, { MAX_RESPONSE_BYTES: '1024' })
  const query = 'subscription { messageAdded(roomId: "utf8") { content } }'
  const ws = wsClient(url)
  const sse = sseClient(url)
  t.teardown(() => { ws.dispose(); sse.dispose() })
  const overWs = collect(ws, query)
  const overSse = collect(sse, query)
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 2, 5000, 'two subscribers')
  // 400 characters of 3 bytes each: 1200 bytes of content, 400 UTF-16 units.
  await gql(
    url,
    'mutation ($c: String!) { postMessage(roomId: "utf8", content: $c) { id } }',
    { c: '€'.repeat(400) },
    { authorization: `Bearer ${token('2')}` }
  )
  await eventually(() => overWs.outcome.values.length === 1 && overSse.outcome.values.length === 1, 5000, 'the event')
  for (const s of [overWs, overSse]) {
    t.match(s.outcome.values[0], { errors: [{ extensions: { code: 'RESPONSE_TOO_LARGE', maxResponseBytes: 1024 } }] })
  }
})

/** A large event for `room`, published straight to the emitter (as postMessage does after storing it). */
const publishLarge = (app: Awaited<ReturnType<typeof listenTestApp>>['app'], room: string, i: number) =>
  app.events.publish({
    type: 'messageAdded',
    message: {
      id: String(10_000 + i),
      roomId: room,
      content: 'x'.repeat(4000),
      authorId: '2',
      createdAt: new Date().toISOString()
    }
  })
const WIDE = (room: string) =>
  `subscription { messageAdded(roomId: "${room}") { ${Array.from({ length: 25 }, (_, i) => `c${i}: content`).join(' ')} } }`

test('a WebSocket subscriber that stops reading is closed once its unsent data passes the bound', async (t) => {
  const { url, app } = await listenTestApp(t, {
    SUBSCRIBER_MAX_BUFFERED_BYTES: '65536',
    WS_KEEP_ALIVE_MS: '0',
    MAX_ALIASES: '1000'
  })
  const socket = new WebSocket(wsUrl(url), 'graphql-transport-ws')
  const closed = new Promise<number>((resolve) => socket.on('close', (code) => resolve(code)))
  await new Promise((resolve) => socket.once('open', resolve))
  socket.send(JSON.stringify({ type: 'connection_init' }))
  await new Promise((resolve) => socket.once('message', resolve))
  socket.send(JSON.stringify({ id: '1', type: 'subscribe', payload: { query: WIDE('stalled') } }))
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 1, 5000, 'subscribed')
  // The client stops reading: the kernel's buffers fill, then the server's.
  socket.pause()
  for (let i = 0; i < 400 && app.graphqlInspection.subscriptionStats().webSockets > 0; i++) {
    await publishLarge(app, 'stalled', i)
    await new Promise((resolve) => setImmediate(resolve))
  }
  await eventually(
    () =>
      app.graphqlInspection.subscriptionStats().webSockets === 0 &&
      app.graphqlInspection.subscriptionStats().topicSubscribers === 0,
    5000,
    'the stalled connection closed by the server'
  )
  socket.resume()
  t.ok([4503, 1006].includes(await closed), 'the client sees 4503 if it reads that far, else the cut')
})

test('an SSE subscriber that stops reading has its stream cut once its unsent data passes the bound', async (t) => {
  const { url, app } = await listenTestApp(t, { SUBSCRIBER_MAX_BUFFERED_BYTES: '65536', MAX_ALIASES: '1000' })
  const response = await new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
    const req = httpRequest(
      `${url}/graphql`,
      { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' } },
      resolve
    )
    req.on('error', reject)
    req.end(JSON.stringify({ query: WIDE('stalled-sse') }))
  })
  response.on('error', () => {})
  const ended = new Promise<void>((resolve) => response.on('close', () => resolve()))
  await eventually(() => app.graphqlInspection.subscriptionStats().topicSubscribers === 1, 5000, 'subscribed')
  response.pause()
  for (let i = 0; i < 400 && app.graphqlInspection.subscriptionStats().eventStreams > 0; i++) {
    await publishLarge(app, 'stalled-sse', i)
    await new Promise((resolve) => setImmediate(resolve))
  }
  await eventually(
    () =>
      app.graphqlInspection.subscriptionStats().eventStreams === 0 &&
      app.graphqlInspection.subscriptionStats().topicSubscribers === 0,
    5000,
    'the stalled stream cut by the server'
  )
  response.resume()
  await ended
  t.pass('the client sees its stream end')
})
