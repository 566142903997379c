// RESPONSE_CACHE_MAX_BYTES is what the process grows by: two services started as `npm start` starts one
// (production profile, the embedded store), one with the in-process response cache and one without, are
// sent the same 100000 persisted GETs of distinct keys (each a miss, kept until the cache is full, then
// cycling through it). The cache's share of the growth in RSS (cache on less cache off) stays within
// the factor docs/settings.md states. Kept on the heap, entries measured 3.3 times the bound.
// In the suite that runs one file at a time (npm run test:cluster): it loads both CPUs for a minute and
// a half, and measures memory, which other files running beside it would disturb.
import t0, { test } from 'tap'
import http from 'node:http'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { startService } from '../helpers/server-process.ts'
import { MANIFEST_FILE, queryIdOf } from '../persisted/helpers.ts'

const KEYS = 100_000
const MAX_BYTES = 32 * 1024 * 1024
/** docs/settings.md: the cache's share of RSS growth is at most this times RESPONSE_CACHE_MAX_BYTES. */
const FACTOR = 1.5
const MiB = 1024 * 1024

const rssOf = (pid: number) => Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024

/** Sends `count` persisted GETs of UserById, each for another id, 32 at a time over kept-alive connections. */
async function distinctGets (url: string, first: number, count: number): Promise<void> {
  const { port } = new URL(url)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 32 })
  const queryId = encodeURIComponent(queryIdOf('UserById'))
  const get = (n: number) => new Promise<void>((resolve, reject) => {
    const variables = encodeURIComponent(JSON.stringify({ id: `user-${n}` }))
    http.get({ host: '127.0.0.1', port, agent, path: `/graphql?queryId=${queryId}&variables=${variables}` }, (res) => {
      res.resume()
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))))
    }).on('error', reject)
  })
  let next = first
  await Promise.all(Array.from({ length: 32 }, async () => { while (next < first + count) await get(next++) }))
  agent.destroy()
}

// Two services, each sent 100000 requests: 90-115 s on a 2-CPU machine.
t0.setTimeout(300_000)

test(`the in-process response cache grows the process by at most ${FACTOR} x RESPONSE_CACHE_MAX_BYTES`, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'memory-bound-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const env = (cache: boolean) => ({
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'info',
    SQLITE_PATH: join(dir, `${cache}.db`),
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    PERSISTED_MANIFEST: MANIFEST_FILE,
    RESPONSE_CACHE: String(cache),
    RESPONSE_CACHE_MAX_BYTES: String(MAX_BYTES),
    // The per-instance memory of ETags is a cache of its own (bounded by CACHE_MAX_BYTES): off in both.
    CACHE_MAX_ENTRIES: '0',
    RATE_LIMIT_REQUESTS: '1000000000',
    RATE_LIMIT_COST: '1000000000000'
  })
  // From the moment it is ready: both processes grow alike from there (V8's young generation, compiled
  // code), but for what the cache keeps.
  const growth = async (cache: boolean) => {
    const service = await startService(t, env(cache))
    await sleep(500)
    const before = rssOf(service.child.pid!)
    await distinctGets(service.url, 0, KEYS)
    await sleep(2000)
    return rssOf(service.child.pid!) - before
  }
  // One after the other: each measures its own process, on a machine shared with other test files.
  const off = await growth(false)
  const on = await growth(true)
  const share = on - off
  t.comment(`RSS growth over ${KEYS} distinct keys: ${(on / MiB).toFixed(1)} MiB with the cache, ` +
    `${(off / MiB).toFixed(1)} MiB without; the cache's share ${(share / MiB).toFixed(1)} MiB, ` +
    `${(share / MAX_BYTES).toFixed(2)} x RESPONSE_CACHE_MAX_BYTES`)
  t.ok(share <= FACTOR * MAX_BYTES, `the cache's share, ${(share / MiB).toFixed(1)} MiB, within ${FACTOR} x ${MAX_BYTES / MiB} MiB`)
})
