// The WebSocket session (routes/graphql/websocket.ts) driven over a fake socket: plain objects only, no
// Fastify, no ws, no listening server. Every close code the session sends, and the messages of both
// subprotocols (graphql-transport-ws and the legacy graphql-ws). The listening-server tests
// (websocket.test.ts) check the same rules through real clients.
import { test } from 'tap'
import { AppError } from '../../app/core/errors.ts'
import type { Caller } from '../../app/core/domain/context.ts'
import type { StartOperation, SubscriptionSink } from '../../app/graphql/operations.ts'
import type { OperationPlan } from '../../app/graphql/plan.ts'
import { openConnection, type GraphQLWebSocket, type SessionSocket, type WebSocketOptions } from '../../routes/graphql/websocket.ts'

/** A socket that records what the session sends and how it closes it. */
class FakeSocket implements SessionSocket {
  readonly protocol: string
  bufferedAmount = 0
  readyState = 1
  readonly sent: unknown[] = []
  readonly pongs: string[] = []
  closedWith: { code: number; reason: string } | null = null
  terminated = false
  #waiters: (() => void)[] = []
  constructor (protocol = 'graphql-transport-ws') { this.protocol = protocol }
  send (data: string | Buffer): void {
    this.sent.push(JSON.parse(String(data)))
    this.#wake()
  }

  pong (data: string | Buffer): void { this.pongs.push(String(data)) }
  close (code: number, reason: string): void {
    this.closedWith = { code, reason }
    this.readyState = 2
    this.#wake()
  }

  terminate (): void { this.terminated = true }
  #wake () { for (const wake of this.#waiters.splice(0)) wake() }
  /** Waits (at most `ms`) until `ready` holds, re-checked whenever the session sends or closes. */
  async until<T> (ready: () => T | undefined | null | false, what: string, ms = 1000): Promise<T> {
    const deadline = Date.now() + ms
    for (;;) {
      const value = ready()
      if (value) return value
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; sent ${JSON.stringify(this.sent)}, closed ${JSON.stringify(this.closedWith)}`)
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve)
        setTimeout(resolve, 20)
      })
    }
  }

  closeCode (what: string): Promise<number> { return this.until(() => this.closedWith?.code, what) }
  message (type: string, id?: string): Promise<Record<string, unknown>> {
    return this.until(() => this.sent.find((m) => (m as { type: string; id?: string }).type === type &&
      (id === undefined || (m as { id?: string }).id === id)) as Record<string, unknown> | undefined, `a ${type} message`)
  }
}

const ALICE: Caller = { id: '1', role: 'USER' }

/** The plan a started operation reports: the session never reads it. */
const PLAN = {} as OperationPlan

/** An operation starter that answers a query at once, and keeps a subscription's sink for the test to feed. */
function fakeStart () {
  const sinks = new Map<string, SubscriptionSink>()
  const stopped: string[] = []
  const start: StartOperation = async (request, sink) => {
    const query = String(request.params.query ?? '')
    if (query.includes('refused')) throw new AppError('BAD_USER_INPUT', 'refused by the pipeline')
    if (!query.startsWith('subscription')) return { operation: PLAN, answer: '{"data":{"hello":"world"}}' }
    const id = String(request.params.operationName ?? query)
    sinks.set(id, sink)
    return { operation: PLAN, subscription: { stop: () => { stopped.push(id) } } }
  }
  return { start, sinks, stopped }
}

function options (overrides: Partial<WebSocketOptions> = {}): WebSocketOptions {
  return {
    start: fakeStart().start,
    authenticate: (authorization) => {
      if (authorization === undefined) return null
      if (authorization === 'Bearer good') return ALICE
      if (authorization === 'Bearer expiring') return { ...ALICE, expiresAt: Date.now() + 50 }
      throw new AppError('UNAUTHENTICATED', 'Invalid token')
    },
    admitCaller: () => () => {},
    formatErrors: (err) => [{ message: (err as Error).message, extensions: { code: (err as AppError).code ?? 'INTERNAL_SERVER_ERROR' } }],
    initTimeoutMs: 1000,
    keepAliveMs: 0,
    maxOperations: 2,
    maxBufferedBytes: 1000,
    maxMessagesPerSecond: 100,
    maxReceivedBytesPerSecond: 100_000,
    maxLifetimeMs: 0,
    idleChanged: () => {},
    ...overrides
  }
}

/** A session over a fresh fake socket; `tell` hands it a client message as ws would (bytes). */
function session (overrides: Partial<WebSocketOptions> = {}, protocol?: string) {
  const socket = new FakeSocket(protocol)
  const connection = openConnection(socket, '192.0.2.1', options(overrides))
  const tell = (message: unknown) => connection.message(Buffer.from(typeof message === 'string' ? message : JSON.stringify(message)))
  return { socket, connection, tell }
}

async function acknowledged (overrides: Partial<WebSocketOptions> = {}, payload?: unknown) {
  const s = session(overrides)
  s.tell({ type: 'connection_init', payload })
  await s.socket.message('connection_ack')
  return s
}

test('graphql-transport-ws: connection_init, subscribe, next, complete; a query answers and completes', async (t) => {
  const { start, sinks, stopped } = fakeStart()
  const { socket, tell, connection } = await acknowledged({ start }, { authToken: 'Bearer good' })
  tell({ id: 'q', type: 'subscribe', payload: { query: '{ hello }' } })
  t.same(await socket.message('next', 'q'), { id: 'q', type: 'next', payload: { data: { hello: 'world' } } })
  t.same(await socket.message('complete', 'q'), { id: 'q', type: 'complete' })

  tell({ id: 's', type: 'subscribe', payload: { query: 'subscription { counted }', operationName: 'S' } })
  const sink = await socket.until(() => sinks.get('S'), 'the subscription to start')
  t.equal(connection.activeSubscriptions, 1)
  sink.next('{"data":{"counted":1}}')
  t.same(await socket.message('next', 's'), { id: 's', type: 'next', payload: { data: { counted: 1 } } })
  sink.end()
  t.same(await socket.message('complete', 's'), { id: 's', type: 'complete' })

  tell({ id: 'e', type: 'subscribe', payload: { query: '{ refused }' } })
  t.match(await socket.message('error', 'e'), { payload: [{ message: 'refused by the pipeline', extensions: { code: 'BAD_USER_INPUT' } }] })

  tell({ id: 's2', type: 'subscribe', payload: { query: 'subscription { counted }', operationName: 'S2' } })
  await socket.until(() => sinks.get('S2'), 'the second subscription')
  tell({ id: 's2', type: 'complete' })
  await socket.until(() => stopped.includes('S2'), 'the client\'s complete to stop the subscription')
  t.equal(connection.activeSubscriptions, 0)

  tell({ type: 'ping', payload: { n: 1 } })
  t.same(await socket.message('pong'), { type: 'pong', payload: { n: 1 } })
  connection.ping(Buffer.from('p'))
  t.same(socket.pongs, ['p'], 'a protocol-level ping is answered with a pong')
  t.equal(socket.closedWith, null)
  connection.socketClosed()
  await connection.closed
})

test('legacy graphql-ws: its own words (connection_ack, ka, start, data, stop, complete, connection_terminate)', async (t) => {
  const { start, sinks, stopped } = fakeStart()
  const { socket, tell, connection } = session({ start }, 'graphql-ws')
  tell({ type: 'connection_init' })
  await socket.message('connection_ack')
  await socket.message('ka')
  tell({ id: '1', type: 'start', payload: { query: '{ hello }' } })
  t.same(await socket.message('data', '1'), { id: '1', type: 'data', payload: { data: { hello: 'world' } } })
  t.same(await socket.message('complete', '1'), { id: '1', type: 'complete' })
  tell({ id: '2', type: 'start', payload: { query: 'subscription { counted }', operationName: 'L' } })
  await socket.until(() => sinks.get('L'), 'the legacy subscription')
  tell({ id: '2', type: 'stop' })
  await socket.until(() => stopped.includes('L'), 'stop to end it')
  tell({ type: 'connection_terminate' })
  t.equal(await socket.closeCode('connection_terminate'), 1000)
  connection.socketClosed()
})

test('every close code the session sends', async (t) => {
  await t.test('4400: a message that is not of the protocol (both subprotocols)', async (t) => {
    const a = session()
    a.tell('not json')
    t.equal(await a.socket.closeCode('4400'), 4400)
    const b = session({}, 'graphql-ws')
    b.tell({ type: 'nonsense' })
    t.equal(await b.socket.closeCode('legacy 4400'), 4400)
    t.match(b.socket.closedWith, { reason: 'Invalid message type "nonsense"' })
  })
  await t.test('4401: an operation before the ack', async (t) => {
    const { socket, tell } = session()
    tell({ id: 'x', type: 'subscribe', payload: { query: '{ hello }' } })
    t.equal(await socket.closeCode('4401'), 4401)
  })
  await t.test('4403: refused credentials (legacy: connection_error first), and a token that expires', async (t) => {
    const a = session()
    a.tell({ type: 'connection_init', payload: { authToken: 'Bearer bad' } })
    t.equal(await a.socket.closeCode('4403'), 4403)
    t.match(a.socket.closedWith, { reason: 'Forbidden: Invalid token' })
    const b = session({}, 'graphql-ws')
    b.tell({ type: 'connection_init', payload: { authToken: 'Bearer bad' } })
    t.match(await b.socket.message('connection_error'), { payload: { message: 'Forbidden: Invalid token' } })
    t.equal(await b.socket.closeCode('legacy 4403'), 4403)
    const c = await acknowledged({}, { authToken: 'Bearer expiring' })
    t.equal(await c.socket.closeCode('4403 at the token\'s exp'), 4403)
    t.match(c.socket.closedWith, { reason: 'Forbidden: Token expired' })
    c.connection.socketClosed()
  })
  await t.test('4408: no connection_init in time', async (t) => {
    const { socket } = session({ initTimeoutMs: 30 })
    t.equal(await socket.closeCode('4408'), 4408)
  })
  await t.test('4409: an id already in use', async (t) => {
    const { socket, tell, connection } = await acknowledged()
    tell({ id: 'a', type: 'subscribe', payload: { query: 'subscription { counted }', operationName: 'A' } })
    tell({ id: 'a', type: 'subscribe', payload: { query: 'subscription { counted }', operationName: 'A' } })
    t.equal(await socket.closeCode('4409'), 4409)
    connection.socketClosed()
  })
  await t.test('4429: a second connection_init', async (t) => {
    const { socket, tell, connection } = await acknowledged()
    tell({ type: 'connection_init' })
    t.equal(await socket.closeCode('4429'), 4429)
    connection.socketClosed()
  })
  await t.test('4500: the session itself fails', async (t) => {
    const { socket, tell } = session({ admitCaller: () => { throw new Error('broken slot counter') } })
    tell({ type: 'connection_init' })
    t.equal(await socket.closeCode('4500'), 4500)
  })
  await t.test('4503: a reader whose unsent data passed the bound', async (t) => {
    const { socket, tell, connection } = await acknowledged()
    socket.bufferedAmount = 1001
    tell({ type: 'ping' })
    t.equal(await socket.closeCode('4503'), 4503)
    connection.socketClosed()
  })
  await t.test('1008: frames over the connection\'s budget', async (t) => {
    const { socket, tell } = session({ maxMessagesPerSecond: 3 })
    for (let i = 0; i < 5; i++) tell({ type: 'ping' })
    t.equal(await socket.closeCode('1008'), 1008)
  })
  await t.test('1013: the user holds too many connections', async (t) => {
    const { socket, tell } = session({ admitCaller: () => null })
    tell({ type: 'connection_init', payload: { authToken: 'Bearer good' } })
    t.equal(await socket.closeCode('1013'), 1013)
  })
  await t.test('1001: the lifetime ended, and a graceful shutdown (after completing every operation)', async (t) => {
    const a = await acknowledged({ maxLifetimeMs: 30 })
    t.equal(await a.socket.closeCode('1001 at the end of the lifetime'), 1001)
    a.connection.socketClosed()
    const b = await acknowledged()
    b.tell({ id: 's', type: 'subscribe', payload: { query: 'subscription { counted }', operationName: 'S' } })
    await b.socket.until(() => b.connection.activeSubscriptions === 1, 'the subscription')
    await b.connection.shutdown(100)
    t.same(await b.socket.message('complete', 's'), { id: 's', type: 'complete' })
    t.equal(await b.socket.closeCode('1001 at shutdown'), 1001)
    b.connection.socketClosed()
  })
  await t.test('4410: an idle connection evicted (and only an idle one)', async (t) => {
    let idleConnection: GraphQLWebSocket | null = null
    const idleChanged = (c: GraphQLWebSocket, idle: boolean) => { idleConnection = idle ? c : null }
    const { socket, tell, connection } = await acknowledged({ idleChanged })
    t.equal(idleConnection, connection, 'acknowledged with no operation: idle')
    tell({ id: 's', type: 'subscribe', payload: { query: 'subscription { counted }', operationName: 'S' } })
    await socket.until(() => connection.activeSubscriptions === 1, 'the subscription')
    t.equal(idleConnection, null, 'an operation in flight: not idle')
    connection.evict()
    t.equal(socket.closedWith, null, 'a busy connection is not evicted')
    tell({ id: 's', type: 'complete' })
    await socket.until(() => idleConnection === connection, 'idle again')
    connection.evict()
    t.equal(await socket.closeCode('4410'), 4410)
    // The session cuts it a second (CLOSE_GRACE_MS) after the close: a bound on waiting, not a speed check.
    await socket.until(() => socket.terminated, 'the socket cut when it does not read the close', 5000)
    connection.socketClosed()
  })
})
