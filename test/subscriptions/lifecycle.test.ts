// Subscription lifecycle against a listening server: clients that leave release everything they held
// (1000 connect/disconnect cycles), and a graceful shutdown completes subscriptions and closes sockets.
import { test } from 'tap'
import { buildApp } from '../../app/app.ts'
import { mintToken } from '../../cli/mint-token.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { listenTestApp, testConfig } from '../helpers/app.ts'
import { collect, eventually, rawSocket, roomListeners, sseClient, within, wsClient } from './clients.ts'

const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length

test('1000 connect/subscribe/disconnect cycles leave nothing behind', async (t) => {
  // Every upgrade is a request for the rate limiter; this test is about leaks, not rates.
  const { url, app, token } = await listenTestApp(t, {
    RATE_LIMIT_REQUESTS: '100000',
    WS_MAX_CONNECTIONS_PER_CLIENT: '100'
  })
  const init = { type: 'connection_init', payload: { authToken: `Bearer ${token('2')}` } }
  const subscribe = (id: string, query: string) => ({ id, type: 'subscribe', payload: { query } })
  const ROOM = 'subscription { messageAdded(roomId: "leak") { id content author { name } } }'
  const timersBefore = timers()

  // Some connections with subscriptions known to be live, then dropped abruptly.
  const live = await Promise.all(Array.from({ length: 20 }, async (_, i) => {
    const ws = await rawSocket(url, 'graphql-transport-ws')
    ws.send(init)
    await ws.next('connection_ack')
    ws.send(subscribe(`room-${i}`, ROOM))
    ws.send(subscribe(`count-${i}`, 'subscription { count(target: 50) }'))
    return ws
  }))
  await eventually(
    () => app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 40,
    5000,
    '40 live subscriptions'
  )
  t.equal(roomListeners(app, 'leak'), 1, 'one emitter listener for the room, however many subscribe')
  t.equal(app.graphqlInspection.subscriptionStats().topicSubscribers, 20)
  for (const ws of live) ws.socket.terminate()

  // Then 1000 cycles, 20 at a time: connect, initialise, subscribe, leave (cleanly or not) at once.
  let cycles = 0
  const worker = async () => {
    while (cycles < 1000) {
      const n = cycles++
      const ws = await rawSocket(url, 'graphql-transport-ws')
      ws.send(init)
      await ws.next('connection_ack')
      ws.send(subscribe('1', ROOM))
      if (n % 3 === 0) ws.send(subscribe('2', 'subscription { count(target: 5) }'))
      if (n % 2 === 0) ws.socket.close()
      else ws.socket.terminate()
      await ws.closed
    }
  }
  await Promise.all(Array.from({ length: 20 }, worker))
  t.equal(cycles, 1000)

  await eventually(() => {
    const stats = app.graphqlInspection.subscriptionStats()
    return (
      stats.webSockets === 0 &&
      stats.webSocketSubscriptions === 0 &&
      stats.clients === 0 &&
      stats.topicSubscribers === 0 &&
      roomListeners(app, 'leak') === 0
    )
  }, 5000, 'everything released')
  t.same(app.graphqlInspection.subscriptionStats(), {
    webSockets: 0,
    webSocketSubscriptions: 0,
    eventStreams: 0,
    topics: 0,
    topicSubscribers: 0,
    clients: 0
  })
  t.equal(roomListeners(app, 'leak'), 0, 'no listener left on the emitter')
  await eventually(() => timers() <= timersBefore + 5, 3000, 'timers released')
  t.ok(timers() <= timersBefore + 5, `no timers left behind (${timersBefore} before, ${timers()} after)`)

  // And the service still delivers.
  const client = wsClient(url)
  t.teardown(() => client.dispose())
  t.ok((await collect(client, 'subscription { count(target: 1) }').done).completed)
})

test('a client that leaves while its subscription is being checked starts nothing', async (t) => {
  const { url, app } = await listenTestApp(t)
  // Slow down the one asynchronous check (the cost charge, a round trip to Redis in production).
  const charge = app.budgets.chargeCost
  app.budgets.chargeCost = async (...args) => {
    await new Promise((resolve) => setTimeout(resolve, 200))
    return charge(...args)
  }
  const ws = await rawSocket(url, 'graphql-transport-ws')
  ws.send({ type: 'connection_init' })
  await ws.next('connection_ack')
  ws.send({ id: '1', type: 'subscribe', payload: { query: 'subscription { messageAdded(roomId: "gone") { id } }' } })
  ws.socket.terminate()
  await new Promise((resolve) => setTimeout(resolve, 400))
  t.equal(roomListeners(app, 'gone'), 0, 'no listener registered for a departed client')
  t.same(app.graphqlInspection.subscriptionStats(), {
    webSockets: 0,
    webSocketSubscriptions: 0,
    eventStreams: 0,
    topics: 0,
    topicSubscribers: 0,
    clients: 0
  })

  // The same for an operation the client completes while it is being checked; the connection stays.
  const stays = await rawSocket(url, 'graphql-transport-ws')
  stays.send({ type: 'connection_init' })
  await stays.next('connection_ack')
  stays.send({ id: '1', type: 'subscribe', payload: { query: 'subscription { messageAdded(roomId: "gone") { id } }' } })
  stays.send({ id: '1', type: 'complete' })
  await new Promise((resolve) => setTimeout(resolve, 400))
  t.equal(roomListeners(app, 'gone'), 0, 'a completed operation does not start')
  t.equal(app.graphqlInspection.subscriptionStats().webSocketSubscriptions, 0)
  t.equal(app.graphqlInspection.subscriptionStats().webSockets, 1)
  stays.socket.close()
})

test('graceful shutdown completes subscriptions and closes sockets cleanly', async (t) => {
  const config = testConfig()
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  const app = await buildApp(config, { store, logger: false })
  t.teardown(() => store.close())
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  const token = mintToken(config.jwt, '2', 'USER')

  const client = wsClient(url, { authToken: `Bearer ${token}` })
  const counting = collect(client, 'subscription { count(target: 100) }')
  const room = collect(client, 'subscription { messageAdded(roomId: "bye") { id } }')
  const legacy = await rawSocket(url, 'graphql-ws')
  legacy.send({ type: 'connection_init', payload: { authToken: `Bearer ${token}` } })
  await legacy.next('connection_ack')
  legacy.send({ id: 'L1', type: 'start', payload: { query: 'subscription { messageAdded(roomId: "bye") { id } }' } })
  const sse = collect(sseClient(url, `Bearer ${token}`), 'subscription { count(target: 100) }')
  await eventually(() => counting.outcome.values.length > 0 && sse.outcome.values.length > 0 &&
    app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 3, 5000, 'all subscriptions live')

  const started = Date.now()
  await app.close()
  const took = Date.now() - started
  t.ok(took < 3000, `close took ${took} ms`)

  const [countOutcome, roomOutcome, sseOutcome] = await within(
    Promise.all([counting.done, room.done, sse.done]),
    5000,
    'graceful shutdown: complete for every subscription'
  )
  t.ok(countOutcome.completed, 'count completed, not errored')
  t.notOk(countOutcome.error)
  t.ok(roomOutcome.completed, 'messageAdded completed')
  t.ok(sseOutcome.completed, 'the event stream completed')
  t.notOk(sseOutcome.error)
  t.match(await within(client.closed, 5000, 'graceful shutdown (1001)'), { code: 1001, reason: 'Server shutting down' })
  t.match(await legacy.next('complete'), { id: 'L1' })
  t.match(await within(legacy.closed, 5000, 'graceful shutdown, legacy (1001)'), { code: 1001 })
  client.dispose()
})
