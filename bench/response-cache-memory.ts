// The in-process response cache's memory with many distinct keys, under its byte bound:
//   npx node --expose-gc bench/response-cache-memory.ts [keys=100000] [answerBytes=200] [maxBytes=67108864]
// Fills `keys` distinct entries (an answer of about `answerBytes`, one `user:<id>` tag each, keys as the
// cache makes them), then prints entries held, the bytes of their records in the store's block (outside
// V8's heap: heapGrowth counts it as external memory), and the process's heap and RSS growth after a
// full GC. What a running service grows by is test/cluster/memory-bound.test.ts's measure.
import { MemoryCacheStore } from '../app/core/cache/memory-store.ts'
import { ResponseCache, cacheKey } from '../app/core/cache/response-cache.ts'

const [keys = 100_000, answerBytes = 200, maxBytes = 64 * 1024 * 1024] = process.argv.slice(2).map(Number)
const gc = (globalThis as { gc?: () => void }).gc
if (!gc) throw new Error('run with --expose-gc')

const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`
gc()
const before = process.memoryUsage()
const store = new MemoryCacheStore({ ttlMs: 600_000, maxBytes })
const cache = new ResponseCache(store, { ttlMs: 600_000 })
const pad = 'x'.repeat(Math.max(0, answerBytes - 60))
for (let i = 0; i < keys; i++) {
  const id = String(i)
  const key = cacheKey('persisted:0123456789abcdef', { id }, 'public')
  // Serialised as the service does (JSON.stringify gives one flat string, as a sent answer is).
  const body = JSON.stringify({ data: { user: { id, name: `User ${id}`, bio: pad } } })
  await cache.fill(key, async () => ({ body, tags: [`user:${id}`], store: true }))
}
// Let V8 give back what the filling's garbage made it reserve (its memory reducer runs after a pause).
gc()
await new Promise((resolve) => setTimeout(resolve, 2000))
gc()
const after = process.memoryUsage()
const heap = after.heapUsed + after.external - before.heapUsed - before.external
console.log(JSON.stringify({
  keys,
  answerBytes,
  maxBytes: mib(maxBytes),
  entriesHeld: store.size,
  estimatedBytes: mib(store.bytes),
  heapGrowth: mib(heap),
  heapPerEntry: Math.round(heap / store.size),
  estimatePerEntry: Math.round(store.bytes / store.size),
  heapTotalAfter: mib(after.heapTotal),
  rssBefore: mib(before.rss),
  rssAfter: mib(after.rss),
  rssGrowth: mib(after.rss - before.rss)
}))
