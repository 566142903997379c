// Two instances sharing pub/sub through the real Redis: a message posted on instance A reaches
// subscribers on instance B (and A), in order, filtered by room, with the author resolved on B.
import { test } from 'tap'
import { Redis } from 'ioredis'
import { gql, listenTestApp } from '../helpers/app.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { collect, eventually, sseClient, wsClient } from './clients.ts'

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

async function requireRedis (): Promise<void> {
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try {
    await redis.connect()
    await redis.ping()
  } catch (err) {
    throw new Error(`This test needs Redis at ${REDIS_URL} (set TEST_REDIS_URL): ${(err as Error).message}`)
  } finally {
    redis.disconnect()
  }
}

test('a message posted on instance A reaches subscribers on instance B through Redis', async (t) => {
  await requireRedis()
  // Two instances of one deployment: one database (a shared store), one Redis prefix.
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  t.teardown(() => store.close())
  const env = { REDIS_URL, REDIS_PREFIX: `test:subscriptions:${process.pid}:${Date.now()}:` }
  const a = await listenTestApp(t, env, { store, demo: false })
  const b = await listenTestApp(t, env, { store, demo: false })
  t.not(a.app.events.emitter, b.app.events.emitter, 'separate emitters: Redis is the only way between them')

  const QUERY = 'subscription ($room: String!) { messageAdded(roomId: $room) { id content author { id name email } } }'
  const onB = wsClient(b.url, { authToken: `Bearer ${b.token('3')}` })
  const onA = wsClient(a.url, { authToken: `Bearer ${a.token('2')}` })
  t.teardown(() => { onB.dispose(); onA.dispose() })
  const bRoom = collect(onB, QUERY, { room: 'lobby' })
  const bOther = collect(onB, QUERY, { room: 'elsewhere' })
  const aRoom = collect(onA, QUERY, { room: 'lobby' })
  const bSse = collect(sseClient(b.url, `Bearer ${b.token('2')}`), QUERY, { room: 'lobby' })
  // A subscription is live once the emitter has subscribed its Redis channel.
  await eventually(
    () =>
      b.app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 2 &&
      a.app.graphqlInspection.subscriptionStats().webSocketSubscriptions === 1 &&
      b.app.graphqlInspection.subscriptionStats().eventStreams === 1,
    5000,
    'subscriptions live on both instances'
  )
  await new Promise((resolve) => setTimeout(resolve, 200))

  const posted: string[] = []
  for (let i = 0; i < 5; i++) {
    const { body } = await gql(
      a.url,
      'mutation ($text: String!) { postMessage(roomId: "lobby", content: $text) { id } }',
      { text: `message ${i}` },
      { authorization: `Bearer ${a.token('2')}` }
    )
    posted.push(body.data.postMessage.id)
  }
  await eventually(
    () => bRoom.outcome.values.length === 5 && aRoom.outcome.values.length === 5 && bSse.outcome.values.length === 5,
    5000,
    'five events everywhere'
  )
  const ids = (values: any[]) => values.map((v) => v.data.messageAdded.id)
  t.same(ids(bRoom.outcome.values), posted, 'instance B: every message, in order')
  t.same(ids(aRoom.outcome.values), posted, 'instance A: the same')
  t.same(ids(bSse.outcome.values), posted, 'instance B over SSE: the same')
  t.same((bRoom.outcome.values[0] as any).data.messageAdded, {
    id: posted[0],
    content: 'message 0',
    author: { id: '2', name: 'Ada Lovelace', email: null }
  })
  t.match(
    (bRoom.outcome.values[0] as any).errors,
    [{ extensions: { code: 'FORBIDDEN' } }],
    "B's subscriber (user 3) may not read user 2's email"
  )
  t.equal(
    (bSse.outcome.values[0] as any).data.messageAdded.author.email,
    'ada@example.com',
    "B's SSE subscriber (user 2) may"
  )
  t.same(bOther.outcome.values, [], 'another room hears nothing')

  // And the other way round.
  await gql(b.url, 'mutation { postMessage(roomId: "lobby", content: "from B") { id } }', undefined, {
    authorization: `Bearer ${b.token('4')}`
  })
  await eventually(() => aRoom.outcome.values.length === 6, 5000, 'the event on A')
  t.equal((aRoom.outcome.values[5] as any).data.messageAdded.content, 'from B')
})

test('a role changed on instance A ends that user\'s subscriptions on instance B within seconds', async (t) => {
  await requireRedis()
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  t.teardown(() => store.close())
  const env = { REDIS_URL, REDIS_PREFIX: `test:user-changes:${process.pid}:${Date.now()}:` }
  const a = await listenTestApp(t, env, { store, demo: false })
  const b = await listenTestApp(t, env, { store, demo: false })
  const QUERY = 'subscription { messageAdded(roomId: "lobby") { id author { adminNotes } } }'
  const adminToken = `Bearer ${b.token('1', 'ADMIN')}`
  const onB = wsClient(b.url, { authToken: adminToken })
  const sseOnB = sseClient(b.url, adminToken)
  const bystander = wsClient(b.url, { authToken: `Bearer ${b.token('2')}` })
  t.teardown(() => { onB.dispose(); sseOnB.dispose(); bystander.dispose() })
  const overWs = collect(onB, QUERY)
  const overSse = collect(sseOnB, QUERY)
  const other = collect(bystander, QUERY)
  await eventually(() => b.app.graphqlInspection.subscriptionStats().topicSubscribers === 3, 5000, 'three subscribers on B')

  const demoted = await gql(a.url, 'mutation { updateUser(id: "1", input: { role: SERVICE }) { id } }', undefined, {
    authorization: `Bearer ${a.token('9', 'ADMIN')}`
  })
  t.same(demoted.body.data, { updateUser: { id: '1' } }, 'written on A')
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error('a role changed on A did not end the subscriptions on B within 3 s')), 3000)
  })
  const [ws, sse] = await Promise.race([Promise.all([overWs.done, overSse.done]), late])
  clearTimeout(timer)
  const message = "The user's role is now SERVICE, not the token's ADMIN: use a new token"
  t.match(ws.error, [{ message, extensions: { code: 'FORBIDDEN' } }], 'WebSocket on B')
  t.match(sse.values.at(-1), { errors: [{ message, extensions: { code: 'FORBIDDEN' } }] }, 'SSE on B')
  t.equal(b.app.graphqlInspection.subscriptionStats().topicSubscribers, 1, 'the other user\'s subscription stays')
  t.notOk(other.outcome.error)
})

/** A TCP relay to Redis that can stop forwarding while every connection stays open: a network partition. */
async function partitionableRelay (t: { teardown (fn: () => unknown): void }) {
  const { createServer, connect } = await import('node:net')
  const target = new URL(REDIS_URL)
  let partitioned = false
  const sockets = new Set<import('node:net').Socket>()
  const relay = createServer((client) => {
    const upstream = connect(Number(target.port || 6379), target.hostname)
    for (const s of [client, upstream]) {
      sockets.add(s)
      s.on('error', () => {})
      s.on('close', () => sockets.delete(s))
    }
    client.on('data', (chunk) => { if (!partitioned) upstream.write(chunk) })
    upstream.on('data', (chunk) => { if (!partitioned) client.write(chunk) })
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
  })
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); relay.close() })
  return {
    url: `redis://127.0.0.1:${(relay.address() as import('node:net').AddressInfo).port}`,
    partition (on: boolean) { partitioned = on }
  }
}

test('a Redis that stops answering (connections open) stalls neither requests nor the shutdown', async (t) => {
  await requireRedis()
  const relay = await partitionableRelay(t)
  const { app, url, token } = await listenTestApp(t, {
    REDIS_URL: relay.url,
    REDIS_PREFIX: `test:partition:${process.pid}:${Date.now()}:`
  })
  const post = (text: string) =>
    gql(
      url,
      'mutation ($text: String!) { postMessage(roomId: "lobby", content: $text) { id content } }',
      { text },
      { authorization: `Bearer ${token('2')}` }
    )
  t.equal((await post('before')).status, 200)

  relay.partition(true)
  // Reads are answered (counters fall back to this instance, the response cache is skipped): executed.
  let started = Date.now()
  const read = await gql(url, '{ messages(roomId: "lobby") { content } }')
  t.same(read.body.data?.messages.map((m: { content: string }) => m.content), ['before'], 'a read is answered, from the store')
  t.notOk(read.body.errors)
  t.ok(Date.now() - started < 4000, `promptly (${Date.now() - started} ms), not at the execution deadline`)
  // A write cannot be acknowledged while the response cache cannot be told of it (another instance could
  // go on serving what it replaced): refused, with nothing changed, as promptly.
  started = Date.now()
  const during = await post('during the partition')
  const ms = Date.now() - started
  t.equal(during.body.errors?.[0]?.extensions.code, 'SERVICE_UNAVAILABLE')
  t.equal(during.body.errors?.[0]?.message, 'Nothing was changed: the response cache is unavailable; retry shortly')
  t.ok(ms < 4000, `promptly (${ms} ms), not at the execution deadline`)
  relay.partition(false)
  const after = await gql(url, '{ messages(roomId: "lobby") { content } }')
  t.same(after.body.data?.messages.map((m: { content: string }) => m.content), ['before'], 'nothing was changed')

  const closing = Date.now()
  await app.close()
  t.ok(Date.now() - closing < 4000, `the instance closes promptly (${Date.now() - closing} ms)`)
})
