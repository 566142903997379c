// The HTTP server's own defences, through raw sockets: slow senders and silent connections are closed
// in time, connections are capped per peer address (trusted proxies exempt), and X-Request-Id is
// echoed only from a trusted proxy and only in a safe form.
import { test } from 'tap'
import { connect, type Socket } from 'node:net'
import { gql, listenTestApp } from '../helpers/app.ts'

/** A raw connection to `url`, with everything it receives and when it closed (ms after opening). */
async function rawSocket (url: string) {
  const { hostname, port } = new URL(url)
  const socket = connect(Number(port), hostname)
  const opened = Date.now()
  const state = { received: '', closedAfterMs: null as number | null, socket }
  socket.on('data', (d) => { state.received += d })
  socket.on('error', () => {})
  const closed = new Promise<void>((resolve) =>
    socket.on('close', () => {
      state.closedAfterMs = Date.now() - opened
      resolve()
    })
  )
  await new Promise<void>((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject) })
  return { ...state, state, closed }
}

/** Resolves true when `closed` settles within `ms`, false otherwise. */
async function closesWithin (closed: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const result = await Promise.race([
    closed.then(() => true),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms)
    })
  ])
  clearTimeout(timer)
  return result
}

function destroyAll (t: { teardown (fn: () => void): void }, sockets: Socket[]) {
  t.teardown(() => { for (const socket of sockets) socket.destroy() })
}

test('a client sending its body one byte at a time is answered 408 and closed after REQUEST_TIMEOUT_MS', async (t) => {
  const { url } = await listenTestApp(t, { REQUEST_TIMEOUT_MS: '1000' })
  const slow = await rawSocket(url)
  destroyAll(t, [slow.socket])
  slow.socket.write(
    'POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n'
  )
  // One byte every 200 ms: the connection is never idle, yet the request never completes.
  const drip = setInterval(() => { if (!slow.socket.destroyed) slow.socket.write(' ') }, 200)
  t.teardown(() => clearInterval(drip))
  t.ok(await closesWithin(slow.closed, 5000), 'the server closed the connection')
  clearInterval(drip)
  t.ok(
    slow.state.closedAfterMs! >= 900 && slow.state.closedAfterMs! <= 2500,
    `within 1.25 x the timeout (closed after ${slow.state.closedAfterMs} ms)`
  )
  t.match(slow.state.received, /^HTTP\/1\.1 408 /, 'answered 408 Request Timeout')
  t.same(
    bodyOf(slow.state.received),
    { errors: [{ message: 'The request did not arrive whole in time', extensions: { code: 'REQUEST_TIMEOUT' } }] },
    "in the interface's shape, with a code"
  )
  t.match(slow.state.received, /\r\ncontent-type: application\/json; charset=utf-8\r\n/i)
})

/** The JSON body of a raw HTTP answer. */
function bodyOf (raw: string): unknown {
  return JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4))
}

test("oversized headers (431) and bytes that are not HTTP (400) are answered in the interface's shape with a code", async (t) => {
  const { url } = await listenTestApp(t)
  const big = await rawSocket(url)
  destroyAll(t, [big.socket])
  big.socket.write(`GET /graphql HTTP/1.1\r\nHost: localhost\r\nX-Filler: ${'x'.repeat(20_000)}\r\n\r\n`)
  t.ok(await closesWithin(big.closed, 5000), 'closed')
  t.match(big.state.received, /^HTTP\/1\.1 431 /)
  t.same(bodyOf(big.state.received), {
    errors: [{ message: 'The request headers are too large', extensions: { code: 'REQUEST_HEADER_FIELDS_TOO_LARGE' } }]
  })

  const garbage = await rawSocket(url)
  destroyAll(t, [garbage.socket])
  garbage.socket.write('NOT HTTP AT ALL\r\n\r\n')
  t.ok(await closesWithin(garbage.closed, 5000), 'closed')
  t.match(garbage.state.received, /^HTTP\/1\.1 400 /)
  t.same(bodyOf(garbage.state.received), {
    errors: [{ message: 'Malformed HTTP request', extensions: { code: 'BAD_REQUEST' } }]
  })
  t.equal((await gql(url, '{ users(limit: 1) { name } }')).status, 200, 'still serving')
})

test('a connection silent both ways is closed after CONNECTION_TIMEOUT_MS', async (t) => {
  const { url } = await listenTestApp(t, { REQUEST_TIMEOUT_MS: '0', CONNECTION_TIMEOUT_MS: '500' })
  const silent = await rawSocket(url)
  destroyAll(t, [silent.socket])
  silent.socket.write('POST /graphql HTTP/1.1\r\nHost: localhost\r\n')
  t.ok(await closesWithin(silent.closed, 5000), `closed (after ${silent.state.closedAfterMs} ms)`)
})

test('the default production settings bound a slow request too', async (t) => {
  const { config } = await listenTestApp(t, { NODE_ENV: 'production' })
  t.equal(config.server.requestTimeoutMs, 30000)
  t.equal(config.server.connectionTimeoutMs, 60000)
  t.equal(config.server.maxConnectionsPerIp, 100)
})

/** Sends a request on an open raw socket and resolves with the status line of the answer. */
async function statusOver (connection: Awaited<ReturnType<typeof rawSocket>>): Promise<string> {
  connection.socket.write('GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n')
  for (let i = 0; i < 100 && !/\r\n\r\n/.test(connection.state.received); i++) await new Promise((resolve) => setTimeout(resolve, 20))
  return connection.state.received.split('\r\n')[0]!
}

test('connections are capped per peer address (MAX_CONNECTIONS_PER_IP); a freed slot is usable again', async (t) => {
  const { url } = await listenTestApp(t, { MAX_CONNECTIONS_PER_IP: '3' })
  const allowed = [await rawSocket(url), await rawSocket(url), await rawSocket(url)]
  destroyAll(t, allowed.map((c) => c.socket))
  const over = await rawSocket(url)
  destroyAll(t, [over.socket])
  t.ok(await closesWithin(over.closed, 3000), 'the fourth connection is closed at once')
  t.equal(over.state.received, '', 'unanswered')
  for (const connection of allowed) {
    t.equal(await statusOver(connection), 'HTTP/1.1 200 OK', 'the first three are served')
  }
  allowed[0]!.socket.destroy()
  await allowed[0]!.closed
  await new Promise((resolve) => setTimeout(resolve, 50))
  const next = await rawSocket(url)
  destroyAll(t, [next.socket])
  t.equal(await statusOver(next), 'HTTP/1.1 200 OK', 'a slot freed by a closed connection is given to the next one')
})

test('a trusted proxy (TRUST_PROXY) is not capped: its connections carry many clients', async (t) => {
  const { url } = await listenTestApp(t, { MAX_CONNECTIONS_PER_IP: '2', TRUST_PROXY: '127.0.0.0/8' })
  const connections = [await rawSocket(url), await rawSocket(url), await rawSocket(url), await rawSocket(url)]
  destroyAll(t, connections.map((c) => c.socket))
  for (const connection of connections) t.equal(await statusOver(connection), 'HTTP/1.1 200 OK')
})

test('X-Request-Id: kept only from a trusted proxy and only in a safe, bounded form; otherwise generated', async (t) => {
  const direct = await listenTestApp(t)
  const behindProxy = await listenTestApp(t, { TRUST_PROXY: '127.0.0.1' })
  const idOf = async (url: string, id: string) =>
    (await gql(url, '{ __typename }', undefined, { 'x-request-id': id })).headers.get('x-request-id')
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

  t.equal(await idOf(behindProxy.url, 'lb-0123456789abcdef'), 'lb-0123456789abcdef', 'the load balancer\'s id is kept')
  t.equal(await idOf(behindProxy.url, '4bf92f3577b34da6a3ce929d0e0e4736:1.2'), '4bf92f3577b34da6a3ce929d0e0e4736:1.2')
  const hostile = await idOf(behindProxy.url, 'a b"c<d>')
  t.not(hostile, 'a b"c<d>', 'an id with spaces, quotes or markup is not echoed')
  t.match(hostile, UUID, 'a new one is generated instead')
  t.match(await idOf(behindProxy.url, 'x'.repeat(129)), UUID, 'longer than 128 characters: generated')
  t.match(await idOf(direct.url, 'lb-0123456789abcdef'), UUID, 'from a peer that is not a trusted proxy: generated')
})
