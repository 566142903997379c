// The lease script on a real Redis: what it grants, the window it opens, and instances sharing a caller's
// window through it (test/limits/window-counters.test.ts plays its rules with plain objects).
import { test } from 'tap'
import { Redis } from 'ioredis'
import { randomUUID } from 'node:crypto'
import { SharedCounters, leaseScript } from '../../app/limits/window-counters.ts'
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
  const key = `t-${randomUUID()}:rl:req:user:1`
  const lease = leaseScript(redis)
  t.same(await lease(key, 60, 100, 5000).then(([grant, granted]) => [grant, granted]), [60, 60])
  const ttl = await redis.pttl(key)
  t.ok(ttl > 4000 && ttl <= 5000, `the window opened by the first grant (${ttl} ms left)`)
  const [grant, granted, left] = await lease(key, 60, 100, 5000)
  t.same([grant, granted], [40, 100], 'what the limit leaves, no more')
  t.ok(left <= ttl, 'the same window')
  t.same((await lease(key, 1, 100, 5000)).slice(0, 2), [0, 100], 'a spent window grants nothing')
  t.ok(await redis.pttl(key) <= ttl, 'and does not extend the window')
})

test('three instances sharing one Redis admit no more than the limit, by leases and per request', async (t) => {
  const redis = await redisFor(t)
  for (const counting of ['leases', 'per-request'] as const) {
    const prefix = `t-${randomUUID()}:`
    const instances = [0, 1, 2].map(() => {
      const lease = leaseScript(redis)
      return new SharedCounters((key, want, limit, windowMs) => lease(prefix + key, want, limit, windowMs),
        { counting, onFallback: (err) => { throw err } })
    })
    // 1000 requests at once, spread over the instances: a burst against a limit of 100.
    const answers = await Promise.all(Array.from({ length: 1000 }, (_, i) => instances[i % 3]!.take('req:user:1', 1, 100, 60_000)))
    const admitted = answers.filter((a) => a.admitted).length
    t.equal(admitted, 100, `${counting}: 100 of 1000 admitted`)
    t.equal(Number(await redis.get(`${prefix}req:user:1`)), 100, `${counting}: Redis granted the limit`)
  }
})
