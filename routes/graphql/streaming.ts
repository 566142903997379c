// The GraphQL streaming carriers, without Fastify: over WebSocket on GET /graphql (graphql-transport-ws,
// and the legacy graphql-ws; a client naming no subprotocol speaks graphql-transport-ws) and over
// server-sent events on POST /graphql with Accept: text/event-stream (graphql-sse). Events come from
// the service's emitter (plugins/events.ts: in-process, or Redis across instances). The session and
// stream code is websocket.ts and sse.ts; this module holds what they share on one instance: the
// connections open, their counts per client, idle eviction, graceful shutdown and their stats. The
// routes (index.ts) hands it upgraded sockets and event-stream requests.
//
// WebSocket rules: the Origin header, when sent, must be in CORS_ORIGINS or WS_ALLOWED_ORIGINS; connections
// are capped per client IP (at the upgrade) and per user (at connection_init), messages by size (1009)
// and rate (1008), active subscriptions per connection; identity comes from connection_init's payload only;
// near MAX_CONNECTIONS idle connections give their slots up (4410).
// Every carrier: active subscriptions capped per caller (SUBSCRIPTIONS_MAX_PER_CALLER), every event paid
// for and shared (fanout.ts), a subscriber that stops reading closed, a connection or stream ended at its
// token's `exp` and after SUBSCRIBER_MAX_LIFETIME_MS (stream-deadline.ts).
import type { Duplex } from 'node:stream'
import type { Server } from 'node:net'
import type { GraphQLSchema } from 'graphql'
import { storedRole } from '../../app/core/domain/authorization.ts'
import type { Caller } from '../../app/core/domain/context.ts'
import { AppError } from '../../app/core/errors.ts'
import { formatThrown, type FormatOptions } from '../../app/core/error-format.ts'
import { operationStarter } from '../../app/graphql/operations.ts'
import { chargeEvent } from '../../app/graphql/event-pricing.ts'
import type { OperationRequest, Pipeline } from '../../app/graphql/pipeline.ts'
import type { GraphQLDependencies } from '../../app/graphql/dependencies.ts'
import { createSseHandler, type EventStreamRequest } from './sse.ts'
import { openConnection, type GraphQLWebSocket, type SessionSocket } from './websocket.ts'
import { SUBPROTOCOLS } from './ws-protocols.ts'

export interface SubscriptionStats {
  webSockets: number
  /** Subscriptions delivering events over WebSocket. */
  webSocketSubscriptions: number
  eventStreams: number
  /** Pub/sub topics listened to (one emitter listener each), and their subscribers on every carrier. */
  topics: number
  topicSubscribers: number
  /** Clients (IPs, users) holding at least one connection. */
  clients: number
}

/** Events of one topic waiting for the previous one's delivery before the oldest are dropped. */
const MAX_QUEUED_EVENTS = 1000

/** How long a graceful shutdown waits for `complete` messages before closing the sockets. */
const SHUTDOWN_GRACE_MS = 2000

/** Connections per client key (`ip:…`, `user:…`), capped; per instance. */
function connectionCounter (max: number) {
  const counts = new Map<string, number>()
  return {
    isFull: (key: string) => (counts.get(key) ?? 0) >= max,
    /** Takes a slot for every key, or none when one of them is full; returns the release. */
    acquire (keys: string[]): (() => void) | null {
      if (keys.some((key) => (counts.get(key) ?? 0) >= max)) return null
      for (const key of keys) counts.set(key, (counts.get(key) ?? 0) + 1)
      let released = false
      return () => {
        if (released) return
        released = true
        for (const key of keys) {
          const left = (counts.get(key) ?? 1) - 1
          if (left > 0) counts.set(key, left)
          else counts.delete(key)
        }
      }
    },
    get size () { return counts.size }
  }
}

/** The share of MAX_CONNECTIONS kept free by closing idle WebSockets (at least two slots). */
const IDLE_EVICTION_RESERVE = 0.01

/**
 * Near the listener's connection cap (MAX_CONNECTIONS: Node drops a connection over it unanswered), idle
 * WebSockets give their slots up, the longest idle first, so that a new client is never refused only
 * because idle connections hold every slot: whenever a connection arrives and fewer than the reserve's
 * slots are free (counting those already being closed as free), idle ones are closed with 4410 (and cut
 * a second later if they do not read the close). Connections with an operation in flight are never
 * chosen; neither are unacknowledged ones (the init timeout ends those).
 */
function evictIdleNearCap (server: Server, idle: Set<GraphQLWebSocket>): void {
  let evicting = 0
  server.on('connection', () => {
    const cap = server.maxConnections
    if (idle.size === 0 || !(cap > 0 && cap < Infinity)) return
    server.getConnections((err, open) => {
      if (err) return
      const reserve = Math.max(2, Math.ceil(cap * IDLE_EVICTION_RESERVE))
      let excess = open - evicting - (cap - reserve)
      for (const connection of idle) {
        if (excess-- <= 0) break
        evicting++
        void connection.closed.then(() => { evicting-- })
        connection.evict()
      }
    })
  })
}

const NO_UPGRADE_HERE = JSON.stringify({
  errors: [{ message: 'WebSocket connections are served on /graphql only', extensions: { code: 'BAD_REQUEST' } }]
})

/** Answers an upgrade to a path that serves no WebSocket, on the raw socket, and closes it. */
export function refuseUpgrade (socket: Duplex): void {
  socket.on('error', () => {})
  socket.end(
    'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(NO_UPGRADE_HERE)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n` +
    NO_UPGRADE_HERE
  )
}

const userKey = (caller: Caller | null) => (caller ? [`user:${caller.id}`] : [])

/** What an upgrade request shows before it is upgraded. */
export interface UpgradeRequest {
  origin: string | undefined
  /** The Sec-WebSocket-Protocol header, as sent. */
  protocols: string | undefined
  ip: string
}

/** What the streaming carriers are built over (engine.ts hands them over). */
export interface StreamingOptions {
  deps: GraphQLDependencies
  schema (): GraphQLSchema
  pipeline: Pipeline
  errorOptions: FormatOptions
}

/**
 * The streaming carriers over the GraphQL engine: WebSocket sessions and event streams, counted, evicted
 * when idle near the connection cap, shut down gracefully.
 */
export function createStreaming ({ deps, schema, pipeline, errorOptions }: StreamingOptions) {
  const { streaming, execution } = deps.config
  const { webSocket } = streaming
  const connections = new Set<GraphQLWebSocket>()
  /** Idle connections (acknowledged, no operation in flight), the longest idle first (a Set keeps insertion order). */
  const idleConnections = new Set<GraphQLWebSocket>()
  const eventStreams = new Set<() => void>()
  const counter = connectionCounter(streaming.maxConnectionsPerClient)
  let shuttingDown = false

  const formatErrors = (err: unknown) => formatThrown(err, errorOptions)
  const { start, fanout } = operationStarter({
    admission: pipeline.admission,
    execution: pipeline.execution,
    chargeEvent: (subscribers) => chargeEvent(deps.budgets.spendCostUnits, subscribers),
    schema,
    format: () => errorOptions,
    emitter: deps.emitter,
    maxQueuedEvents: MAX_QUEUED_EVENTS,
    maxResponseBytes: execution.maxResponseBytes,
    maxSubscriptionsPerCaller: streaming.maxSubscriptionsPerCaller,
    // identity: user changes end a user's subscriptions (operations.ts)
    userChangesTopic: deps.userChangesTopic,
    storedRole: (userId) => storedRole(deps.domain.store, userId)
  })
  const wsOptions = {
    start,
    authenticate: deps.authenticate,
    admitCaller: (caller: Caller | null) => counter.acquire(userKey(caller)),
    formatErrors,
    initTimeoutMs: webSocket.initTimeoutMs,
    keepAliveMs: webSocket.keepAliveMs,
    maxOperations: webSocket.maxSubscriptionsPerConnection,
    maxBufferedBytes: streaming.maxBufferedBytesPerSubscriber,
    maxMessagesPerSecond: webSocket.maxMessagesPerSecond,
    maxReceivedBytesPerSecond: webSocket.maxReceivedBytesPerSecond,
    maxLifetimeMs: streaming.maxLifetimeMs,
    idleChanged: (connection: GraphQLWebSocket, idle: boolean) => {
      if (idle) idleConnections.add(connection)
      else idleConnections.delete(connection)
    }
  }

  const writeEventStream = createSseHandler({
    start,
    formatErrors,
    maxBufferedBytes: streaming.maxBufferedBytesPerSubscriber,
    maxLifetimeMs: streaming.maxLifetimeMs,
    track: (stop) => {
      eventStreams.add(stop)
      return () => eventStreams.delete(stop)
    }
  })

  return {
    /** Idle WebSockets give their slots up when `server` nears its connection cap. */
    evictIdleNearCap: (server: Server) => evictIdleNearCap(server, idleConnections),

    /** Why an upgrade request is refused (answered in HTTP, in our error shape); undefined when it may upgrade. */
    upgradeRefusal ({ origin, protocols, ip }: UpgradeRequest): AppError | undefined {
      if (origin !== undefined && !webSocket.allowedOrigins.includes(origin)) {
        return new AppError('FORBIDDEN', `WebSocket connections from origin ${origin} are not allowed`)
      }
      if (
        protocols !== undefined &&
        !protocols.split(',').some((p) => SUBPROTOCOLS.includes(p.trim() as (typeof SUBPROTOCOLS)[number]))
      ) {
        return new AppError('BAD_REQUEST', `Unsupported WebSocket subprotocol: use ${SUBPROTOCOLS.join(' or ')}`)
      }
      if (counter.isFull(`ip:${ip}`)) {
        return new AppError('RATE_LIMITED', `Too many connections from this address: at most ${streaming.maxConnectionsPerClient}`)
      }
      return undefined
    },

    /**
     * A session over an upgraded socket; null when it was closed at once (shutting down: 1001; too many
     * connections from its address: 1013). The route feeds the session the socket's messages, pings and close.
     */
    openWebSocket (socket: SessionSocket, ip: string): GraphQLWebSocket | null {
      if (shuttingDown) {
        socket.close(1001, 'Server shutting down')
        return null
      }
      // Checked at the upgrade too; this take is the one that counts (concurrent upgrades).
      const releaseIp = counter.acquire([`ip:${ip}`])
      if (!releaseIp) {
        socket.close(1013, 'Too many connections from this address')
        return null
      }
      const connection = openConnection(socket, ip, wsOptions)
      connections.add(connection)
      void connection.closed.then(() => {
        connections.delete(connection)
        releaseIp()
      })
      return connection
    },

    /**
     * One event stream: refused (thrown, before anything is written) when shutting down or over the
     * per-IP or per-user connection cap; otherwise `open` (the route takes the response over) gives the
     * sink it is written to, and the promise settles when the stream has ended.
     */
    async serveEventStream (
      operation: OperationRequest,
      open: () => Omit<EventStreamRequest, 'operation'>
    ): Promise<void> {
      if (shuttingDown) throw new AppError('SERVICE_UNAVAILABLE', 'Server shutting down')
      const release = counter.acquire([`ip:${operation.ip}`, ...userKey(operation.caller)])
      if (!release) {
        throw new AppError('RATE_LIMITED', `Too many connections for this client: at most ${streaming.maxConnectionsPerClient}`)
      }
      try {
        await writeEventStream({ operation, ...open() })
      } finally {
        release()
      }
    },

    /** Graceful shutdown: event streams complete, WebSockets get `complete` messages then close (1001). */
    async shutdown (): Promise<void> {
      shuttingDown = true
      for (const stop of eventStreams) stop()
      await Promise.allSettled([...connections].map((connection) => connection.shutdown(SHUTDOWN_GRACE_MS)))
    },

    stats: (): SubscriptionStats => ({
      webSockets: connections.size,
      webSocketSubscriptions: [...connections].reduce((n, c) => n + c.activeSubscriptions, 0),
      eventStreams: eventStreams.size,
      topics: fanout.stats.topics,
      topicSubscribers: fanout.stats.subscribers,
      clients: counter.size
    })
  }
}

export type Streaming = ReturnType<typeof createStreaming>
