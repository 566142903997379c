// What the store reports of changes made elsewhere reaches the response cache (app/core/cache/store-changes.ts),
// driven by a plain object as the store's change feed: tags dropped, 'all' dropped whole (in process
// and in Redis, for every instance), and no answer served while the feed is down or a change could not
// be applied.
import { test } from 'tap'
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { MemoryCacheStore } from '../../app/core/cache/memory-store.ts'
import { RedisCacheStore } from '../../app/core/cache/redis-store.ts'
import { ResponseCache, type CacheStore, type Computed } from '../../app/core/cache/response-cache.ts'
import { followStoreChanges } from '../../app/core/cache/store-changes.ts'
import type { ChangeListener, Store } from '../../app/core/store/types.ts'

const answer = (body: unknown, tags: string[]): Computed => ({ body: JSON.stringify(body), tags, store: true })

/** A store that is only a change feed: the test speaks for it through `feed`. */
function feedingStore () {
  let feed: ChangeListener | undefined
  const store = {
    watchChanges (listener: ChangeListener) {
      feed = listener
      return { stop: async () => { feed = undefined } }
    }
  } as unknown as Store
  return { store, feed: () => feed! }
}

/** Long enough for the follower's batch (one turn of the event loop) to be applied. */
const applied = () => sleep(20)

test('reported tags are dropped; "all" drops everything; nothing is served while the feed is down', async (t) => {
  const cache = new ResponseCache(new MemoryCacheStore({ ttlMs: 60_000 }))
  const { store, feed } = feedingStore()
  const watch = followStoreChanges(store, cache)
  t.teardown(() => watch.stop())
  feed().watching(true)
  const fill = () => Promise.all([
    cache.fill('ann', async () => answer(1, ['user:1'])),
    cache.fill('bob', async () => answer(2, ['user:2'])),
    cache.fill('list', async () => answer(3, ['users']))
  ])
  const held = async () => (await Promise.all(['ann', 'bob', 'list'].map((key) => cache.lookup(key)))).map((e) => e !== null)
  await fill()
  t.same(await held(), [true, true, true])

  feed().changed(['user:1'])
  feed().changed(['users'])
  await applied()
  t.same(await held(), [false, true, false], 'the tags of one turn, applied together')

  await fill()
  feed().changed('all')
  await applied()
  t.same(await held(), [false, false, false], 'a change the store cannot name drops everything')

  await fill()
  feed().watching(false)
  t.same(await held(), [false, false, false], 'feed down: nothing served')
  t.equal(cache.stats().serving, false)
  await cache.fill('ann', async () => answer(1, ['user:1']))
  feed().changed('all')
  feed().watching(true)
  await applied()
  t.equal(cache.stats().serving, true)
  t.same(await held(), [false, false, false], 'nothing kept while down, and everything older dropped once back')
})

test('a change the cache could not be told of is retried, and nothing is served until it is applied', async (t) => {
  const inner = new MemoryCacheStore({ ttlMs: 60_000 })
  let down = false
  const flaky: CacheStore = {
    get bytes () { return inner.bytes },
    begin: () => inner.begin(),
    get: (key) => inner.get(key),
    set: (key, entry, since, ttlMs) => inner.set(key, entry, since, ttlMs),
    invalidate: async (tags) => { if (down) throw new Error('Redis is down'); return inner.invalidate(tags) },
    invalidateAll: () => inner.invalidateAll()
  }
  const cache = new ResponseCache(flaky)
  const errors: unknown[] = []
  const { store, feed } = feedingStore()
  const watch = followStoreChanges(store, cache, { onError: (err) => errors.push(err) })
  t.teardown(() => watch.stop())
  feed().watching(true)
  await cache.fill('ann', async () => answer(1, ['user:1']))
  down = true
  feed().changed(['user:1'])
  await applied()
  t.equal(errors.length, 1, 'told to the log')
  t.equal(cache.stats().serving, false)
  t.equal(await cache.lookup('ann'), null, 'the old answer is not served meanwhile')
  down = false
  await sleep(250)
  t.equal(cache.stats().serving, true, 'retried, applied, and serving again')
  t.equal(await cache.lookup('ann'), null, 'the entry was dropped')
})

test('everything dropped in Redis is dropped for every instance sharing it, and fills begun before are refused', async (t) => {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 })
  const prefix = `test:floor:${randomBytes(4).toString('hex')}:`
  t.teardown(async () => {
    const keys = await redis.keys(`${prefix}*`)
    if (keys.length > 0) await redis.del(...keys)
    await redis.quit()
  })
  const shared = () =>
    new ResponseCache(new RedisCacheStore({ redis, redisKey: (name) => prefix + name, ttlMs: 60_000 }))
  const one = shared()
  const two = shared()
  await one.fill('k', async () => answer(1, ['user:1']))
  t.ok(await two.lookup('k'))
  let release!: () => void
  const racing = one.fill('late', async () => {
    await new Promise<void>((resolve) => { release = resolve })
    return answer(2, ['user:2'])
  })
  await sleep(10)
  await two.invalidateAll()
  release()
  await racing
  t.equal(await one.lookup('k'), null, 'dropped for the instance that filled it')
  t.equal(await one.lookup('late'), null, 'a fill that began before is not kept')
  await one.fill('k', async () => answer(3, ['user:1']))
  t.ok(await two.lookup('k'), 'filled again afterwards, and shared')
})
