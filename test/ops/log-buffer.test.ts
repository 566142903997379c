// A service whose standard output nobody reads (a stalled log collector, a paused pipe) keeps answering
// and does not grow without bound: lines wait in memory up to 16 MiB (plugins/logging.ts
// LOG_BUFFER_MAX_BYTES), the rest are dropped and counted, and once standard output is read again the
// log says how many. Through a real process whose stdout pipe this test stops reading.
import { test } from 'tap'
import http from 'node:http'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { LOG_BUFFER_MAX_BYTES } from '../../plugins/logging.ts'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { freePort, startService } from '../helpers/server-process.ts'

const MiB = 1024 * 1024
const rssOf = (pid: number) => Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024

/** A path the service answers 404 to, logged whole (twice: Fastify's not-found line and the access line). */
const LONG_PATH = `/${'x'.repeat(12_000)}`
/** Enough to fill the bound many times over (each request writes about 24 KB of lines)... */
const FILLING = 4000
/** ...and then as many again: with the bound reached, these add nothing that waits. */
const MORE = 8000

async function notFoundRequests (port: number, count: number): Promise<number[]> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 16 })
  const statuses: number[] = []
  const get = () => new Promise<void>((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, agent, path: LONG_PATH }, (res) => {
      statuses.push(res.statusCode!)
      res.resume()
      res.on('end', resolve)
    }).on('error', reject)
  })
  let sent = 0
  await Promise.all(Array.from({ length: 16 }, async () => { while (sent++ < count) await get() }))
  agent.destroy()
  return statuses
}

test('an unread standard output: the service keeps answering, lines wait up to the bound, the rest are dropped and told', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'log-buffer-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const port = await freePort()
  const metricsPort = await freePort()
  const service = await startService(t, {
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    PORT: String(port),
    METRICS_PORT: String(metricsPort),
    LOG_LEVEL: 'info',
    SQLITE_PATH: join(dir, 'service.db'),
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    RATE_LIMIT_REQUESTS: '1000000'
  })
  await sleep(500)
  service.child.stdout.pause()
  const filling = await notFoundRequests(port, FILLING)
  const full = rssOf(service.child.pid!)
  const more = await notFoundRequests(port, MORE)
  const growth = rssOf(service.child.pid!) - full
  const statuses = [...filling, ...more]
  t.equal(statuses.length, FILLING + MORE, 'every request answered while nobody read the log')
  t.ok(statuses.every((s) => s === 404), 'each with its answer (404)')
  // Without the bound the second batch's lines alone are 190 MiB of strings (measured: the process grew
  // 70 MiB over the first 8000 requests with the bound, 141 MiB without); with it, nothing more waits.
  t.comment(`RSS grew ${(growth / MiB).toFixed(1)} MiB over the last ${MORE} requests with an unread standard output`)
  t.ok(growth < LOG_BUFFER_MAX_BYTES, `the process grew ${(growth / MiB).toFixed(1)} MiB once the waiting lines reached their bound`)

  const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text()
  const dropped = Number(/^log_lines_dropped_total (\d+)$/m.exec(metrics)?.[1])
  t.ok(dropped > 0, `log_lines_dropped_total counts the dropped lines (${dropped})`)

  // Read again: the next batch begins with a line telling how many were dropped.
  service.child.stdout.resume()
  await notFoundRequests(port, 5)
  // Lines telling of drops may also have fit in the waiting lines while they were full (a batch smaller
  // than what was left): the last one counts everything dropped so far.
  type Told = { level: number; dropped: number; msg: string }
  let told: Told | undefined
  for (let i = 0; i < 50 && !(told && told.dropped >= dropped); i++) {
    await sleep(100)
    const lines = service.stdout().split('\n').filter((l) => l.includes('"log lines dropped'))
    if (lines.length > 0) told = JSON.parse(lines.at(-1)!) as Told
  }
  t.ok(told, 'the log tells that lines were dropped')
  t.equal(told?.level, 40, 'at warn')
  t.ok(told !== undefined && told.dropped >= dropped, `with how many so far (${told?.dropped}; the metric said ${dropped} before)`)
  t.equal(told?.msg, 'log lines dropped: standard output was not read')
  t.ok(service.stdout().includes('"statusCode":404'), 'and lines are written again')
})
