// GraphQL over WebSocket, both subprotocols, every operation admitted by the pipeline (through
// `StartOperation`, app/graphql/operations.ts):
// - graphql-transport-ws is graphql-ws's own server (`makeServer`): the protocol, its close codes
//   (4400, 4401, 4403, 4408, 4409, 4429) and its initialisation timeout are the library's; this module
//   adds identity at connection_init, the per-user connection cap, the per-connection operation cap,
//   keep-alive pings and a graceful shutdown.
// - the legacy graphql-ws subprotocol (subscriptions-transport-ws) has no maintained server library, so
//   it is written here in full (LegacyConnection), with the same rules and close codes.
// Identity comes from connection_init's payload only (never from the upgrade's headers or cookies),
// once per connection, in the shapes clients' documented examples use (credentialOf).
import { CloseCode, DEPRECATED_GRAPHQL_WS_PROTOCOL, GRAPHQL_TRANSPORT_WS_PROTOCOL, makeServer, type Context, type ExecutionResult, type FormattedExecutionResult } from 'graphql-ws'
import { GraphQLError, type ExecutionArgs, type GraphQLSchema } from 'graphql'
import type { WebSocket } from 'ws'
import type { Caller } from '../domain/context.ts'
import { AppError } from '../errors.ts'
import type { ErrorJson, GraphQLAnswer } from './error-format.ts'
import type { StartOperation } from './operations.ts'
import type { GraphQLRequestParams } from './persisted.ts'

export { CloseCode }
export const SUBPROTOCOLS = [GRAPHQL_TRANSPORT_WS_PROTOCOL, DEPRECATED_GRAPHQL_WS_PROTOCOL] as const

export interface WebSocketOptions {
  schema (): GraphQLSchema
  start: StartOperation
  /** "Bearer <token>" → caller; undefined → anonymous; throws when the token is not valid. */
  authenticate (authorization: string | undefined): Caller | null
  /** Takes a per-user connection slot; null when the user already holds too many. Returns its release. */
  admitCaller (caller: Caller | null): (() => void) | null
  /** Our error shape for a refused operation. */
  formatErrors (err: unknown): ErrorJson[]
  initTimeoutMs: number
  keepAliveMs: number
  maxOperations: number
}

/** One connection, whichever subprotocol it speaks. */
export interface GraphQLWebSocket {
  /** Subscriptions delivering events. */
  readonly activeSubscriptions: number
  /** Ends every operation (the client is told each completed), then closes with 1001 after at most `graceMs`. */
  shutdown (graceMs: number): Promise<void>
}

/**
 * Where clients put the token in connection_init's payload (Apollo's and graphql-ws's documented
 * examples): `authToken`, `authorization`, `Authorization`, `token`, or a `headers` object holding
 * `Authorization`/`authorization`; as "Bearer <JWT>" or the bare JWT.
 */
const CREDENTIAL_KEYS = ['authToken', 'authorization', 'Authorization', 'token'] as const
const HEADER_KEYS = ['Authorization', 'authorization'] as const
/** Other keys that look like a credential: refused rather than ignored (the client meant to authenticate). */
const CREDENTIAL_LIKE = /auth|token|bearer|jwt|credential|session|secret|password|api.?key/i
const READ_POSITIONS = new Set<string>([...CREDENTIAL_KEYS, ...HEADER_KEYS.map((key) => `headers.${key}`)])
const BARE_JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$/

const isRecord = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === 'object' && !Array.isArray(value)

/**
 * The connection_init payload's credential as an Authorization value ("Bearer <JWT>"); undefined when
 * the payload carries none (anonymous). A credential in a field we do not read, a non-string one, or
 * two different ones are refused, never taken as anonymous.
 */
export function credentialOf (payload: unknown): string | undefined {
  if (payload === undefined || payload === null) return undefined
  if (!isRecord(payload)) throw new AppError('UNAUTHENTICATED', 'connection_init payload must be an object')
  const headers = payload.headers
  if (headers !== undefined && headers !== null && !isRecord(headers)) throw new AppError('UNAUTHENTICATED', 'connection_init payload.headers must be an object')
  const found: { where: string; value: unknown }[] = [
    ...CREDENTIAL_KEYS.map((key) => ({ where: key, value: payload[key] })),
    ...HEADER_KEYS.map((key) => ({ where: `headers.${key}`, value: headers?.[key] }))
  ].filter(({ value }) => value !== undefined && value !== null && value !== '')
  const unknown = [...Object.keys(payload), ...Object.keys(headers ?? {}).map((key) => `headers.${key}`)]
    .filter((key) => CREDENTIAL_LIKE.test(key) && !READ_POSITIONS.has(key))
  if (unknown.length > 0) throw new AppError('UNAUTHENTICATED', `Unrecognised credential ${unknown[0]}: send the token as authToken (or authorization, token, headers.Authorization)`)
  if (found.length === 0) return undefined
  const values = new Set<string>()
  for (const { where, value } of found) {
    if (typeof value !== 'string') throw new AppError('UNAUTHENTICATED', `${where} must be a string: "Bearer <token>" or the token itself`)
    values.add(BARE_JWT.test(value) ? `Bearer ${value}` : value)
  }
  if (values.size > 1) throw new AppError('UNAUTHENTICATED', `Different credentials in ${found.map(({ where }) => where).join(' and ')}: send one`)
  return [...values][0]
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref())

/** A close reason is at most 123 bytes. */
function closeSocket (socket: WebSocket, code: number, reason: string): void {
  if (socket.readyState === socket.OPEN) socket.close(code, Buffer.from(reason).subarray(0, 123).toString())
}

function sendOn (socket: WebSocket, message: unknown): Promise<void> {
  if (socket.readyState !== socket.OPEN) return Promise.resolve()
  const data = typeof message === 'string' ? message : JSON.stringify(message)
  return new Promise((resolve) => socket.send(data, () => resolve()))
}

/** What both subprotocols keep per connection: the caller, the running streams, the cap and the keep-alive. */
class ConnectionState {
  caller: Caller | null = null
  closing = false
  closed = false
  releaseCaller: (() => void) | null = null
  /** Running subscription streams by operation id. */
  readonly streams = new Map<string, AsyncIterableIterator<GraphQLAnswer>>()
  readonly socket: WebSocket
  readonly options: WebSocketOptions
  readonly ip: string
  keepAlive: NodeJS.Timeout | null = null
  expiry: NodeJS.Timeout | null = null

  constructor (socket: WebSocket, ip: string, options: WebSocketOptions) {
    this.socket = socket
    this.ip = ip
    this.options = options
  }

  /** Authenticates connection_init and takes the user's connection slot; the refusal's close code and reason, or null. */
  identify (payload: unknown): { code: number; reason: string } | null {
    let caller: Caller | null
    try {
      caller = this.options.authenticate(credentialOf(payload))
    } catch (err) {
      return { code: CloseCode.Forbidden, reason: `Forbidden: ${(err as Error).message}` }
    }
    const release = this.options.admitCaller(caller)
    if (!release) return { code: 1013, reason: 'Too many connections for this user' }
    this.caller = caller
    this.releaseCaller = release
    this.closeAtExpiry(caller?.expiresAt)
    return null
  }

  /**
   * A connection's identity lasts as long as its token: at `exp` the connection closes with 4403
   * (the client reconnects with a fresh token), so no operation runs, or keeps delivering, under an
   * expired identity.
   */
  private closeAtExpiry (expiresAt: number | undefined): void {
    if (expiresAt === undefined) return
    // setTimeout holds at most ~24.8 days; a longer-lived token is checked again then.
    const wait = Math.min(expiresAt - Date.now(), 2 ** 31 - 1)
    this.expiry = setTimeout(() => {
      if (Date.now() >= expiresAt) closeSocket(this.socket, CloseCode.Forbidden, 'Forbidden: Token expired')
      else this.closeAtExpiry(expiresAt)
    }, Math.max(0, wait))
  }

  startKeepAlive (message: string): void {
    if (this.options.keepAliveMs > 0) this.keepAlive = setInterval(() => void sendOn(this.socket, message), this.options.keepAliveMs)
  }

  refuseOverCap (running: number): void {
    const max = this.options.maxOperations
    if (running > max) throw new AppError('RATE_LIMITED', `Too many active subscriptions on this connection: at most ${max}`, { maxSubscriptions: max })
  }

  /** Ends a stream started for a connection or an operation that is gone; true when it had to. */
  async dropIfGone (stream: AsyncIterableIterator<GraphQLAnswer>, stillWanted: boolean): Promise<boolean> {
    if (stillWanted && !this.closing && !this.closed) return false
    await stream.return?.()
    return true
  }

  released (): void {
    if (this.closed) return
    this.closed = true
    if (this.keepAlive) clearInterval(this.keepAlive)
    if (this.expiry) clearTimeout(this.expiry)
    this.releaseCaller?.()
    for (const stream of this.streams.values()) void stream.return?.()
    this.streams.clear()
  }

  /** Ends every stream; `drained` resolves once their `complete` messages are sent. */
  async shutdown (graceMs: number, drained: () => Promise<unknown>): Promise<void> {
    this.closing = true
    await Promise.all([...this.streams.values()].map((stream) => stream.return?.()))
    await Promise.race([drained(), delay(graceMs)])
    closeSocket(this.socket, 1001, 'Server shutting down')
  }
}

/** The marker graphql-ws needs (GraphQLError instances), carrying our formatted errors. */
class RefusedError extends GraphQLError {
  readonly formatted: ErrorJson
  constructor (formatted: ErrorJson) {
    super(formatted.message, { extensions: formatted.extensions })
    this.formatted = formatted
  }
}

interface Extra { state: ConnectionState }
/** What onSubscribe hands to execute/subscribe: the operation already started. */
interface Started { answer: GraphQLAnswer | AsyncIterableIterator<GraphQLAnswer> }

/** graphql-transport-ws: graphql-ws's server, one for the app; `open` attaches a socket to it. */
export function transportWsServer (options: WebSocketOptions) {
  const server = makeServer<Record<string, unknown> | undefined, Extra>({
    connectionInitWaitTimeout: options.initTimeoutMs,
    onConnect: (ctx: Context<Record<string, unknown> | undefined, Extra>) => {
      const { state } = ctx.extra
      const refused = state.identify(ctx.connectionParams)
      if (!refused) return true
      // Our reason (graphql-ws would say only "Forbidden"); its own close after this one is a no-op.
      closeSocket(state.socket, refused.code, refused.reason)
      return false
    },
    onSubscribe: async (ctx, id, payload) => {
      const { state } = ctx.extra
      try {
        // graphql-ws has registered this id already: it counts.
        state.refuseOverCap(Object.keys(ctx.subscriptions).length)
        const { operation, answer } = await options.start({ params: payload as GraphQLRequestParams, transport: 'WS', caller: state.caller, ip: state.ip })
        if (Symbol.asyncIterator in answer) {
          // The client completed the operation, or left, while it was being admitted: start nothing.
          if (await state.dropIfGone(answer, id in ctx.subscriptions)) return [new GraphQLError('The operation ended before it started')]
          state.streams.set(id, answer)
        }
        const started: Started = { answer }
        return {
          schema: options.schema(),
          document: operation.document,
          operationName: operation.name ?? undefined,
          contextValue: started
        } satisfies ExecutionArgs
      } catch (err) {
        return options.formatErrors(err).map((e) => new RefusedError(e))
      }
    },
    // The operation has run in onSubscribe: these only hand its answer (or stream) to graphql-ws.
    // (Our answers are formatted already: their errors are plain JSON, hence the casts to graphql-ws's types.)
    execute: (args) => (args.contextValue as Started).answer as unknown as ExecutionResult,
    subscribe: (args) => (args.contextValue as Started).answer as unknown as AsyncGenerator<ExecutionResult>,
    // Answers are in our shape already (formatted once, in operations.ts).
    onNext: (_ctx, _id, _payload, _args, result) => result as unknown as FormattedExecutionResult,
    onError: (_ctx, _id, _payload, errors) => errors.map((e) => (e instanceof RefusedError ? e.formatted : options.formatErrors(e)[0]!)),
    onComplete: (ctx, id) => { ctx.extra.state.streams.delete(id) }
  })

  return function open (socket: WebSocket, ip: string): GraphQLWebSocket & { closed: Promise<void> } {
    const state = new ConnectionState(socket, ip, options)
    const closed = server.opened({
      // A client naming no subprotocol speaks graphql-transport-ws.
      protocol: GRAPHQL_TRANSPORT_WS_PROTOCOL,
      send: (data) => sendOn(socket, data),
      close: (code, reason) => closeSocket(socket, code ?? 1000, reason ?? ''),
      onMessage: (handle) => socket.on('message', (data) => {
        handle(String(data)).catch(() => closeSocket(socket, CloseCode.InternalServerError, 'Internal server error'))
      })
    }, { state })
    state.startKeepAlive(JSON.stringify({ type: 'ping' }))
    const ended = new Promise<void>((resolve) => socket.once('close', (code, reason) => {
      state.released()
      void closed(code, String(reason)).finally(resolve)
    }))
    return {
      get activeSubscriptions () { return state.streams.size },
      // graphql-ws sends `complete` for each ended stream right after onComplete removed it.
      shutdown: (graceMs) => state.shutdown(graceMs, async () => {
        while (state.streams.size > 0) await delay(10)
        await delay(10)
      }),
      closed: ended
    }
  }
}

/**
 * The legacy subprotocol: connection_init → connection_ack (or connection_error, then 4403), ka
 * keep-alives, start → data… complete (or error), stop, connection_terminate.
 */
export function legacyWsConnection (socket: WebSocket, ip: string, options: WebSocketOptions): GraphQLWebSocket & { closed: Promise<void> } {
  const state = new ConnectionState(socket, ip, options)
  let initReceived = false
  let acknowledged = false
  /** Operations from their start message until they end (a started stream is also in state.streams). */
  const operations = new Set<string>()
  const running = new Set<Promise<void>>()
  const initTimer = setTimeout(() => {
    if (!initReceived) closeSocket(socket, CloseCode.ConnectionInitialisationTimeout, 'Connection initialisation timeout')
  }, options.initTimeoutMs)
  const send = (type: string, id?: string, payload?: unknown) => sendOn(socket, { type, ...(id !== undefined ? { id } : {}), ...(payload !== undefined ? { payload } : {}) })

  async function run (id: string, payload: Record<string, unknown>): Promise<void> {
    try {
      state.refuseOverCap(operations.size)
      const { answer } = await options.start({ params: payload as GraphQLRequestParams, transport: 'WS', caller: state.caller, ip })
      if (!(Symbol.asyncIterator in answer)) {
        await send('data', id, answer)
      } else {
        if (await state.dropIfGone(answer, operations.has(id))) return
        state.streams.set(id, answer)
        for await (const event of answer) await send('data', id, event)
      }
      if (operations.has(id)) await send('complete', id)
    } catch (err) {
      if (operations.has(id)) await send('error', id, options.formatErrors(err))
    } finally {
      operations.delete(id)
      state.streams.delete(id)
    }
  }

  async function onMessage (data: string): Promise<void> {
    let message: { type?: unknown; id?: unknown; payload?: unknown }
    try {
      message = JSON.parse(data)
    } catch {
      return closeSocket(socket, CloseCode.BadRequest, 'Invalid message: not JSON')
    }
    switch (message?.type) {
      case 'connection_init': {
        // A second connection_init would re-run authentication and swap the connection's identity.
        if (initReceived) return closeSocket(socket, CloseCode.TooManyInitialisationRequests, 'Too many initialisation requests')
        initReceived = true
        clearTimeout(initTimer)
        const refused = state.identify(message.payload)
        if (refused) {
          await send('connection_error', undefined, { message: refused.reason })
          return closeSocket(socket, refused.code, refused.reason)
        }
        acknowledged = true
        await send('connection_ack')
        await send('ka')
        state.startKeepAlive(JSON.stringify({ type: 'ka' }))
        return
      }
      case 'start': {
        if (!acknowledged) return closeSocket(socket, CloseCode.Unauthorized, 'Unauthorized: send connection_init first')
        const id = message.id
        if (typeof id !== 'string' || id === '') return closeSocket(socket, CloseCode.BadRequest, 'Invalid message: id must be a non-empty string')
        if (operations.has(id)) return closeSocket(socket, CloseCode.SubscriberAlreadyExists, `Subscriber for ${id} already exists`)
        operations.add(id)
        const payload = message.payload !== null && typeof message.payload === 'object' ? message.payload as Record<string, unknown> : {}
        const operation = run(id, payload)
        running.add(operation)
        void operation.finally(() => running.delete(operation))
        return
      }
      case 'stop': {
        const id = String(message.id)
        operations.delete(id)
        await state.streams.get(id)?.return?.()
        return
      }
      case 'connection_terminate':
        return closeSocket(socket, 1000, 'Normal closure')
      default:
        return closeSocket(socket, CloseCode.BadRequest, `Invalid message type ${JSON.stringify(message?.type)}`)
    }
  }

  socket.on('message', (data) => {
    onMessage(String(data)).catch(() => closeSocket(socket, CloseCode.InternalServerError, 'Internal server error'))
  })
  const ended = new Promise<void>((resolve) => socket.once('close', () => {
    clearTimeout(initTimer)
    operations.clear()
    state.released()
    resolve()
  }))
  return {
    get activeSubscriptions () { return state.streams.size },
    // Ended streams finish their `run`, which sends `complete` for each.
    shutdown: (graceMs) => state.shutdown(graceMs, () => Promise.allSettled([...running])),
    closed: ended
  }
}
