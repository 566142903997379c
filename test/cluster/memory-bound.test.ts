// RESPONSE_CACHE_MAX_BYTES is what the process grows by: services started as `npm start` starts one
// (production profile, the embedded store), three with the in-process response cache and three without, are
// sent the same 100000 persisted GETs of distinct keys (each a miss, kept until the cache is full, then
// cycling through it). The cache's share (the RSS of the process with the cache less the RSS of the one
// without, both after the same requests) stays within the factor docs/settings.md states. Kept on the
// heap, entries measured 3.3 times the bound.
// In the suite that runs one file at a time (npm run test:cluster): it loads both CPUs for a minute,
// and measures memory, which other files running beside it would disturb.
import t0, { test } from 'tap'
import http from 'node:http'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { freePort, startService } from '../helpers/server-process.ts'
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

// Six services, each sent 100000 requests: 60-120 s on a 2-CPU machine.
t0.setTimeout(300_000)

test(`the in-process response cache grows the process by at most ${FACTOR} x RESPONSE_CACHE_MAX_BYTES`, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'memory-bound-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const env = (cache: boolean, port: number) => ({
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    PORT: String(port),
    // No access lines: standard output is a pipe to this test, which sends 2000 requests a second
    // beside reading it; lines it had not read yet wait in the service's memory (up to the log
    // buffer's bound), a growth of tens of MiB that lands on one process or the other by scheduling.
    LOG_LEVEL: 'warn',
    SQLITE_PATH: join(dir, `${cache}-${port}.db`),
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
  // The RSS after the same requests. Growth from a reading taken at start is not compared: half a second
  // after it listens a service is still warming up (plans compiled, deployments loaded), and that
  // reading moved by 20 MiB from one start to the next, more than the final readings differ.
  const rssAfterLoad = async (cache: boolean) => {
    const service = await startService(t, env(cache, await freePort()))
    await sleep(500)
    const atStart = rssOf(service.child.pid!)
    await distinctGets(service.url, 0, KEYS)
    await sleep(2000)
    const after = rssOf(service.child.pid!)
    t.comment(`cache ${cache ? 'on' : 'off'}: RSS ${(atStart / MiB).toFixed(1)} MiB at start, ${(after / MiB).toFixed(1)} MiB after ${KEYS} distinct keys`)
    return after
  }
  // One after the other: each measures its own process. Three of each, alternating, and their medians
  // compared: V8's heap makes one reading differ from the next by up to 10 MiB either way (readings of
  // single pairs put the share at 0.66-1.27 x over eight runs), and now and then one process's RSS stands
  // ~180 MiB higher 2 s after the same load (2 of 5 CI runs, never reproduced alone: a heap not yet given
  // back, on one process of four). A cache that really grew past its bound shows in every reading, so in
  // the median; one such outlier does not move it.
  const readings = { off: [] as number[], on: [] as number[] }
  for (let i = 0; i < 3; i++) {
    readings.off.push(await rssAfterLoad(false))
    readings.on.push(await rssAfterLoad(true))
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!
  const share = median(readings.on) - median(readings.off)
  t.comment(`the cache's share ${(share / MiB).toFixed(1)} MiB, ${(share / MAX_BYTES).toFixed(2)} x RESPONSE_CACHE_MAX_BYTES`)
  t.ok(share <= FACTOR * MAX_BYTES, `the cache's share, ${(share / MiB).toFixed(1)} MiB, within ${FACTOR} x ${MAX_BYTES / MiB} MiB`)
})
