// The response cache on the real Redis (127.0.0.1:6379, a key prefix of this file's own): two caches on
// two connections act as two service instances sharing it.
import t0, { test } from 'tap'
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { RedisCacheStore } from '../../app/cache/redis-store.ts'
import { ResponseCache, cacheKey, type Computed } from '../../app/cache/response-cache.ts'

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const prefix = `test-response-cache-${randomUUID()}:`
const TTL_MS = 30_000

const connections: Redis[] = []
function instance (ttlMs = TTL_MS) {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, commandTimeout: 2000 })
  connections.push(redis)
  const store = new RedisCacheStore({ redis, redisKey: (name) => `${prefix}${name}`, ttlMs })
  return new ResponseCache(store, { ttlMs, onError: (err) => { throw err } })
}

t0.teardown(async () => {
  const [cleaner] = connections
  if (cleaner) {
    const keys = await cleaner.keys(`${prefix}*`)
    if (keys.length > 0) await cleaner.del(...keys)
  }
  await Promise.all(connections.map((c) => c.quit()))
})

const answer = (body: unknown, tags: string[]): Computed => ({ body: JSON.stringify(body), tags, store: true })

test('an entry filled on one instance is a hit on the other, byte for byte', async (t) => {
  const a = instance()
  const b = instance()
  t.equal(await b.lookup('k1'), null)
  const { entry } = await a.fill('k1', async () => answer({ data: { name: 'Zoë ✓' } }, ['user:1', 'users']))
  t.same(await b.lookup('k1'), entry)
  t.same(await a.lookup('k1'), entry)
  t.match(b.stats(), { hits: 1, misses: 1, bytes: null })
})

test("an invalidation on one instance is seen by the other's next lookup", async (t) => {
  const a = instance()
  const b = instance()
  await a.fill('k2', async () => answer('u1', ['user:1']))
  await a.fill('k3', async () => answer('u2', ['user:2']))
  t.ok(await b.lookup('k2'))
  await b.invalidate(['user:1'])
  t.equal(await a.lookup('k2'), null, 'no pub/sub hop: the very next lookup misses')
  t.ok(await a.lookup('k3'), 'other tags untouched')
  await a.fill('k2', async () => answer('u1 v2', ['user:1']))
  t.equal((await b.lookup('k2'))?.body, '"u1 v2"', 'a read after the write is stored and shared')
})

test('a computation that began before a write on the other instance is not stored', async (t) => {
  const a = instance()
  const b = instance()
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  let began!: () => void
  const started = new Promise<void>((resolve) => { began = resolve })
  const fill = a.fill('k4', async () => { began(); await gate; return answer('old', ['room:r']) })
  await started
  await b.invalidate(['room:r'])
  release()
  t.equal((await fill).entry.body, '"old"')
  t.equal(await b.lookup('k4'), null)
  t.equal(await a.lookup('k4'), null)
  t.match(a.stats(), { refused: 1, stored: 0 })
})

test('entries with hundreds of tags are checked on every tag', async (t) => {
  const a = instance()
  const tags = Array.from({ length: 450 }, (_, i) => `user:${i}`)
  await a.fill('k5', async () => answer('many', tags))
  t.same((await a.lookup('k5'))?.tags, tags)
  await a.invalidate(['user:449'])
  t.equal(await a.lookup('k5'), null)
})

test('the sequence never goes back, even when its key is lost', async (t) => {
  const a = instance()
  await a.invalidate(['user:x'])
  await a.fill('k6', async () => answer('before loss', ['user:y']))
  await connections[0]!.del(`${prefix}rc:seq`)
  await a.invalidate(['user:y'])
  t.equal(await a.lookup('k6'), null, 'an entry older than the lost sequence is still invalidated')
})

test('every key this cache writes in Redis expires', async (t) => {
  const a = instance(10_000)
  await a.fill('k7', async () => answer('x', ['user:7', 'users']))
  await a.fill(cacheKey('p', { long: 'v'.repeat(100_000) }, 'public'), async () => answer('long', ['users']))
  await a.invalidate(['user:8', 'room:z'])
  const redis = connections[0]!
  const keys = await redis.keys(`${prefix}*`)
  t.ok(keys.some((k) => k.includes('rc:answer:')) && keys.some((k) => k.includes('rc:mark:')) && keys.includes(`${prefix}rc:seq`),
    'entries, marks and the sequence')
  for (const key of keys) {
    const pttl = await redis.pttl(key)
    t.ok(pttl > 0 && pttl <= TTL_MS + 5000, `${key.slice(prefix.length)} expires (PTTL ${pttl})`)
    t.ok(key.length < prefix.length + 80, 'key names are bounded whatever the variables')
  }
})

test('a miss answers the write sequence in the same step: the fill after it takes no round trip of its own, and is still refused across a write', async (t) => {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
  connections.push(redis)
  const store = new RedisCacheStore({ redis, redisKey: (name) => `${prefix}${name}`, ttlMs: TTL_MS })
  let begins = 0
  const begin = store.begin.bind(store)
  store.begin = async () => { begins++; return begin() }
  const cache = new ResponseCache(store, { ttlMs: TTL_MS })
  const writer = instance()
  await writer.invalidate(['user:7'])
  const missed = await cache.find('seq-k')
  t.equal(missed.entry, null)
  t.type(missed.since, 'number', 'the miss carries the sequence')
  t.ok(missed.since! > 0)
  await cache.fill('seq-k', async () => answer(1, ['user:7']), missed.since)
  t.equal(begins, 0, 'no BEGIN round trip')
  t.ok(await cache.lookup('seq-k'), 'stored')
  const again = await cache.find('raced')
  await writer.invalidate(['user:7'])
  await cache.fill('raced', async () => answer(2, ['user:7']), again.since)
  t.equal(await cache.lookup('raced'), null, 'a fill begun from a sequence read before a write is refused after it')
})
