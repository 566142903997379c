// The rule, as a property: in any interleaving of reads and writes (fast-check's scheduler orders every
// step: starts, the store reads inside computations, invalidations), no read returns a value older than
// the last write acknowledged before the read began. For the in-process store, and for two instances
// sharing Redis (each read and write on a random one of them).
import t0, { test } from 'tap'
import fc from 'fast-check'
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { MemoryCacheStore } from '../../app/core/cache/memory-store.ts'
import { RedisCacheStore } from '../../app/core/cache/redis-store.ts'
import { ResponseCache } from '../../app/core/cache/response-cache.ts'

const IDS = ['a', 'b'] as const
type Id = typeof IDS[number]
type Op = { kind: 'write', id: Id, on: number } | { kind: 'read', id: Id, on: number } | { kind: 'list', on: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('write' as const), id: fc.constantFrom(...IDS), on: fc.nat(1) }),
  fc.record({ kind: fc.constant('read' as const), id: fc.constantFrom(...IDS), on: fc.nat(1) }),
  fc.record({ kind: fc.constant('list' as const), on: fc.nat(1) })
)

/** Runs `ops` at once, ordered by the scheduler, on `caches` (instances sharing one store): the violations. */
async function run (s: fc.Scheduler, ops: Op[], caches: ResponseCache[]): Promise<string[]> {
  const db: Record<Id, number> = { a: 0, b: 0 }
  const acked: Record<Id, number> = { a: 0, b: 0 }
  const violations: string[] = []
  const step = (label: string) => s.schedule(Promise.resolve(label))

  async function read (cache: ResponseCache, key: string, ids: readonly Id[], tags: string[]) {
    const floor = ids.map((id) => acked[id])
    let entry = await cache.lookup(key)
    entry ??= (await cache.fill(key, async () => {
      await step(`compute ${key}`)
      const body = JSON.stringify(ids.map((id) => db[id]))
      await step(`computed ${key}`)
      return { body, tags, store: true }
    })).entry
    const seen = JSON.parse(entry.body) as number[]
    ids.forEach((id, i) => {
      if (seen[i]! < floor[i]!) violations.push(`${key} returned ${id}=${seen[i]} after write ${floor[i]} was acknowledged`)
    })
  }

  async function write (cache: ResponseCache, id: Id) {
    const version = ++db[id]
    await step(`stored ${id}=${version}`)
    await cache.invalidate([`user:${id}`, 'users'])
    acked[id] = Math.max(acked[id], version)
  }

  const tasks = ops.map(async (o, i) => {
    await step(`start ${i}`)
    const cache = caches[o.on % caches.length]!
    if (o.kind === 'write') await write(cache, o.id)
    else if (o.kind === 'read') await read(cache, `user ${o.id}`, [o.id], [`user:${o.id}`])
    else await read(cache, 'list', IDS, ['users'])
  })
  await s.waitFor(Promise.all(tasks))
  return violations
}

/** Throws, so that fast-check shrinks the interleaving and reports it. */
function assertFresh (violations: string[]): void {
  if (violations.length > 0) throw new Error(violations.join('; '))
}

test('in process: no read returns a value older than the last acknowledged write', async (t) => {
  await fc.assert(fc.asyncProperty(fc.scheduler(), fc.array(op, { minLength: 1, maxLength: 25 }), async (s, ops) => {
    const cache = new ResponseCache(new MemoryCacheStore({ ttlMs: 60_000 }))
    assertFresh(await run(s, ops, [cache]))
  }), { numRuns: 300 })
  t.pass('300 interleavings')
})

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const connections: Redis[] = []
t0.teardown(async () => {
  if (connections[0]) {
    const keys = await connections[0].keys('test-response-cache-property-*')
    if (keys.length > 0) await connections[0].del(...keys)
  }
  await Promise.all(connections.map((c) => c.quit()))
})

test('two instances sharing Redis: no read on either returns a value older than the last acknowledged write', async (t) => {
  const redis = [0, 1].map(() => new Redis(REDIS_URL, { maxRetriesPerRequest: 1, commandTimeout: 2000 }))
  connections.push(...redis)
  await fc.assert(fc.asyncProperty(fc.scheduler(), fc.array(op, { minLength: 1, maxLength: 20 }), async (s, ops) => {
    const prefix = `test-response-cache-property-${randomUUID()}:`
    const caches = redis.map((r) => new ResponseCache(
      new RedisCacheStore({ redis: r, redisKey: (name) => prefix + name, ttlMs: 60_000 }),
      { ttlMs: 60_000, onError: (err) => { throw err } }
    ))
    assertFresh(await run(s, ops, caches))
  }), { numRuns: 60 })
  t.pass('60 interleavings')
})
