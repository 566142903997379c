// The response cache's core with its in-process store, driven by plain objects: keys, the byte bound
// and LRU order, the TTL, single-flight, invalidation by tag, and the read-before-write race.
import { test } from 'tap'
import { MemoryCacheStore, blockLayout, entryBytes } from '../../app/core/cache/memory-store.ts'
import { textHash } from '../../app/core/text-hash.ts'
import {
  ResponseCache, ageOf, cacheKey, withExtensions, type CacheStore, type Computed
} from '../../app/core/cache/response-cache.ts'

function memoryCache (options: { maxBytes?: number; ttlMs?: number; maxMarks?: number; now?: () => number } = {}) {
  const ttlMs = options.ttlMs ?? 60_000
  const store = new MemoryCacheStore({ ...options, ttlMs })
  return { store, cache: new ResponseCache(store, { ttlMs, now: options.now }) }
}

const answer = (body: unknown, tags: string[] = []): Computed => ({ body: JSON.stringify(body), tags, store: true })

/** A computation that reads at once and finishes when told to, counting its runs. */
function gated (computed: () => Computed) {
  let runs = 0
  let open!: () => void
  const gate = new Promise<void>((resolve) => { open = resolve })
  return {
    compute: async () => { runs++; const result = computed(); await gate; return result },
    open: () => open(),
    get runs () { return runs }
  }
}

test('the key is the plan, the coerced variables and the scope', async (t) => {
  // (The pipeline coerces variables in their definitions' order: the order a client writes them in does
  // not reach the key, as test/cache/http.test.ts shows through a listening server.)
  t.equal(cacheKey('p1', { a: 1, z: undefined }, 'public'), cacheKey('p1', { a: 1 }, 'public'), 'an undefined field is absent')
  const keys = new Set([
    cacheKey('p1', { a: 1 }, 'public'),
    cacheKey('p2', { a: 1 }, 'public'),
    cacheKey('p1', { a: '1' }, 'public'),
    cacheKey('p1', { a: [1, 2] }, 'public'),
    cacheKey('p1', { a: [2, 1] }, 'public'),
    cacheKey('p1', { a: 1 }, 'user:2'),
    cacheKey('p1', { a: 1 }, 'user:3'),
    cacheKey('p1', { a: 1 }, 'anonymous')
  ])
  t.equal(keys.size, 8, 'plans, values, list orders and scopes are told apart')
  t.not(cacheKey('a\n', {}, 'b'), cacheKey('a', {}, '\nb'), 'parts cannot run into each other')
})

test('a hit gives the body, age and tags; the caller splices its own extensions', async (t) => {
  let now = 1_000_000
  const { cache } = memoryCache({ now: () => now })
  const key = cacheKey('p', {}, 'public')
  t.equal(await cache.lookup(key), null)
  const filled = await cache.fill(key, async () => { now += 1500; return answer({ data: { user: { id: '1' } } }, ['user:1']) })
  t.same({ executed: filled.executed, storable: filled.storable }, { executed: true, storable: true })
  const hit = await cache.lookup(key)
  t.same(hit, filled.entry)
  t.equal(hit!.createdAt, 1_000_000, 'created when the computation started')
  t.equal(ageOf(hit!, now + 2000), 3)
  t.same(JSON.parse(withExtensions(hit!.body, '{"cost":{"requested":3}}')), { data: { user: { id: '1' } }, extensions: { cost: { requested: 3 } } })
  t.equal(hit!.digest, textHash(hit!.body), 'the digest of its text, taken once')
  t.equal(withExtensions(hit!.body, undefined), hit!.body)
  t.match(cache.stats(), { hits: 1, misses: 1, stored: 1, refused: 0 })
})

test('an answer that must not be stored is returned to its caller only', async (t) => {
  const { cache, store } = memoryCache()
  const filled = await cache.fill('k', async () => ({ body: '{"errors":[]}', tags: [], store: false }))
  t.same({ storable: filled.storable, body: filled.entry.body }, { storable: false, body: '{"errors":[]}' })
  t.equal(await cache.lookup('k'), null)
  t.equal(store.size, 0)
})

test('bounded in bytes: the oldest go first, entries in use get a second chance, and none larger than a sixteenth is kept', async (t) => {
  const body = (n: number) => answer({ data: { n, pad: 'x'.repeat(1000) } })
  const one = entryBytes('k00', { body: body(1).body, tags: [] })
  // The block holds its index, then 16 segments of 4 entries each.
  let maxBytes = 16 * 4 * one
  maxBytes += blockLayout(maxBytes).indexBytes
  const { segments, segmentBytes } = blockLayout(maxBytes)
  t.equal(Math.floor(segmentBytes / one), 4)
  const full = segments * 4
  const { cache, store } = memoryCache({ maxBytes })
  const key = (i: number) => `k${String(i).padStart(2, '0')}`
  for (let i = 0; i < full; i++) await cache.fill(key(i), async () => body(i))
  t.equal(store.size, full, 'full')
  t.equal(store.bytes, full * one)
  t.ok(await cache.lookup(key(1)), 'k01 read while its segment is among the oldest: written again at the head')
  for (let i = full; i < full + 4; i++) await cache.fill(key(i), async () => body(i))
  t.ok(store.bytes <= maxBytes, 'never over the bound')
  t.equal(await cache.lookup(key(0)), null, 'the oldest went first')
  t.equal(await cache.lookup(key(2)), null)
  t.ok(await cache.lookup(key(1)), 'the one in use stayed')
  t.ok(await cache.lookup(key(full + 3)))
  t.same(JSON.parse((await cache.lookup(key(1)))!.body).data.n, 1, 'with its own answer')
  const before = store.size
  await cache.fill('huge', async () => answer({ pad: 'x'.repeat(one * 5) }))
  t.equal(await cache.lookup('huge'), null, 'an entry larger than a segment is not kept')
  t.equal(store.size, before, 'and evicts nothing')
  t.equal(cache.stats().bytes, store.bytes)
})

test('keys are compared whole: an entry is never another key\'s, whatever their hashes', async (t) => {
  const { cache, store } = memoryCache({ maxBytes: 4096 })
  // 'Aa' and 'BB' have the same UTF-16 sums; and a key that is a prefix of another.
  for (const k of ['Aa', 'BB', 'user:1', 'user:12', 'é', 'e\u0301']) await cache.fill(k, async () => answer(k))
  for (const k of ['Aa', 'BB', 'user:1', 'user:12', 'é', 'e\u0301']) t.equal(JSON.parse((await cache.lookup(k))!.body), k)
  t.equal(await cache.lookup('user:123'), null)
  t.equal(store.size, 6)
  await cache.fill('user:1', async () => answer('again'))
  t.equal(store.size, 6, 'a key written again replaces its record')
  t.equal(JSON.parse((await cache.lookup('user:1'))!.body), 'again')
})

test('entries expire their TTL after their computation started', async (t) => {
  let now = 0
  const { cache } = memoryCache({ ttlMs: 1000, now: () => now })
  await cache.fill('quick', async () => answer(1))
  now = 500
  await cache.fill('slow', async () => { now += 600; return answer(2) })
  now = 999
  t.ok(await cache.lookup('quick'))
  now = 1000
  t.equal(await cache.lookup('quick'), null)
  now = 1499
  t.ok(await cache.lookup('slow'), 'began at 500, done at 1100: alive until 1500')
  now = 1500
  t.equal(await cache.lookup('slow'), null)
  await cache.fill('too-slow', async () => { now += 1000; return answer(3) })
  t.equal(await cache.lookup('too-slow'), null, 'an answer older than the TTL when done is not kept')
})

test('concurrent misses of one key compute once; the others get that answer', async (t) => {
  const { cache } = memoryCache()
  const computation = gated(() => answer({ data: 1 }, ['users']))
  const fills = Array.from({ length: 10 }, () => cache.fill('k', computation.compute))
  await new Promise((resolve) => setImmediate(resolve))
  computation.open()
  const results = await Promise.all(fills)
  t.equal(computation.runs, 1, 'one execution')
  t.equal(results.filter((r) => r.executed).length, 1)
  t.ok(results.every((r) => r.entry.body === '{"data":1}' && r.storable))
  t.match(cache.stats(), { coalesced: 9, stored: 1 })
  const other = await cache.fill('other', async () => answer(2))
  t.ok(other.executed, 'other keys are not held up')
})

test('waiters run their own computation when the first is not storable or fails', async (t) => {
  const { cache } = memoryCache()
  const failing = gated(() => ({ body: '{"errors":[1]}', tags: [], store: false }))
  const fills = Array.from({ length: 3 }, () => cache.fill('k', failing.compute))
  failing.open()
  t.equal((await Promise.all(fills)).filter((r) => r.executed).length, 3)
  t.equal(failing.runs, 3)

  let runs = 0
  const first = cache.fill('t', async () => { runs++; await new Promise((resolve) => setTimeout(resolve, 10)); throw new Error('deadline') })
  const second = cache.fill('t', async () => { runs++; return answer('ok') })
  await t.rejects(first, /deadline/)
  t.equal((await second).entry.body, '"ok"')
  t.equal(runs, 2)
})

test('invalidation drops exactly the entries that read one of the tags', async (t) => {
  const { cache } = memoryCache()
  await cache.fill('user1', async () => answer(1, ['user:1']))
  await cache.fill('user2', async () => answer(2, ['user:2']))
  await cache.fill('list', async () => answer([1, 2], ['users']))
  await cache.fill('room', async () => answer('m', ['room:a', 'user:1']))
  await cache.invalidate(['user:1'])
  t.equal(await cache.lookup('user1'), null)
  t.equal(await cache.lookup('room'), null, 'a room whose author was written')
  t.ok(await cache.lookup('user2'))
  t.ok(await cache.lookup('list'))
  await cache.invalidate(['users'])
  t.equal(await cache.lookup('list'), null)
  t.ok(await cache.lookup('user2'))
  await cache.fill('user1', async () => answer(1.1, ['user:1']))
  t.ok(await cache.lookup('user1'), 'a read after the write is stored')
  t.equal(cache.stats().invalidations, 2)
})

test('a computation that began before a write is not stored once the write invalidated its tags', async (t) => {
  const { cache } = memoryCache()
  const stale = gated(() => answer('old', ['users', 'user:1']))
  const fill = cache.fill('k', stale.compute)
  await new Promise((resolve) => setImmediate(resolve))
  await cache.invalidate(['user:1'])
  stale.open()
  t.equal((await fill).entry.body, '"old"', 'its own caller, who began before the write, gets it')
  t.equal(await cache.lookup('k'), null, 'nobody else does')
  t.match(cache.stats(), { refused: 1, stored: 0 })
})

test('a read that began before a write is not stored after its invalidation, nor served to a later reader', async (t) => {
  const { cache } = memoryCache()
  let value = 'old'
  const stale = gated(() => answer(value, ['user:1']))
  const first = cache.fill('k', stale.compute)
  await new Promise((resolve) => setImmediate(resolve))
  value = 'new'
  await cache.invalidate(['user:1'])
  // Acknowledged: a read from now on must see 'new'. It joins the running computation...
  let laterRuns = 0
  const later = cache.fill('k', async () => { laterRuns++; return answer(value, ['user:1']) })
  stale.open()
  t.equal((await first).entry.body, '"old"', 'the first reader, who began before the write, gets what it read')
  t.equal((await later).entry.body, '"new"', '...but is not handed the stale answer: it computes its own')
  t.equal(laterRuns, 1)
  t.equal((await cache.lookup('k'))?.body, '"new"')
  t.match(cache.stats(), { refused: 1, stored: 1 })
})

test('marks stay bounded: dropped after the TTL, and all at once past their bound', async (t) => {
  let now = 0
  const { cache, store } = memoryCache({ ttlMs: 1000, maxMarks: 10, now: () => now })
  for (let i = 0; i < 5; i++) await cache.invalidate([`user:${i}`])
  t.equal(store.markCount, 5)
  now = 1000
  await cache.invalidate(['users'])
  t.equal(store.markCount, 1, 'marks as old as the TTL concern no entry')
  await cache.fill('kept', async () => answer(1, ['user:1']))
  const running = gated(() => answer(2, ['room:x']))
  const fill = cache.fill('racing', running.compute)
  await new Promise((resolve) => setImmediate(resolve))
  for (let i = 0; i < 11; i++) await cache.invalidate([`user:x${i}`])
  t.ok(store.markCount <= 10)
  running.open()
  await fill
  t.equal(await cache.lookup('racing'), null, 'a fill that began before the flush is refused')
  t.equal(await cache.lookup('kept'), null, 'entries older than the flush count as invalidated')
  await cache.fill('after', async () => answer(3, ['user:1']))
  t.ok(await cache.lookup('after'))
})

test('a failing store degrades to executing; a failed invalidation rejects', async (t) => {
  const errors: unknown[] = []
  const broken: CacheStore = {
    bytes: null,
    begin: async () => { throw new Error('down') },
    get: async () => { throw new Error('down') },
    set: async () => { throw new Error('down') },
    invalidate: async () => { throw new Error('down') },
    invalidateAll: async () => { throw new Error('down') }
  }
  const cache = new ResponseCache(broken, { onError: (err) => errors.push(err) })
  t.equal(await cache.lookup('k'), null)
  t.equal((await cache.fill('k', async () => answer(1))).entry.body, '1')
  await t.rejects(cache.invalidate(['users']), /down/)
  t.match(cache.stats(), { misses: 1, errors: 2 })
  t.equal(errors.length, 2)
})
