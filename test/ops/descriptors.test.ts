// Running out of file descriptors: the real process under a low open-files limit, flooded with idle
// connections on both listeners (the API port from several addresses, as the per-address cap invites,
// and METRICS_PORT, which has no per-address cap). It must stay alive and answer again once they close.
import { test } from 'tap'
import { connect, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { REPO, freePort, startService } from '../helpers/server-process.ts'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY, testConfig } from '../helpers/app.ts'
import { connectionCaps, defaultMaxConnections, openFilesLimit } from '../../app/core/descriptors.ts'

const OPEN_FILES = 512

/** Opens `count` idle connections to host:port from `localAddress`; those the server drops are counted, not kept. */
async function flood (port: number, count: number, localAddress: string): Promise<{ open: Socket[]; dropped: number }> {
  const open: Socket[] = []
  let dropped = 0
  await Promise.all(Array.from({ length: count }, () => new Promise<void>((resolve) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress })
    socket.on('error', () => {})
    socket.once('close', () => { dropped++; resolve() })
    socket.once('connect', () => {
      open.push(socket)
      // A connection the server closes at once (over its cap) ends within moments; an accepted one stays idle.
      setTimeout(resolve, 500)
    })
  })))
  return { open: open.filter((socket) => !socket.destroyed), dropped }
}

const cases: { name: string; env: Record<string, string>; capped: boolean }[] = [
  { name: 'the default MAX_CONNECTIONS keeps the listeners below the limit', env: {}, capped: true },
  // Without the cap, descriptors do run out: accept fails with EMFILE, and so does reading RSS.
  {
    name: 'with MAX_CONNECTIONS=0, running out of descriptors is survived',
    env: { MAX_CONNECTIONS: '0' },
    capped: false
  }
]

for (const { name, env, capped } of cases) {
  test(`idle connections past the open-files limit (${OPEN_FILES}) on both ports: ${name}; the process lives and answers again once they close`, async (t) => {
    const dir = t.testdir()
    const metricsPort = await freePort()
    const service = await startService(t, {
      JWT_SECRET: TEST_JWT_SECRET,
      PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
      PORT: '0',
      METRICS_PORT: String(metricsPort),
      SQLITE_PATH: `${dir}/service.db`,
      LOG_LEVEL: 'info', // startService waits for the "Server listening" line
      // RSS sampled every 20 ms (a threshold no test reaches): it runs many times while descriptors are short.
      PRESSURE_MAX_RSS_BYTES: String(2 ** 40),
      PRESSURE_SAMPLE_INTERVAL_MS: '20',
      ...env
    }, { command: ['prlimit', `--nofile=${OPEN_FILES}:${OPEN_FILES}`, process.execPath, `${REPO}/app/server.ts`], cwd: dir })
    const apiPort = Number(new URL(service.url).port)
    const sockets: Socket[] = []
    t.teardown(() => { for (const socket of sockets) socket.destroy() })

    // 100 from each of 8 loopback addresses (each within MAX_CONNECTIONS_PER_IP), then the metrics port.
    let dropped = 0
    for (let i = 2; i < 10; i++) {
      const result = await flood(apiPort, 100, `127.0.0.${i}`)
      sockets.push(...result.open)
      dropped += result.dropped
    }
    const metrics = await flood(metricsPort, OPEN_FILES, '127.0.0.1')
    sockets.push(...metrics.open)
    dropped += metrics.dropped
    t.ok(dropped > 0, `connections past the cap or the limit were closed (${sockets.length} held, ${dropped} dropped)`)
    if (capped) {
      t.ok(
        sockets.length < OPEN_FILES - 100,
        `the connections held leave room under the open-files limit (${sockets.length})`
      )
      t.match(service.stdout(), /connections over MAX_CONNECTIONS closed unanswered/, 'the refusals are logged')
    } else t.ok(sockets.length > OPEN_FILES - 64, `the connections held took nearly every descriptor (${sockets.length})`)

    // A few sampling intervals with the connections held, then the process must still be there.
    const exited = await Promise.race([service.exited, sleep(1000).then(() => 'running')])
    t.equal(exited, 'running', 'the process is alive')
    t.notMatch(service.stdout(), /shutting down/, 'and not shutting down')

    for (const socket of sockets) socket.destroy()
    let live: number | undefined
    for (let attempt = 0; attempt < 50 && live !== 200; attempt++) {
      await sleep(100)
      live = await fetch(`${service.url}/health/live`).then((r) => r.status, () => undefined)
    }
    t.equal(live, 200, '/health/live answers once the connections are gone')
    const answer = await fetch(`${service.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: '{ users(limit: 1) { id } }' })
    })
    t.equal(answer.status, 200, 'a GraphQL POST is answered')
    t.same(Object.keys(((await answer.json()) as { data: object }).data), ['users'])
    const scrape = await fetch(`http://127.0.0.1:${metricsPort}/metrics`)
    t.equal(scrape.status, 200, 'the metrics port answers again')
    await scrape.text()
    t.equal(service.child.exitCode, null, 'still alive')
    t.notMatch(service.stdout(), /shutting down/, `it never began a shutdown:\n${service.stdout().slice(-2000)}${service.stderr().slice(-2000)}`)
  })
}

test('MAX_CONNECTIONS defaults to the open-files limit less a reserve, split between the listeners', async (t) => {
  const limit = openFilesLimit()
  t.ok(limit !== null && limit > 0, `the limit is read from /proc/self/limits (${limit})`)
  t.equal(
    testConfig().server.maxConnections,
    limit! - 128 - 10,
    "the default follows this process's limit, less the reserve and the store's pool (10)"
  )
  t.equal(testConfig({ DATABASE_POOL_SIZE: '50' }).server.maxConnections, limit! - 128 - 50)
  t.equal(testConfig({ MAX_CONNECTIONS: '1000' }).server.maxConnections, 1000)
  t.equal(defaultMaxConnections(4096, 10), 4096 - 138)
  t.equal(defaultMaxConnections(200, 10), 100, 'at least half of a small limit')
  t.equal(defaultMaxConnections(null, 10), 0, 'no cap where the limit is unknown')
  t.same(connectionCaps(3968, true), { api: 3952, metrics: 16 })
  t.same(connectionCaps(3968, false), { api: 3968, metrics: 0 }, 'without a metrics port, the API listener has it all')
  t.same(connectionCaps(0, true), { api: 0, metrics: 0 }, '0: no cap')
})
