// Two instances sharing pub/sub through the real Redis: a message posted on instance A reaches
// subscribers on instance B (and A), in order, filtered by room, with the author resolved on B.
import { test } from 'tap'
import { Redis } from 'ioredis'
import { gql, listenTestApp } from '../helpers/app.ts'
import { openSqliteStore } from '../../app/store/sqlite.ts'
import { loadDemoData } from '../../app/store/sample-data.ts'
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
  t.not(a.app.emitter, b.app.emitter, 'separate emitters: Redis is the only way between them')

  const QUERY = 'subscription ($room: String!) { messageAdded(roomId: $room) { id content author { id name email } } }'
  const onB = wsClient(b.url, { authToken: `Bearer ${b.token('3')}` })
  const onA = wsClient(a.url, { authToken: `Bearer ${a.token('2')}` })
  t.teardown(() => { onB.dispose(); onA.dispose() })
  const bRoom = collect(onB, QUERY, { room: 'lobby' })
  const bOther = collect(onB, QUERY, { room: 'elsewhere' })
  const aRoom = collect(onA, QUERY, { room: 'lobby' })
  const bSse = collect(sseClient(b.url, `Bearer ${b.token('2')}`), QUERY, { room: 'lobby' })
  // A subscription is live once the emitter has subscribed its Redis channel.
  await eventually(() => b.app.subscriptionStats().webSocketSubscriptions === 2 && a.app.subscriptionStats().webSocketSubscriptions === 1 &&
    b.app.subscriptionStats().eventStreams === 1, 5000, 'subscriptions live on both instances')
  await new Promise((resolve) => setTimeout(resolve, 200))

  const posted: string[] = []
  for (let i = 0; i < 5; i++) {
    const { body } = await gql(a.url, 'mutation ($text: String!) { postMessage(roomId: "lobby", content: $text) { id } }', { text: `message ${i}` }, { authorization: `Bearer ${a.token('2')}` })
    posted.push(body.data.postMessage.id)
  }
  await eventually(() => bRoom.outcome.values.length === 5 && aRoom.outcome.values.length === 5 && bSse.outcome.values.length === 5, 5000, 'five events everywhere')
  const ids = (values: any[]) => values.map((v) => v.data.messageAdded.id)
  t.same(ids(bRoom.outcome.values), posted, 'instance B: every message, in order')
  t.same(ids(aRoom.outcome.values), posted, 'instance A: the same')
  t.same(ids(bSse.outcome.values), posted, 'instance B over SSE: the same')
  t.same((bRoom.outcome.values[0] as any).data.messageAdded, { id: posted[0], content: 'message 0', author: { id: '2', name: 'Ada Lovelace', email: null } })
  t.match((bRoom.outcome.values[0] as any).errors, [{ extensions: { code: 'FORBIDDEN' } }], "B's subscriber (user 3) may not read user 2's email")
  t.equal((bSse.outcome.values[0] as any).data.messageAdded.author.email, 'ada@example.com', "B's SSE subscriber (user 2) may")
  t.same(bOther.outcome.values, [], 'another room hears nothing')

  // And the other way round.
  await gql(b.url, 'mutation { postMessage(roomId: "lobby", content: "from B") { id } }', undefined, { authorization: `Bearer ${b.token('4')}` })
  await eventually(() => aRoom.outcome.values.length === 6, 5000, 'the event on A')
  t.equal((aRoom.outcome.values[5] as any).data.messageAdded.content, 'from B')
})
