// The room's streaming carriers, Fastify side: over WebSocket on GET /graphql (graphql-transport-ws,
// and the legacy graphql-ws; a client naming no subprotocol speaks graphql-transport-ws) and over
// server-sent events on POST /graphql with Accept: text/event-stream (graphql-sse). Events come from
// the service's emitter (plugins/events.ts: in-process, or Redis across instances). The connection code
// is websocket.ts and sse.ts in this folder (no Fastify); http.ts hands event-stream requests to
// `serveEventStream`.
//
// WebSocket rules: the Origin header, when sent, must be in CORS_ORIGINS or WS_ALLOWED_ORIGINS; connections
// are capped per client IP (at the upgrade) and per user (at connection_init), messages by size (1009)
// and rate (1008), active subscriptions per connection; identity comes from connection_init's payload only;
// near MAX_CONNECTIONS idle connections give their slots up (4410).
// Every carrier: active subscriptions capped per caller (SUBSCRIPTIONS_MAX_PER_CALLER), every event paid
// for and shared (fanout.ts), a subscriber that stops reading closed, a connection or stream ended at its
// token's `exp` and after SUBSCRIBER_MAX_LIFETIME_MS (stream-deadline.ts).
import { createServer, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Server } from 'node:net'
import websocket from '@fastify/websocket'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { WebSocket } from 'ws'
import type { Caller } from '../../app/domain/context.ts'
import { AppError } from '../../app/errors.ts'
import { formatThrown } from '../../app/error-format.ts'
import { operationStarter } from './operations.ts'
import type { GraphQLRequestParams } from './persisted.ts'
import { createSseHandler, type EventStreamSink } from './sse.ts'
import type { RoomCore } from './core.ts'
import { openConnection, type GraphQLWebSocket } from './websocket.ts'
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

/** The streaming carriers, as the room's index and its HTTP routes use them. */
export interface SubscriptionCarriers {
  /** POST /graphql with Accept: text/event-stream (called by http.ts). */
  serveEventStream (request: FastifyRequest, reply: FastifyReply): Promise<void>
  stats (): SubscriptionStats
  /** The open WebSockets, as ws holds them (tests watch the server's side of a connection). */
  webSocketClients (): ReadonlySet<WebSocket>
}

/** Events of one topic waiting for the previous one's delivery before the oldest are dropped. */
const MAX_QUEUED_EVENTS = 1000

/** How long a graceful shutdown waits for `complete` messages before closing the sockets. */
const SHUTDOWN_GRACE_MS = 2000

/** Socket errors that only say the client went away. */
const CLIENT_GONE = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED'])

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
function refuseUpgrade (socket: Duplex): void {
  socket.on('error', () => {})
  socket.end(
    'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(NO_UPGRADE_HERE)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n` +
    NO_UPGRADE_HERE
  )
}

/** The raw HTTP response as an event stream's sink (sse.ts). */
function responseSink (response: ServerResponse): EventStreamSink {
  return {
    open: (headers) => { response.writeHead(200, headers) },
    write: (chunk) => { response.write(chunk) },
    end: () => { response.end() },
    destroy: () => { response.destroy() },
    get writable () { return response.writable },
    get bufferedBytes () { return response.writableLength },
    onClose (listener) {
      response.once('close', listener)
      return () => { response.off('close', listener) }
    }
  }
}

const userKey = (caller: Caller | null) => (caller ? [`user:${caller.id}`] : [])

/**
 * Registers the WebSocket side of GET /graphql (before that route is added: @fastify/websocket wires
 * routes as they are added) and makes the SSE carrier, over the room's core.
 */
export async function registerSubscriptionCarriers (
  app: FastifyInstance,
  { ports, schema, pipeline, errorOptions }: RoomCore
): Promise<SubscriptionCarriers> {
  const { ws, limits } = ports.config
  const connections = new Set<GraphQLWebSocket>()
  /** Idle connections (acknowledged, no operation in flight), the longest idle first (a Set keeps insertion order). */
  const idleConnections = new Set<GraphQLWebSocket>()
  const eventStreams = new Set<() => void>()
  const counter = connectionCounter(ws.maxConnectionsPerClient)
  let shuttingDown = false

  const formatErrors = (err: unknown) => formatThrown(err, errorOptions)
  const { start, fanout } = operationStarter({
    pipeline: () => pipeline,
    schema,
    format: () => errorOptions,
    emitter: ports.emitter,
    maxQueuedEvents: MAX_QUEUED_EVENTS,
    maxResponseBytes: limits.maxResponseBytes,
    maxSubscriptionsPerCaller: ws.maxSubscriptionsPerCaller,
    // identity: user changes end a user's subscriptions (operations.ts)
    userChangesTopic: ports.userChangesTopic,
    storedRole: async (userId) => (await ports.domain.store.usersByIds([userId]))[0]?.role ?? null
  })
  const wsOptions = {
    start,
    authenticate: ports.authenticate,
    admitCaller: (caller: Caller | null) => counter.acquire(userKey(caller)),
    formatErrors,
    initTimeoutMs: ws.initTimeoutMs,
    keepAliveMs: ws.keepAliveMs,
    maxOperations: ws.maxSubscriptionsPerConnection,
    maxBufferedBytes: ws.maxBufferedBytesPerSubscriber,
    maxMessagesPerSecond: ws.maxMessagesPerSecond,
    maxReceivedBytesPerSecond: ws.maxReceivedBytesPerSecond,
    maxLifetimeMs: ws.maxLifetimeMs,
    idleChanged: (connection: GraphQLWebSocket, idle: boolean) => {
      if (idle) idleConnections.add(connection)
      else idleConnections.delete(connection)
    }
  }
  evictIdleNearCap(app.server, idleConnections)

  // Before @fastify/websocket's own preClose (which closes sockets without completing anything).
  app.addHook('preClose', async () => {
    shuttingDown = true
    for (const stop of eventStreams) stop()
    await Promise.allSettled([...connections].map((connection) => connection.shutdown(SHUTDOWN_GRACE_MS)))
  })

  // GET /graphql (http.ts) is also the WebSocket endpoint: give the route its upgrade handler
  // as it is added (before @fastify/websocket's own onRoute hook, which wires it).
  app.addHook('onRoute', (route) => {
    if (route.url === '/graphql' && route.method === 'GET') route.wsHandler = serveWebSocket
  })

  // The room is a scope of its own, so @fastify/websocket's handling of upgrades reaches its routes only;
  // yet it listens to every upgrade of the server it is given. It is given a server that never listens
  // (ws's documented `server` option), fed only the upgrades to /graphql; an upgrade to any other path is
  // refused here, plainly, instead of being run by a route that cannot take the socket over.
  const upgrades = createServer()
  app.server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (request.url?.split('?')[0] === '/graphql') return upgrades.emit('upgrade', request, socket, head)
    refuseUpgrade(socket)
  })

  await app.register(websocket, {
    errorHandler: (error, socket, request) => {
      const code = (error as NodeJS.ErrnoException).code
      // A client's mistake (a frame over WS_MAX_MESSAGE_BYTES, invalid UTF-8, a bad opcode: ws has
      // already closed with the code that says so, 1009, 1007, 1002) or a client gone abruptly is not a
      // server error: a debug line, no stack. Anything else is ours.
      if (code !== undefined && (code.startsWith('WS_ERR_') || CLIENT_GONE.has(code))) {
        request.log.debug({ code, reason: error.message }, 'WebSocket closed: the client broke the protocol or left')
      } else {
        request.log.error({ err: error }, 'WebSocket error')
      }
      socket.terminate()
    },
    options: {
      maxPayload: ws.maxMessageBytes,
      // Pongs are sent by the connection (websocket.ts), through the send path that bounds unsent bytes.
      autoPong: false,
      server: upgrades,
      handleProtocols: (offered: Set<string>) => SUBPROTOCOLS.find((p) => offered.has(p)) ?? false
    }
  })

  // Refusals before the upgrade answer in HTTP with our error shape (registered after @fastify/websocket,
  // whose own onRequest hook sets request.ws).
  /** Why an upgrade request is refused; undefined when it may upgrade. */
  const upgradeRefusal = (request: FastifyRequest): AppError | undefined => {
    const origin = request.headers.origin
    if (origin !== undefined && !ws.allowedOrigins.includes(origin)) {
      return new AppError('FORBIDDEN', `WebSocket connections from origin ${origin} are not allowed`)
    }
    const offered = request.headers['sec-websocket-protocol']
    if (
      offered !== undefined &&
      !offered.split(',').some((p) => SUBPROTOCOLS.includes(p.trim() as (typeof SUBPROTOCOLS)[number]))
    ) {
      return new AppError('BAD_REQUEST', `Unsupported WebSocket subprotocol: use ${SUBPROTOCOLS.join(' or ')}`)
    }
    if (counter.isFull(`ip:${request.ip}`)) {
      return new AppError('RATE_LIMITED', `Too many connections from this address: at most ${ws.maxConnectionsPerClient}`)
    }
    return undefined
  }
  // Runs on every request of the room's routes (its scope: never on SOAP, health or UI requests):
  // synchronous (callback style), so a request that is no upgrade pays one property read, not a promise
  // and a hook turn.
  app.addHook('onRequest', (request, _reply, done) => done(request.ws ? upgradeRefusal(request) : undefined))

  function serveWebSocket (socket: WebSocket, request: FastifyRequest): void {
    if (shuttingDown) return socket.close(1001, 'Server shutting down')
    // Checked at the upgrade too; this take is the one that counts (concurrent upgrades).
    const releaseIp = counter.acquire([`ip:${request.ip}`])
    if (!releaseIp) return socket.close(1013, 'Too many connections from this address')
    const connection = openConnection(socket, request.ip, wsOptions)
    // ws hands messages over as Buffers (its default binaryType); the session's budget counts their bytes.
    socket.on('message', (data: Buffer) => connection.message(data))
    socket.on('ping', (data: Buffer) => connection.ping(data))
    socket.once('close', () => connection.socketClosed())
    connections.add(connection)
    void connection.closed.then(() => {
      connections.delete(connection)
      releaseIp()
    })
  }

  const writeEventStream = createSseHandler({
    start,
    formatErrors,
    maxBufferedBytes: ws.maxBufferedBytesPerSubscriber,
    maxLifetimeMs: ws.maxLifetimeMs,
    track: (stop) => {
      eventStreams.add(stop)
      return () => eventStreams.delete(stop)
    }
  })

  async function serveEventStream (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (shuttingDown) throw new AppError('SERVICE_UNAVAILABLE', 'Server shutting down')
    const release = counter.acquire([`ip:${request.ip}`, ...userKey(request.caller)])
    if (!release) {
      throw new AppError('RATE_LIMITED', `Too many connections for this client: at most ${ws.maxConnectionsPerClient}`)
    }
    try {
      reply.hijack()
      await writeEventStream({
        operation: {
          params: request.body as GraphQLRequestParams,
          transport: 'SSE',
          caller: request.caller,
          ip: request.ip
        },
        sink: responseSink(reply.raw),
        headers: reply.getHeaders() as OutgoingHttpHeaders
      })
    } finally {
      release()
    }
  }

  const stats = (): SubscriptionStats => ({
    webSockets: connections.size,
    webSocketSubscriptions: [...connections].reduce((n, c) => n + c.activeSubscriptions, 0),
    eventStreams: eventStreams.size,
    topics: fanout.stats.topics,
    topicSubscribers: fanout.stats.subscribers,
    clients: counter.size
  })
  return { serveEventStream, stats, webSocketClients: () => app.websocketServer.clients }
}
