// A Redis of its own for cached answers (RESPONSE_CACHE_REDIS_URL), run as a cache is run: a small
// memory bound and allkeys-lru, so Redis evicts entries and marks alike whenever it needs room. An
// evicted entry is a miss; an evicted mark makes the entries that rely on it misses; nothing stale is
// ever served. First the store itself, driven by many writers and readers; then two listening instances
// whose state (budgets, nonces, events) stays on the Redis that never evicts.
import { test } from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { RedisCacheStore } from '../../app/core/cache/redis-store.ts'
import { ResponseCache } from '../../app/core/cache/response-cache.ts'
import { gql, newUser, startInstances, startPrivateRedis, token, type Instance } from '../cluster/harness.ts'
import { CACHE_TEST_ENV } from './instances.ts'

const EVICTING = ['--maxmemory', '3mb', '--maxmemory-policy', 'allkeys-lru', '--maxmemory-samples', '3']

async function evictedKeys (redis: Redis): Promise<number> {
  return Number(/evicted_keys:(\d+)/.exec(await redis.info('stats'))![1])
}

test('under eviction, every lookup after a write sees it, on every instance sharing the store', async (t) => {
  const cacheRedis = await startPrivateRedis(t, EVICTING)
  const connections = [0, 1].map(() => new Redis(cacheRedis.url, { maxRetriesPerRequest: 1 }))
  t.teardown(() => { for (const c of connections) c.disconnect() })
  const caches = connections.map((redis) => new ResponseCache(
    new RedisCacheStore({ redis, redisKey: (name) => `ev:${name}`, ttlMs: 60_000, mayEvict: true }),
    { ttlMs: 60_000 }))
  // The truth: a version per record; an answer reads records and says which versions it saw.
  const versions = new Map<number, number>()
  const RECORDS = 50
  for (let r = 0; r < RECORDS; r++) versions.set(r, 0)
  const padding = 'x'.repeat(2000) // answers big enough to fill 3 MB many times over
  let stale = 0
  let served = 0
  for (let step = 0; step < 12_000; step++) {
    const cache = caches[step % 2]!
    if (step % 10 === 0) {
      // A write: invalidated (as the service does) before it is acknowledged; the truth moves on.
      const record = step % RECORDS
      versions.set(record, versions.get(record)! + 1)
      await cache.invalidate([`r:${record}`])
      continue
    }
    const records = [step % RECORDS, (step * 7) % RECORDS]
    // Half the reads among 2000 keys (4 MB of answers, more than Redis holds: eviction), half among 100
    // hot ones (read again soon: hits, unless their entry or a mark they need was evicted meanwhile).
    const key = step % 2 === 0 ? `q:${records.join(',')}:${step % 4000}` : `q:${records.join(',')}:hot:${step % 100}`
    const found = await cache.find(key)
    if (found.entry) {
      served++
      const seen = JSON.parse(found.entry.body) as { versions: number[] }
      if (records.some((r, i) => seen.versions[i] !== versions.get(r))) stale++
      continue
    }
    await cache.fill(key, async () => ({
      body: JSON.stringify({ versions: records.map((r) => versions.get(r)), padding }),
      tags: records.map((r) => `r:${r}`),
      store: true
    }), found.since)
  }
  const evicted = await evictedKeys(connections[0]!)
  t.ok(evicted > 1000, `Redis evicted ${evicted} keys`)
  t.ok(served > 100, `${served} answers served from the cache`)
  t.equal(stale, 0, 'none of them stale')
})

test('two instances with a cache Redis of their own: answers there, state on the Redis that never evicts', async (t) => {
  const cacheRedis = await startPrivateRedis(t, EVICTING)
  const { instances, redisPrefix, redisEnv } = await startInstances(t, {
    env: { ...CACHE_TEST_ENV, RESPONSE_CACHE_REDIS_URL: cacheRedis.url }
  })
  const [a, b] = instances as [Instance, Instance]
  const admin = token(`evict-admin-${randomBytes(3).toString('hex')}`, 'ADMIN')
  const id = await newUser(a.url, 'evict')
  const read = (instance: Instance) => gql(instance.url, 'query One($id: ID!) { user(id: $id) { name } }', { id }, { token: admin })
  const cacheClient = new Redis(cacheRedis.url)
  const stateClient = new Redis(redisEnv.REDIS_URL ?? 'redis://127.0.0.1:6379')
  t.teardown(() => { cacheClient.disconnect(); stateClient.disconnect() })

  for (let round = 0; round < 30; round++) {
    const name = `Name ${round}`
    const renamed = await gql(round % 2 ? a.url : b.url, 'mutation ($id: ID!, $input: UpdateUserInput!) { updateUser(id: $id, input: $input) { name } }',
      { id, input: { name } }, { token: admin })
    t.equal(renamed.status, 200)
    for (const instance of [a, b, a, b]) {
      const answer = await read(instance)
      if (answer.body.data.user.name !== name) t.fail(`round ${round}: ${instance.name} answered ${answer.body.data.user.name}`)
    }
    // Fill the cache Redis past its bound with other answers, so entries and marks get evicted.
    for (let batch = 0; batch < 4; batch++) {
      await Promise.all(Array.from({ length: 50 }, (_, i) =>
        gql(a.url, 'query Other($id: ID!) { user(id: $id) { name } }', { id: `nobody-${round}-${batch}-${i}-${'p'.repeat(400)}` }, { token: admin })))
    }
  }
  t.pass('every read after a write showed it, on both instances')
  t.ok(await evictedKeys(cacheClient) > 0, 'the cache Redis evicted keys')
  t.ok((await cacheClient.keys(`${redisPrefix}{rc:*`)).length > 0, 'answers live in the cache Redis')
  t.equal((await stateClient.keys(`${redisPrefix}{rc:*`)).length, 0, 'and none in the state Redis')
  t.ok((await stateClient.keys(`${redisPrefix}rl:*`)).length > 0, 'where the budgets are')
})
