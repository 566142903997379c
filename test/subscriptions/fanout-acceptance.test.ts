// Acceptance: the measured attack on subscriptions, against the service as a process of its own.
// 950 anonymous subscriptions from 10 loopback addresses (5 connections each, 19 subscriptions per
// connection), each selecting 999 aliases of `content` (cost 1000: inside the anonymous budget), then
// ONE ordinary post. Before the fan-out hub, every subscriber's copy was executed, formatted and
// serialised on its own and sent for free: ~150 MB sent and seconds of CPU for one 150-byte message.
// Now the event is executed once per group, shared, and each subscriber's payer is charged for it
// (so most of these subscriptions end with RATE_LIMITED instead).
import { readFileSync } from 'node:fs'
import { test } from 'tap'
import WebSocket from 'ws'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { startService } from '../helpers/server-process.ts'
import { mintToken } from '../../cli/mint-token.ts'
import { loadConfig } from '../../app/core/config/index.ts'
import { wsUrl } from './clients.ts'

const ADDRESSES = 10
const CONNECTIONS_PER_ADDRESS = 5
const SUBSCRIPTIONS_PER_CONNECTION = 19
const SUBSCRIBERS = ADDRESSES * CONNECTIONS_PER_ADDRESS * SUBSCRIPTIONS_PER_CONNECTION
const ALIASES = 999

/** CPU seconds (user + system) the process has used, from /proc (clock ticks of 1/100 s). */
function cpuSeconds (pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

test('one post to a room of 950 heavy anonymous subscribers: little CPU, few bytes, readiness unharmed', { timeout: 180_000 }, async (t) => {
  const server = await startService(t, {
    PORT: '0',
    HOST: '127.0.0.1',
    SQLITE_PATH: ':memory:',
    DEMO_DATA: 'true',
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    LOG_LEVEL: 'info',
    NODE_ENV: 'development',
    WS_KEEP_ALIVE_MS: '0',
    // The alias cap alone would refuse these subscriptions; lifted, the events' own pricing is what holds.
    MAX_ALIASES: '1000'
  })
  const { url } = server
  const pid = server.child.pid!
  const query = `subscription { messageAdded(roomId: "hot") { ${Array.from({ length: ALIASES }, (_, i) => `a${i}: content`).join(' ')} } }`

  let bytes = 0
  let messages = 0
  const codes = new Map<string, number>()
  const sockets: WebSocket[] = []
  t.teardown(() => { for (const s of sockets) s.terminate() })
  for (let a = 0; a < ADDRESSES; a++) {
    for (let c = 0; c < CONNECTIONS_PER_ADDRESS; c++) {
      const socket = new WebSocket(wsUrl(url), 'graphql-transport-ws', { localAddress: `127.0.0.${a + 2}` })
      sockets.push(socket)
      await new Promise((resolve, reject) => { socket.once('open', resolve); socket.once('error', reject) })
      socket.send(JSON.stringify({ type: 'connection_init' }))
      await new Promise((resolve) => socket.once('message', resolve))
      socket.on('message', (data: Buffer) => {
        bytes += data.length
        messages++
        // Only small messages are read (errors); answers are counted, not parsed.
        if (data.length < 4096) {
          const message = JSON.parse(String(data))
          const code = message.payload?.[0]?.extensions?.code ?? message.type
          codes.set(code, (codes.get(code) ?? 0) + 1)
        } else {
          codes.set('next', (codes.get('next') ?? 0) + 1)
        }
      })
      for (let s = 0; s < SUBSCRIPTIONS_PER_CONNECTION; s++) {
        socket.send(JSON.stringify({ id: String(s), type: 'subscribe', payload: { query } }))
      }
    }
  }
  // Every subscription live (the service's own gauge), none refused.
  for (let waited = 0; ; waited += 100) {
    const metrics = await (await fetch(`${url}/metrics`)).text()
    if (new RegExp(`graphql_open_subscriptions\\{transport="ws"\\} ${SUBSCRIBERS}\\b`).test(metrics)) break
    if (waited > 60_000) throw new Error(`the subscriptions did not start: ${[...codes]}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.equal(messages, 0, 'every subscription admitted: inside the anonymous budget')

  // Readiness is probed throughout.
  let probing = true
  let slowestReady = 0
  const probe = (async () => {
    while (probing) {
      const started = Date.now()
      const response = await fetch(`${url}/health/ready`)
      await response.arrayBuffer()
      slowestReady = Math.max(slowestReady, Date.now() - started)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  })()

  const cpuBefore = cpuSeconds(pid)
  const config = loadConfig({ JWT_SECRET: TEST_JWT_SECRET, PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY })
  const posted = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${mintToken(config.jwt, '2', 'USER')}` },
    body: JSON.stringify({
      query: 'mutation ($c: String!) { postMessage(roomId: "hot", content: $c) { id } }',
      variables: { c: 'an ordinary message of one hundred and fifty bytes, '.repeat(3).slice(0, 150) }
    })
  })
  t.equal(posted.status, 200, 'the post is accepted')
  // Each subscriber gets one message for the event: its answer, or RATE_LIMITED.
  for (let waited = 0; messages < SUBSCRIBERS && waited < 60_000; waited += 50) {
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  await new Promise((resolve) => setTimeout(resolve, 500))
  const cpu = cpuSeconds(pid) - cpuBefore
  probing = false
  await probe

  t.comment(
    `delivered: ${JSON.stringify(Object.fromEntries(codes))}; ${(bytes / 2 ** 20).toFixed(1)} MiB; ${cpu.toFixed(2)} s CPU; slowest /health/ready ${slowestReady} ms`
  )
  t.equal(messages, SUBSCRIBERS, 'every subscriber heard of the event')
  t.ok((codes.get('next') ?? 0) > 0, 'subscribers whose payer can pay got the message')
  t.ok(cpu < 0.5, `the service spent under 0.5 s of CPU on the event (${cpu.toFixed(2)} s)`)
  t.ok(bytes < 50 * 2 ** 20, `clients received under 50 MiB in total (${(bytes / 2 ** 20).toFixed(1)} MiB)`)
  t.ok(slowestReady < 1000, `/health/ready answered within 1 s throughout (slowest ${slowestReady} ms)`)
})
