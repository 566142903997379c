// One GraphQL-over-WebSocket connection. Mercurius's SubscriptionConnection speaks both subprotocols
// (graphql-transport-ws and the legacy graphql-ws) and runs the subscriptions (its pub/sub queues,
// loaders, hooks); this subclass adds what it lacks: identity once at
// connection_init (payload.authToken), the graphql-transport-ws close codes, an initialisation
// timeout, one connection_init only, the per-connection subscription cap, validation and limits for
// every operation, cleanup of failed operations, and a graceful shutdown that completes subscriptions.
import SubscriptionConnection, { type ExecuteSubscriptionArgs } from 'mercurius/lib/subscription-connection.js'
import { GRAPHQL_WS } from 'mercurius/lib/subscription-protocol.js'
import type { FastifyRequest } from 'fastify'
import type { WebSocket } from 'ws'
import type { Caller } from '../domain/context.ts'
import { AppError } from '../errors.ts'
import type { PreparedSubscription } from './subscriptions.ts'

/** Close codes (graphql-transport-ws's where it has one; the legacy subprotocol uses the same). */
export const CloseCode = {
  GoingAway: 1001,
  TryAgainLater: 1013,
  BadRequest: 4400,
  Unauthorized: 4401,
  Forbidden: 4403,
  ConnectionInitialisationTimeout: 4408,
  SubscriberAlreadyExists: 4409,
  TooManyInitialisationRequests: 4429
} as const

export interface WsConnectionOptions {
  request: FastifyRequest
  /** Mercurius's context for the connection (app, pubsub, request, lifecycle hooks). */
  context: Record<string, unknown>
  /** Mercurius's PubSub over the service's emitter. */
  subscriber: unknown
  app: unknown
  defaultSubprotocol: string
  keepAliveMs: number
  initTimeoutMs: number
  maxSubscriptions: number
  /** "Bearer <token>" → caller; undefined → anonymous; throws when the token is not valid. */
  authenticate (authorization: string | undefined): Caller | null
  /** Takes a per-user connection slot; null when the user already holds too many. Returns its release. */
  admit (caller: Caller | null): (() => void) | null
  /** Admits a subscribe payload (persisted or ad-hoc) through the pipeline. */
  prepare (params: Record<string, unknown>, caller: Caller | null, ip: string, transport: 'WS'): Promise<PreparedSubscription>
  contextFor (caller: Caller | null, prepared: PreparedSubscription, request: FastifyRequest): Record<string, unknown>
  /** Our error shape for an `error` message. */
  formatErrors (err: unknown): unknown[]
  /** Formats an event's ExecutionResult that carries errors (Mercurius's errorFormatter contract). */
  errorFormatter (execution: { data?: unknown; errors?: readonly unknown[] }): { response: unknown }
  onClosed (connection: GraphQLWsConnection): void
}

/** The `authToken` of a connection_init payload; undefined when absent (anonymous). */
function authTokenOf (payload: unknown): string | undefined {
  if (payload === undefined || payload === null) return undefined
  if (typeof payload !== 'object' || Array.isArray(payload)) throw new AppError('UNAUTHENTICATED', 'connection_init payload must be an object')
  const token = (payload as { authToken?: unknown }).authToken
  if (token === undefined) return undefined
  if (typeof token !== 'string') throw new AppError('UNAUTHENTICATED', 'authToken must be a string "Bearer <token>"')
  return token
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref())

export class GraphQLWsConnection extends SubscriptionConnection {
  caller: Caller | null = null
  private readonly options: WsConnectionOptions
  private readonly initTimer: NodeJS.Timeout
  private initReceived = false
  private closing = false
  private released = false
  private releaseCaller: (() => void) | null = null
  /** Operations of this connection by id, from their subscribe message until they end. */
  private readonly operations = new Map<string, Promise<void>>()
  /** Operations the client completed while they were still being checked: they must not start. */
  private readonly cancelled = new Set<string>()

  constructor (socket: WebSocket, options: WsConnectionOptions) {
    super(socket, {
      subscriber: options.subscriber,
      fastify: options.app,
      context: options.context,
      keepAlive: options.keepAliveMs > 0 ? options.keepAliveMs : undefined,
      fullWsTransport: false,
      wsDefaultSubprotocol: options.defaultSubprotocol,
      errorFormatter: options.errorFormatter
    })
    this.options = options
    this.initTimer = setTimeout(() => this.closeWith(CloseCode.ConnectionInitialisationTimeout, 'Connection initialisation timeout'), options.initTimeoutMs)
  }

  /** Subscriptions currently delivering events. */
  get activeSubscriptions (): number {
    return this.subscriptionIters.size
  }

  closeWith (code: number, reason: string): void {
    // A close reason is at most 123 bytes.
    if (this.socket.readyState === this.socket.OPEN) this.socket.close(code, Buffer.from(reason).subarray(0, 123).toString())
  }

  async handleMessage (message: Buffer, isBinary: boolean): Promise<void> {
    let type: unknown
    try {
      type = (JSON.parse(message.toString()) as { type?: unknown } | null)?.type
    } catch {
      return this.closeWith(CloseCode.BadRequest, 'Invalid message: not JSON')
    }
    const t = this.protocolMessageTypes
    const fromClient = [t.GQL_CONNECTION_INIT, t.GQL_CONNECTION_TERMINATE, t.GQL_START, t.GQL_STOP, t.GQL_CONNECTION_KEEP_ALIVE, t.GQL_CONNECTION_KEEP_ALIVE_ACK]
    if (typeof type !== 'string' || !fromClient.includes(type)) {
      return this.closeWith(CloseCode.BadRequest, `Invalid message type ${JSON.stringify(type)}`)
    }
    if (type === t.GQL_CONNECTION_INIT) {
      // A second connection_init would re-run authentication and swap the connection's identity.
      if (this.initReceived) return this.closeWith(CloseCode.TooManyInitialisationRequests, 'Too many initialisation requests')
      this.initReceived = true
    } else if (type === t.GQL_START && !this.isReady) {
      return this.closeWith(CloseCode.Unauthorized, 'Unauthorized: send connection_init first')
    }
    return super.handleMessage(message, isBinary)
  }

  async handleConnectionInit (data: { type: string; payload?: unknown }): Promise<void> {
    clearTimeout(this.initTimer)
    let caller: Caller | null
    try {
      caller = this.options.authenticate(authTokenOf(data.payload))
    } catch (err) {
      return this.refuse(CloseCode.Forbidden, `Forbidden: ${(err as Error).message}`)
    }
    const release = this.options.admit(caller)
    if (!release) return this.refuse(CloseCode.TryAgainLater, 'Too many connections for this user')
    this.caller = caller
    this.releaseCaller = release
    // Only the type goes on: Mercurius copies the payload into the request headers, and the payload
    // holds the token. The identity is ours (this.caller), for every operation of the connection.
    return super.handleConnectionInit({ type: data.type })
  }

  // Replaces Mercurius's start (which parses and runs without validation). The checks run here rather
  // than in a preSubscriptionExecution hook because that hook receives neither the variables (caps,
  // cost) nor the operation name (operation selection).
  async handleGQLStart ({ id, payload }: { id: string; payload?: any }): Promise<void> {
    if (typeof id !== 'string' || id === '') return this.closeWith(CloseCode.BadRequest, 'Invalid message: id must be a non-empty string')
    if (this.operations.has(id)) return this.closeWith(CloseCode.SubscriberAlreadyExists, `Subscriber for ${id} already exists`)
    const max = this.options.maxSubscriptions
    if (this.operations.size >= max) {
      throw new AppError('RATE_LIMITED', `Too many active subscriptions on this connection: at most ${max}`, { maxSubscriptions: max })
    }
    const run = this.start(id, payload !== null && typeof payload === 'object' ? payload : {})
    this.operations.set(id, run)
    try {
      await run
    } finally {
      this.operations.delete(id)
      this.cancelled.delete(id)
    }
  }

  async handleGQLStop (data: { id: string }): Promise<void> {
    if (this.operations.has(data.id)) this.cancelled.add(data.id)
    return super.handleGQLStop(data)
  }

  private async start (id: string, payload: Record<string, unknown>): Promise<void> {
    try {
      const request = this.options.request
      const prepared = await this.options.prepare(payload, this.caller, request.ip, 'WS')
      // The client left or completed the operation (or the server is closing) while it was being checked: start nothing.
      if (this.closing || this.cancelled.has(id) || this.socket.readyState !== this.socket.OPEN) return
      const args: ExecuteSubscriptionArgs = {
        document: prepared.document,
        query: '',
        context: { ...this.context, ...this.options.contextFor(this.caller, prepared, request) },
        variables: prepared.variables,
        operationName: prepared.operationName,
        id
      }
      await this._executeSubscription(args)
    } catch (err) {
      // Mercurius keeps a failed operation's queue and iterator until the socket closes: drop them now.
      this.handleGQLComplete(id)
      throw err
    }
  }

  sendError (err: unknown, id: string | null): void {
    void this.sendMessage(this.protocolMessageTypes.GQL_ERROR, id ?? undefined, this.options.formatErrors(err))
  }

  handleConnectionClose (): void {
    clearTimeout(this.initTimer)
    super.handleConnectionClose()
    if (this.released) return
    this.released = true
    this.releaseCaller?.()
    this.options.onClosed(this)
  }

  /**
   * Graceful shutdown: completes every subscription (the client receives `complete` for each), waits
   * for those messages (at most `graceMs`), then closes with 1001 Going Away.
   */
  async shutdown (graceMs: number): Promise<void> {
    this.closing = true
    for (const id of [...this.subscriptionContexts.keys()]) this.handleGQLComplete(id)
    await Promise.race([Promise.allSettled(this.operations.values()), delay(graceMs)])
    this.closeWith(CloseCode.GoingAway, 'Server shutting down')
  }

  /** Refuses the connection: the legacy subprotocol expects a connection_error message first. */
  private async refuse (code: number, reason: string): Promise<void> {
    if (this.socket.protocol === GRAPHQL_WS) await this.sendMessage(this.protocolMessageTypes.GQL_CONNECTION_ERROR, undefined, { message: reason })
    this.closeWith(code, reason)
  }
}
