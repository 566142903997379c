// GraphQL over WebSocket, both subprotocols, every operation admitted by the pipeline (through
// `StartOperation`, operations.ts). One session implementation (Connection) speaks two dialects, the
// data tables of ws-protocols.ts: graphql-transport-ws and the legacy graphql-ws subprotocol.
//
// No WebSocket library here: a session runs over `SessionSocket` (what it sends, closes and reads of
// its socket) and is told what the socket receives (message, ping, close), as graphql-ws's own server
// takes its socket. The Fastify routes (index.ts) hands it a `ws` socket; tests hand it a plain object.
//
// graphql-transport-ws is ours rather than graphql-ws's `makeServer`: that server serialises every
// message per subscriber (an event shared by 10000 subscribers would be stringified 10000 times) and
// answers pings itself, outside any budget. Here an event's answer arrives serialised once
// (fanout.ts) and is wrapped per subscriber by string concatenation, and every frame a
// client sends is spent from its connection's budget first.
//
// Rules, both dialects: identity at connection_init only (never from the upgrade's headers or cookies),
// in the shapes clients' documented examples use (credentialOf); the init timeout (4408), one init
// (4429), nothing before the ack (4401), refused credentials (4403), bad messages (4400), duplicate ids
// (4409); the per-user connection cap (1013), the per-connection operation cap; keep-alive; a token's
// expiry closes the connection (4403), and so does the end of its lifetime (1001,
// SUBSCRIBER_MAX_LIFETIME_MS: the client reconnects and subscribes again); a graceful shutdown sends
// `complete` for every operation. Added:
// - a per-connection frame budget (messages and bytes per second, pings included, as token buckets that
//   allow bursts): over it, close 1008 (policy violation; graphql-ws clients do not retry it);
// - a connection whose unsent data passes SUBSCRIBER_MAX_BUFFERED_BYTES is closed with 4503 (a private
//   code: 1013 already means "too many connections" here; graphql-ws clients retry it with back-off),
//   whatever the frames it stopped reading (events, pongs, keep-alives...): one send path checks them all.
import type { Caller } from '../../app/core/domain/context.ts'
import { AppError } from '../../app/core/errors.ts'
import type { ErrorJson } from '../../app/core/error-format.ts'
import type { StartOperation, Subscription, SubscriptionSink } from '../../app/graphql/operations.ts'
import type { GraphQLRequestParams } from '../../app/graphql/persisted.ts'
import { endAtDeadline } from './stream-deadline.ts'
import { credentialOf } from './ws-credentials.ts'
import { dialectOf, type Dialect, type Incoming } from './ws-protocols.ts'

/** A WebSocket as a session uses it; a `ws` WebSocket is one as it is. */
export interface SessionSocket {
  /** The subprotocol agreed at the upgrade ('' when the client named none). */
  readonly protocol: string
  /** Bytes queued but not yet sent. */
  readonly bufferedAmount: number
  /** 1 (OPEN) while frames can be sent; the WebSocket standard's readyState. */
  readonly readyState: number
  send (data: string | Buffer): void
  /** A protocol-level pong (the session answers pings itself, within its budget). */
  pong (data: string | Buffer): void
  close (code: number, reason: string): void
  /** Cuts the connection without waiting for the closing handshake. */
  terminate (): void
}

/** readyState while a socket is open (the WebSocket standard's OPEN). */
const OPEN = 1

/** A subscriber that stopped reading: its unsent data passed the bound. */
export const SLOW_READER_CLOSE_CODE = 4503
/** Frames beyond the connection's budget. */
export const OVER_BUDGET_CLOSE_CODE = 1008
/**
 * An idle connection (acknowledged, no operation) closed near MAX_CONNECTIONS so that a new client gets
 * its slot. A private code (HTTP 410's number): clients retry it, or reconnect when they next subscribe.
 */
export const IDLE_CLOSE_CODE = 4410
/** The connection lived SUBSCRIBER_MAX_LIFETIME_MS ("going away": every client reconnects and subscribes again). */
export const LIFETIME_CLOSE_CODE = 1001

export interface WebSocketOptions {
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
  /** Unsent bytes (ws's bufferedAmount) past which a subscriber is closed. */
  maxBufferedBytes: number
  /** Frames (any type, pings included) and their bytes a connection may send per second, on average (token buckets). */
  maxMessagesPerSecond: number
  maxReceivedBytesPerSecond: number
  /** How long a connection may live (0: no limit); it ends at its token's `exp` first. */
  maxLifetimeMs: number
  /** Told when a connection becomes idle (acknowledged, no operation in flight) and when it stops being idle. */
  idleChanged (connection: GraphQLWebSocket, idle: boolean): void
}

/** One connection, whichever subprotocol it speaks: what the route tells it, and what it reads. */
export interface GraphQLWebSocket {
  /** A frame the client sent (text or binary, as bytes: the budget counts them). */
  message (data: Buffer): void
  /** A protocol-level ping the client sent. */
  ping (data: Buffer): void
  /** The socket has closed: everything the connection held is released. */
  socketClosed (): void
  /** Subscriptions delivering events. */
  readonly activeSubscriptions: number
  /** Ends every operation (the client is told each completed), then closes with 1001 after at most `graceMs`. */
  shutdown (graceMs: number): Promise<void>
  /** Closes an idle connection with 4410 (its slot is needed); it is cut if the close is not read within a second. */
  evict (): void
  /** Settles when the socket has closed and everything it held is released. */
  readonly closed: Promise<void>
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref())

/** How long a socket closed by the server (slow reader, idle) may take to read the close frame before it is cut. */
const CLOSE_GRACE_MS = 1000

/** The longest close reason: a close frame's payload is at most 125 bytes, two of them the code. */
const MAX_CLOSE_REASON_BYTES = 123

/**
 * `reason` in at most 123 UTF-8 bytes, cut before a character rather than inside one (a reason holding
 * client text such as an id may have multibyte characters: cut mid-character, it decodes to U+FFFD,
 * three bytes, and passes the limit, which makes ws throw).
 */
function closeReason (reason: string): string {
  const bytes = Buffer.from(reason)
  if (bytes.length <= MAX_CLOSE_REASON_BYTES) return reason
  let end = MAX_CLOSE_REASON_BYTES
  // Continuation bytes (10xxxxxx) belong to the character before them.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--
  return bytes.subarray(0, end).toString()
}

function closeSocket (socket: SessionSocket, code: number, reason: string): void {
  if (socket.readyState === OPEN) socket.close(code, closeReason(reason))
}

/**
 * One operation of a connection, from its start message until it ends; the sink of its subscription.
 * Kept small: its id (as JSON, ready to be concatenated), its connection and its subscription.
 */
class Operation implements SubscriptionSink {
  readonly id: string
  readonly idJson: string
  readonly connection: Connection
  subscription: Subscription | null = null
  constructor (connection: Connection, id: string) {
    this.connection = connection
    this.id = id
    this.idJson = JSON.stringify(id)
  }

  next (json: string): void { this.connection.sendNext(this, json) }
  end (errors?: unknown[]): void { this.connection.finish(this, errors) }
}

/** One connection, whichever subprotocol it speaks. */
class Connection implements GraphQLWebSocket {
  private readonly socket: SessionSocket
  private readonly ip: string
  private readonly options: WebSocketOptions
  private readonly dialect: Dialect
  private caller: Caller | null = null
  private initReceived = false
  private acknowledged = false
  private closing = false
  /** The socket has closed (socketClosed() ran). */
  private released = false
  private releaseCaller: (() => void) | null = null
  /** Acknowledged, with no operation in flight: may give its slot up near MAX_CONNECTIONS. */
  private idle = false
  readonly closed: Promise<void>
  private resolveClosed: () => void = () => {}
  private readonly operations = new Map<string, Operation>()
  private readonly openedAt = Date.now()
  private readonly timers: NodeJS.Timeout[] = []
  private cancelDeadline: () => void = () => {}
  /** The frame budget's buckets (frames, bytes) and when they were last refilled. */
  private messageTokens: number
  private byteTokens: number
  private refilledAt = Date.now()
  /** What a subprotocol-specific message may do (legacy connection_terminate, graphql-transport-ws ping). */
  private readonly reply = {
    send: (data: string) => this.send(data),
    close: (code: number, reason: string) => closeSocket(this.socket, code, reason)
  }

  constructor (socket: SessionSocket, ip: string, options: WebSocketOptions, dialect: Dialect) {
    this.socket = socket
    this.ip = ip
    this.options = options
    this.dialect = dialect
    this.messageTokens = options.maxMessagesPerSecond
    this.byteTokens = options.maxReceivedBytesPerSecond
    this.closed = new Promise<void>((resolve) => { this.resolveClosed = resolve })
    this.timers.push(setTimeout(() => {
      const waited = dialect.initWaitsFor === 'init' ? this.initReceived : this.acknowledged
      if (!waited) closeSocket(socket, dialect.close.initialisationTimeout, 'Connection initialisation timeout')
    }, options.initTimeoutMs))
  }

  message (data: Buffer): void {
    if (!this.spend(data.length)) return
    this.receive(String(data)).catch(() =>
      closeSocket(this.socket, this.dialect.close.internalError, 'Internal server error')
    )
  }

  /** Protocol-level pings are frames too, and their pongs go out through `send` like every frame. */
  ping (data: Buffer): void {
    if (this.spend(data.length)) this.send(data, 'pong')
  }

  get activeSubscriptions (): number {
    let n = 0
    for (const operation of this.operations.values()) if (operation.subscription) n++
    return n
  }

  /**
   * Spends one frame of `bytes` from the connection's budget; closes it (false) when over. Token buckets
   * (frames, bytes) that hold one second's budget and refill continuously at the per-second rates: a
   * burst of up to a second's budget passes (or a clump read late by a busy server), and over any T
   * seconds a connection sends at most T + 1 seconds' worth. (A fixed one-second window closed clients
   * averaging 50-75% of the budget: two bursts 0.9 s apart fell into one window.)
   */
  private spend (bytes: number): boolean {
    const now = Date.now()
    const seconds = (now - this.refilledAt) / 1000
    this.refilledAt = now
    const { maxMessagesPerSecond, maxReceivedBytesPerSecond } = this.options
    const refill = (tokens: number, rate: number) => Math.min(rate, tokens + seconds * rate)
    this.messageTokens = refill(this.messageTokens, maxMessagesPerSecond) - 1
    this.byteTokens = refill(this.byteTokens, maxReceivedBytesPerSecond) - bytes
    if (this.messageTokens >= 0 && this.byteTokens >= 0) return true
    closeSocket(
      this.socket,
      OVER_BUDGET_CLOSE_CODE,
      `Too many messages: at most ${maxMessagesPerSecond} messages and ${maxReceivedBytesPerSecond} bytes a second`
    )
    return false
  }

  /**
   * Every frame the server sends goes out here (ack, next, error, complete, pong, keep-alive, refusal):
   * each counts toward the slow-reader bound, so a client that stops reading cannot make this process
   * hold any kind of frame for it. Protocol-level pongs too (ws's automatic pong is off).
   */
  send (data: string | Buffer, frame: 'message' | 'pong' = 'message'): void {
    const { socket } = this
    if (this.closing || socket.readyState !== OPEN) return
    if (socket.bufferedAmount > this.options.maxBufferedBytes) return this.abandon()
    if (frame === 'pong') socket.pong(data)
    else socket.send(data)
  }

  private sendMessage (type: string, id: string, payload?: unknown): void {
    this.send(JSON.stringify(payload === undefined ? { id, type } : { id, type, payload }))
  }

  /** An answer already serialised, wrapped for this operation without parsing or serialising it again. */
  sendNext (operation: Operation, json: string): void {
    if (this.released || this.operations.get(operation.id) !== operation) return
    this.send(`{"id":${operation.idJson},"type":"${this.dialect.next}","payload":${json}}`)
  }

  /**
   * The client stopped reading: what it has not received would otherwise pile up in this process. The
   * close frame waits behind that data; if it is not read within a second, the socket is cut.
   */
  private abandon (): void {
    this.end(SLOW_READER_CLOSE_CODE, `Subscriber too slow: more than ${this.options.maxBufferedBytes} bytes unsent`)
  }

  evict (): void {
    if (this.idle) this.end(IDLE_CLOSE_CODE, 'Idle connection closed: its slot is needed')
  }

  /**
   * Closes the connection from the server's side (slow reader, idle, token expired, lifetime ended):
   * nothing more is sent, and a socket that does not read the close within a second is cut (rather than
   * holding its slot for ws's 30 s closing handshake).
   */
  private end (code: number, reason: string): void {
    if (this.closing) return
    this.closing = true
    this.updateIdle()
    closeSocket(this.socket, code, reason)
    setTimeout(() => this.socket.terminate(), CLOSE_GRACE_MS).unref()
  }

  /** Tells the carriers whether the connection is idle, when that changes. */
  private updateIdle (): void {
    const idle = this.acknowledged && !this.closing && !this.released && this.operations.size === 0
    if (idle === this.idle) return
    this.idle = idle
    this.options.idleChanged(this, idle)
  }

  /** An operation ended by the server: `complete`, or `error` with its errors. */
  finish (operation: Operation, errors?: unknown[]): void {
    if (this.operations.get(operation.id) !== operation) return
    this.operations.delete(operation.id)
    this.updateIdle()
    operation.subscription?.stop()
    if (errors) this.sendMessage(this.dialect.error, operation.id, errors)
    else this.sendMessage(this.dialect.complete, operation.id)
  }

  /**
   * Authenticates connection_init and takes the user's connection slot; the refusal's close code and reason, or null.
   */
  private identify (payload: unknown): { code: number; reason: string } | null {
    let caller: Caller | null
    try {
      caller = this.options.authenticate(credentialOf(payload))
    } catch (err) {
      return { code: this.dialect.close.forbidden, reason: `Forbidden: ${(err as Error).message}` }
    }
    const release = this.options.admitCaller(caller)
    if (!release) return { code: 1013, reason: 'Too many connections for this user' }
    this.caller = caller
    this.releaseCaller = release
    // The identity lasts as long as its token: at `exp` no operation runs, or keeps delivering, under it
    // (the client reconnects with a fresh token). A connection also ends with its lifetime.
    this.cancelDeadline = endAtDeadline(caller?.expiresAt, this.openedAt, this.options.maxLifetimeMs, (why) => {
      if (why === 'token-expired') this.end(this.dialect.close.forbidden, 'Forbidden: Token expired')
      else this.end(LIFETIME_CLOSE_CODE, 'Connection lifetime ended')
    })
    return null
  }

  private async receive (data: string): Promise<void> {
    const { dialect, socket } = this
    let message: Incoming
    try {
      message = dialect.parse(data)
    } catch (err) {
      return closeSocket(socket, dialect.close.badRequest, (err as Error).message)
    }
    switch (message.type) {
      case dialect.init: {
        // A second connection_init would re-run authentication and swap the connection's identity.
        if (this.initReceived) {
          return closeSocket(socket, dialect.close.tooManyInitialisations, 'Too many initialisation requests')
        }
        this.initReceived = true
        const refused = this.identify(message.payload)
        if (refused) {
          if (dialect.refusal) this.send(dialect.refusal(refused.reason))
          return closeSocket(socket, refused.code, refused.reason)
        }
        this.acknowledged = true
        this.updateIdle()
        this.send(dialect.ack)
        if (dialect.afterAck) this.send(dialect.afterAck)
        const { keepAliveMs } = this.options
        if (keepAliveMs > 0) this.timers.push(setInterval(() => this.send(dialect.keepAlive), keepAliveMs))
        return
      }
      case dialect.start: {
        if (!this.acknowledged) return closeSocket(socket, dialect.close.unauthorized, 'Unauthorized')
        const id = message.id!
        if (this.operations.has(id)) {
          return closeSocket(socket, dialect.close.duplicateId, `Subscriber for ${id} already exists`)
        }
        return this.run(new Operation(this, id), message.payload as GraphQLRequestParams)
      }
      case dialect.stop: {
        // The client ended it: nothing more is sent for this id.
        const operation = this.operations.get(String(message.id))
        if (!operation) return
        this.operations.delete(operation.id)
        this.updateIdle()
        operation.subscription?.stop()
        return
      }
      default:
        if (!dialect.other(message, this.reply)) {
          closeSocket(socket, dialect.close.badRequest, `Invalid message type ${JSON.stringify(message.type)}`)
        }
    }
  }

  private async run (operation: Operation, params: GraphQLRequestParams): Promise<void> {
    const { id } = operation
    this.operations.set(id, operation)
    this.updateIdle()
    try {
      const max = this.options.maxOperations
      if (this.operations.size > max) {
        throw new AppError('RATE_LIMITED', `Too many active subscriptions on this connection: at most ${max}`, {
          maxSubscriptions: max
        })
      }
      const started = await this.options.start({ params, transport: 'WS', caller: this.caller, ip: this.ip }, operation)
      // The client completed the operation, or left, or the server is closing, while it was admitted.
      if (this.operations.get(id) !== operation || this.closing || this.released) {
        started.subscription?.stop()
        return
      }
      if (started.subscription) {
        operation.subscription = started.subscription
        return
      }
      this.sendNext(operation, started.answer)
      this.finish(operation)
    } catch (err) {
      this.finish(operation, this.options.formatErrors(err))
    }
  }

  /** The socket closed: every subscription leaves its topic, every timer and slot is released. */
  socketClosed (): void {
    if (this.released) return
    this.released = true
    this.updateIdle()
    for (const timer of this.timers) clearTimeout(timer)
    this.cancelDeadline()
    this.releaseCaller?.()
    for (const operation of this.operations.values()) operation.subscription?.stop()
    this.operations.clear()
    this.resolveClosed()
  }

  /** Ends every operation (the client is told each completed), then closes with 1001 after at most `graceMs`. */
  async shutdown (graceMs: number): Promise<void> {
    for (const operation of [...this.operations.values()]) this.finish(operation)
    this.closing = true
    this.updateIdle()
    const deadline = Date.now() + graceMs
    while (this.socket.bufferedAmount > 0 && this.socket.readyState === OPEN && Date.now() < deadline) {
      await delay(10)
    }
    closeSocket(this.socket, 1001, 'Server shutting down')
  }
}

/**
 * Serves one upgraded socket in the subprotocol it agreed (a client naming none speaks
 * graphql-transport-ws). The caller tells the session what the socket receives: message, ping, close.
 */
export function openConnection (socket: SessionSocket, ip: string, options: WebSocketOptions): GraphQLWebSocket {
  return new Connection(socket, ip, options, dialectOf(socket.protocol))
}
