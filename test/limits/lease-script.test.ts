// The lease script on a real Redis: what it grants, the window it opens, and instances sharing a caller's
// window through it (test/limits/window-counters.test.ts plays its rules with plain objects).
import { test } from 'tap'
import { Redis } from 'ioredis'
import { randomUUID } from 'node:crypto'
import { SharedCounters, leaseScript } from '../../app/core/limits/window-counters.ts'
import type { TestLike } from '../helpers/app.ts'

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

async function redisFor (t: TestLike): Promise<Redis> {
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 })
  await redis.connect().catch((err: Error) => {
    throw new Error(`these tests need Redis at ${REDIS_URL} (TEST_REDIS_URL): ${err.message}`)
  })
  t.teardown(() => redis.disconnect())
  return redis
}

test('a grant never passes the limit, opens the window once, and says what is left of it', async (t) => {
  const redis = await redisFor(t)
  const key = `t-${randomUUID()}:rl:{user:1}:req`
  const lease = leaseScript(redis)
  const one = (want: number) => lease([{ key, want, limit: 100 }], 5000).then((grants) => grants[0]!)
  t.same(await one(60).then(([grant, granted]) => [grant, granted]), [60, 60])
  const ttl = await redis.pttl(key)
  t.ok(ttl > 4000 && ttl <= 5000, `the window opened by the first grant (${ttl} ms left)`)
  const [grant, granted, left] = await one(60)
  t.same([grant, granted], [40, 100], 'what the limit leaves, no more')
  t.ok(left <= ttl, 'the same window')
  t.same((await one(1)).slice(0, 2), [0, 100], 'a spent window grants nothing')
  t.ok(await redis.pttl(key) <= ttl, 'and does not extend the window')
})

test('one script leases two keys of a window, each by its own limit', async (t) => {
  const redis = await redisFor(t)
  const prefix = `t-${randomUUID()}:rl:`
  const lease = leaseScript(redis, prefix)
  await redis.set(`${prefix}{user:1}:cost`, 990, 'PX', 5000)
  const grants = await lease([{ key: '{user:1}:req', want: 7, limit: 100 }, { key: '{user:1}:cost', want: 63, limit: 1000 }], 5000)
  t.same(grants.map(([grant, granted]) => [grant, granted]), [[7, 7], [10, 1000]], 'each key granted what its limit leaves')
  t.equal(Number(await redis.get(`${prefix}{user:1}:req`)), 7)
  t.ok(grants[0]![2] > 4000 && grants[1]![2] <= 5000, 'each answers its own window')
})

test('three instances sharing one Redis admit no more than the limit, by leases and per request', async (t) => {
  const redis = await redisFor(t)
  for (const counting of ['leases', 'per-request'] as const) {
    const prefix = `t-${randomUUID()}:`
    const instances = [0, 1, 2].map(() =>
      new SharedCounters(leaseScript(redis, prefix), { counting, onFallback: (err) => { throw err } }))
    // 1000 requests at once, spread over the instances: a burst against a limit of 100, the cost budget
    // leased alongside.
    const cost = { key: '{user:1}:cost', limit: 1000 }
    const answers = await Promise.all(
      Array.from({ length: 1000 }, (_, i) => instances[i % 3]!.take('{user:1}:req', 1, 100, 60_000, cost)))
    const admitted = answers.filter((a) => a.admitted).length
    t.equal(admitted, 100, `${counting}: 100 of 1000 admitted`)
    t.equal(Number(await redis.get(`${prefix}{user:1}:req`)), 100, `${counting}: Redis granted the limit`)
  }
})
