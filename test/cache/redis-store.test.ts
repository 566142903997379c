// The response cache on the real Redis (127.0.0.1:6379, a key prefix of this file's own): two caches on
// two connections act as two service instances sharing it.
import t0, { test, type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { RedisCacheStore } from '../../app/core/cache/redis-store.ts'
import { monitorRedis } from '../cluster/harness.ts'
import { ResponseCache, cacheKey, type Computed } from '../../app/core/cache/response-cache.ts'

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
  await connections[0]!.del(`${prefix}{rc:0}:seq`)
  await a.invalidate(['user:y'])
  t.equal(await a.lookup('k6'), null, 'an entry older than the lost sequence is still invalidated')
})

test('every key this cache writes in Redis expires, but the sequence (one key per shard)', async (t) => {
  const a = instance(10_000)
  await a.fill('k7', async () => answer('x', ['user:7', 'users']))
  await a.fill(cacheKey('p', { long: 'v'.repeat(100_000) }, 'public'), async () => answer('long', ['users']))
  await a.invalidate(['user:8', 'room:z'])
  const redis = connections[0]!
  const keys = await redis.keys(`${prefix}*`)
  t.ok(keys.some((k) => k.includes('}:a:')) && keys.some((k) => k.includes('}:m:')) && keys.includes(`${prefix}{rc:0}:seq`),
    'entries, marks and the sequence')
  for (const key of keys) {
    t.ok(key.length < prefix.length + 80, 'key names are bounded whatever the variables')
    if (key.endsWith('}:seq')) continue
    const pttl = await redis.pttl(key)
    t.ok(pttl > 0 && pttl <= TTL_MS + 60_000, `${key.slice(prefix.length)} expires (PTTL ${pttl})`)
  }
})

test('a miss answers the write sequence in the same step: the fill after it takes no round trip of its own, and is still refused across a write', async (t) => {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
  connections.push(redis)
  const store = new RedisCacheStore({ redis, redisKey: (name) => `${prefix}${name}`, ttlMs: TTL_MS })
  let begins = 0
  const begin = store.begin.bind(store)
  store.begin = async (key) => { begins++; return begin(key) }
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

/** The commands Redis received for keys under this file's prefix, watched with MONITOR. */
async function watchCommands (t: Test) {
  const monitor = await monitorRedis(t, REDIS_URL)
  const seen: string[] = []
  // Calls a script makes are shown with the source `lua`: the script itself is the one command sent. Its
  // first run on a connection is an EVAL (ioredis's EVALSHA finds it unknown), later ones EVALSHA.
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source !== 'lua' && args.some((a) => a.startsWith(prefix))) seen.push(String(args[0]).toLowerCase().replace(/^eval$/, 'evalsha'))
  })
  return {
    async take () {
      // MONITOR's lines arrive in order: once this ping's answer is in, earlier commands are seen.
      await connections[0]!.ping()
      await new Promise((resolve) => setTimeout(resolve, 50))
      return seen.splice(0)
    }
  }
}

test('a hit is one MGET; a key this instance has not seen costs one MGET more; a miss and its fill are two commands', async (t) => {
  const commands = await watchCommands(t)
  const a = instance()
  const b = instance()
  await commands.take()
  const missed = await a.find('one')
  t.equal(missed.entry, null)
  await a.fill('one', async () => answer('x', ['user:1', 'users']), missed.since)
  t.same(await commands.take(), ['mget', 'evalsha'], 'a miss and its fill')
  t.ok(await a.lookup('one'))
  t.same(await commands.take(), ['mget'], 'a hit on the instance that filled it')
  t.ok(await b.lookup('one'))
  t.same(await commands.take(), ['mget', 'mget'], 'the first hit on another instance: the entry, then its marks')
  t.ok(await b.lookup('one'))
  t.same(await commands.take(), ['mget'], 'then one MGET')
})

test('on a Redis that may evict, a missing mark is never taken for "not invalidated"', async (t) => {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
  connections.push(redis)
  const evicting = (shards = 1) => new ResponseCache(
    new RedisCacheStore({ redis, redisKey: (name) => `${prefix}ev:${name}`, ttlMs: TTL_MS, mayEvict: true, shards }),
    { ttlMs: TTL_MS, onError: (err) => { throw err } })
  const a = evicting()
  const first = await a.fill('e1', async () => answer('v1', ['user:e']), (await a.find('e1')).since)
  t.equal(first.entry.body, '"v1"')
  t.equal(await a.lookup('e1'), null, 'its marks were missing: the first fill is not stored')
  t.equal(a.stats().refused, 1)
  await a.fill('e1', async () => answer('v1', ['user:e']), (await a.find('e1')).since)
  t.ok(await a.lookup('e1'), 'the next fill is')
  // An eviction of the mark (as allkeys-lru may do) after the entry was stored: the entry is not served.
  await redis.del(`${prefix}ev:{rc:0}:m:user:e`)
  t.equal(await a.lookup('e1'), null, 'a mark gone: a miss')
  const other = evicting()
  t.equal(await other.lookup('e1'), null, 'on every instance')
  // A write lands while an answer is computed, and its mark is evicted before the fill: the fill cannot
  // tell "never invalidated" from "evicted", so it keeps nothing.
  await a.fill('e2', async () => answer('v1', ['user:f']), (await a.find('e2')).since)
  const begun = await a.find('e2-new')
  await other.invalidate(['user:f'])
  await redis.del(`${prefix}ev:{rc:0}:m:user:f`)
  await a.fill('e2-new', async () => answer('computed before the write', ['user:f']), begun.since)
  t.equal(await a.lookup('e2-new'), null, 'an answer begun before a write whose mark was evicted is not kept')
})

test('invalidateAll drops every entry, whatever its tags, on every instance', async (t) => {
  const a = instance()
  const b = instance()
  await a.fill('all-1', async () => answer(1, ['user:1']))
  await a.fill('all-2', async () => answer(2, []))
  t.ok(await b.lookup('all-1'))
  t.ok(await b.lookup('all-2'))
  await b.invalidateAll()
  t.equal(await a.lookup('all-1'), null)
  t.equal(await a.lookup('all-2'), null, 'an entry that read nothing too')
})

test('sharded (as on a Redis Cluster): an entry and its marks share a hash slot; an invalidation reaches every shard', async (t) => {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
  connections.push(redis)
  const store = new RedisCacheStore({ redis, redisKey: (name) => `${prefix}sh:${name}`, ttlMs: TTL_MS, shards: 16 })
  const cache = new ResponseCache(store, { ttlMs: TTL_MS, onError: (err) => { throw err } })
  const keys = Array.from({ length: 40 }, (_, i) => `sharded-${i}`)
  for (const key of keys) await cache.fill(key, async () => answer(key, ['user:s']), (await cache.find(key)).since)
  const names = await redis.keys(`${prefix}sh:*`)
  const slots = new Set(names.filter((n) => n.includes('}:a:')).map((n) => /\{(rc:\d+)\}/.exec(n)![1]))
  t.ok(slots.size > 8, `entries spread over ${slots.size} shards`)
  for (const key of keys) t.ok(await cache.lookup(key), `${key} served`)
  await cache.invalidate(['user:s'])
  for (const key of keys) t.equal(await cache.lookup(key), null, `${key} invalidated`)
})
