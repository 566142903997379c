// The GraphQL routes: the only Fastify file of GraphQL, registered by the composition root (app/app.ts)
// as a scope of its own (not wrapped by fastify-plugin). It fills in the engine's dependencies
// (app/graphql/dependencies.ts) from the cross-cutting plugins once, assembles the engine over them
// (engine.ts: plans, persisted queries, pipeline, the HTTP exchange, the streaming carriers), then
// translates requests and sockets into the engine's calls:
//
//   POST, GET, PUT /graphql → route hooks (request checks, identity; the request budget's own hooks)
//     → exchange (http-exchange.ts) → the reply; or, for an event stream, streaming.serveEventStream
//     (streaming.ts → sse.ts) over the raw response as a sink
//   GET /graphql with Upgrade: websocket → the upgrade check → @fastify/websocket (ws)
//     → streaming.openWebSocket (streaming.ts → websocket.ts) fed the socket's messages, pings and close
//
// Mercurius builds the executable schema from our SDL and resolvers and hosts mercurius-auth; the
// pipeline runs every operation of every transport through graphql-jit against that schema.
// Mercurius's routes, caches, hooks and pub/sub are not used.
import { createServer, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import mercurius from 'mercurius'
import mercuriusAuthModule, { type MercuriusAuthOptions } from 'mercurius-auth'
import websocket from '@fastify/websocket'
import type {
  FastifyError,
  FastifyInstance,
  FastifyPluginAsync,
  FastifyReply,
  FastifyRequest,
  onRequestHookHandler
} from 'fastify'
import type { WebSocket } from 'ws'
import type { AppError } from '../../app/core/errors.ts'
import { errorAnswer } from '../fastify-errors.ts'
import type { CacheStats, ResponseCache } from '../../app/core/cache/response-cache.ts'
import { adminRoutes } from './admin-routes.ts'
import type { DomainDeps } from '../../app/core/domain/context.ts'
import type { DeploymentRequests } from '../../app/graphql/deployment-usage.ts'
import { memoryApqStore, redisApqStore } from '../../app/graphql/apq-store.ts'
import { createGraphQLEngine, type GraphQLEngine, type WarmUpReport } from './engine.ts'
import { requestRefusal, type HttpExchangeInput, type HttpExchangeResult } from './http-exchange.ts'
import type { OperationExecution } from '../../app/graphql/pipeline.ts'
import type { GraphQLDependencies, Instrumentation } from '../../app/graphql/dependencies.ts'
import { resolvers } from '../../app/graphql/resolvers.ts'
import { authPolicy, schemaSDL, stopResolversAtDeadline } from '../../app/graphql/schema.ts'
import type { EventStreamSink } from './sse.ts'
import { refuseUpgrade, type SubscriptionStats } from './streaming.ts'
import { subscriptionResolvers } from '../../app/graphql/subscriptions.ts'
import { SUBPROTOCOLS } from './ws-protocols.ts'
import { clientAddress } from '../../app/core/peers.ts'

export type { WarmUpReport }

// mercurius-auth is CommonJS whose typings declare `export default`: at run time the import is the plugin itself.
const mercuriusAuth = mercuriusAuthModule as unknown as FastifyPluginAsync<MercuriusAuthOptions>

export interface GraphQLRoutesOptions {
  /** The domain's dependencies, built once by the composition root (app/app.ts) for every transport. */
  domain: DomainDeps
  /** The instruments the core calls at named phases (tracing), chosen by the composition root. */
  instrumentation?: Instrumentation
  /** The shared cache of query answers (null or absent: off), built by the composition root. */
  responseCache?: ResponseCache | null
}

/**
 * The GraphQL inspection surface, read by its metrics (app/graphql/metrics.ts, through the composition
 * root) and tests; nothing in the engine reads it.
 */
export interface GraphQLInspection {
  /** Plans kept for ad-hoc and APQ texts: entries and estimated bytes. */
  readonly planCache: { entries: number; bytes: number }
  /** What runs every admitted operation (tests wrap its `execute` to count executions). */
  readonly execution: OperationExecution
  /** The HTTP exchange the routes call once the caller is identified (bench/graphql-cost.ts times it alone). */
  readonly exchange: GraphQLEngine['exchange']
  /** Open WebSockets, event streams, subscriptions and fan-out topics on this instance. */
  subscriptionStats (): SubscriptionStats
  /** What the persisted manifest's warm-up did at start; null until the server is ready. */
  readonly persistedWarmUp: WarmUpReport | null
  /** The open WebSockets, as ws holds them (tests watch the server's side of a connection). */
  webSocketClients (): ReadonlySet<WebSocket>
  /** Requests served per app deployment since the last call (the metrics' counter adds them up). */
  takeDeploymentUsage (): DeploymentRequests[]
  /** The response cache's counters and whether it answers now; null when the GraphQL routes have no cache. */
  responseCacheStats (): CacheStats | null
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The operation this request executes, once admitted (told to the instruments). */
    graphqlOperation: { name: string | null; type: string } | null
    /** The GraphQL answer (or batch of answers) sent, as an object (told to the instruments). */
    graphqlAnswer: unknown
  }
}

/** The GraphQL routes as the composition root (app/app.ts) assembles it. */
export interface GraphQLRoom {
  /**
   * The GraphQL only Fastify plugin, deliberately NOT wrapped with fastify-plugin: its hooks (the
   * WebSocket upgrade check, @fastify/websocket's), its error handler and its request state stay in its
   * own scope, and never run on SOAP, health or UI requests.
   */
  plugin: FastifyPluginAsync
  /** Readable once the plugin is registered. */
  inspection: GraphQLInspection
}

const NO_SUBSCRIPTIONS: SubscriptionStats = {
  webSockets: 0, webSocketSubscriptions: 0, eventStreams: 0, topics: 0, topicSubscribers: 0, clients: 0
}

/** What the plugin builds, read by the inspection surface. */
interface RoutesState {
  core: GraphQLEngine | null
  persistedWarmUp: WarmUpReport | null
  webSocketClients (): ReadonlySet<WebSocket>
}

export function createGraphQLRoutes (options: GraphQLRoutesOptions): GraphQLRoom {
  const state: RoutesState = { core: null, persistedWarmUp: null, webSocketClients: () => new Set() }
  const registered = (): GraphQLEngine => {
    if (!state.core) throw new Error('The GraphQL routes are not registered yet')
    return state.core
  }
  const inspection: GraphQLInspection = {
    get planCache () { return registered().plans.stats },
    get execution () { return registered().pipeline.execution },
    get exchange () { return registered().exchange },
    subscriptionStats: () => (state.core ? state.core.streaming.stats() : NO_SUBSCRIPTIONS),
    webSocketClients: () => state.webSocketClients(),
    takeDeploymentUsage: () => (state.core ? state.core.deployments.takeUsage() : []),
    responseCacheStats: () => options.responseCache?.stats() ?? null,
    get persistedWarmUp () { return state.persistedWarmUp }
  }
  return { plugin: (app) => graphqlRoutes(app, options, state), inspection }
}

/** Socket errors that only say the client went away. */
const CLIENT_GONE = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED'])

/** The raw HTTP response as an event stream's sink (sse.ts). */
function responseSink (response: ServerResponse): EventStreamSink {
  return {
    open: (headers) => {
      // Set one by one, not passed to writeHead: then they stay readable on the response (the metrics
      // plugin tells an event stream by its content type: a stream is counted, not timed).
      for (const [name, value] of Object.entries(headers)) if (value !== undefined) response.setHeader(name, value)
      response.writeHead(200)
    },
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

/** The exchange's input: the request as it is, nothing copied. */
const exchangeInput = (request: FastifyRequest): HttpExchangeInput => ({
  method: request.method,
  url: request.url,
  headers: request.headers,
  query: request.query,
  body: request.body,
  caller: request.caller,
  ip: clientAddress(request)
})

async function graphqlRoutes (app: FastifyInstance, options: GraphQLRoutesOptions, state: RoutesState) {
  const { config } = app
  // Read at call time: a budget plugin's functions stay replaceable (tests count spends through them).
  const deps: GraphQLDependencies = {
    budgets: {
      spendRequest: (caller, ip) => app.budgets.spendRequest(caller, ip),
      chargeCost: (caller, ip, cost) => app.budgets.chargeCost(caller, ip, cost),
      spendCostUnits: (caller, ip, units) => app.budgets.spendCostUnits(caller, ip, units)
    },
    authenticate: (authorization) => app.authenticate(authorization),
    domain: options.domain,
    emitter: app.events.emitter,
    roomTopic: app.events.roomTopic,
    userChangesTopic: app.events.userChangesTopic,
    config,
    log: app.log,
    instrumentation: options.instrumentation ?? {},
    responseCache: options.responseCache ?? null
  }

  // The schema. `subscription` on: only then does Mercurius's defineResolvers take the Subscription
  // fields' { subscribe, resolve } pairs (below). Its pub/sub is not used: room events reach
  // subscribers through the fan-out hub (fanout.ts) over the service's emitter.
  await app.register(mercurius, {
    schema: schemaSDL,
    resolvers,
    routes: false,
    jit: 0,
    cache: false,
    subscription: { emitter: deps.emitter }
  })
  await app.register(mercuriusAuth, { authDirective: 'auth', applyPolicy: authPolicy() })
  stopResolversAtDeadline(app.graphql.schema)

  // Automatic persisted queries: in memory, or in Redis when REDIS_URL is set (the persisted registry
  // leaves them off in persisted-only mode).
  const apq = config.apq.maxEntries === 0
    ? null
    : app.redis.shared('APQ texts',
      (redis) => redisApqStore(redis.client, redis.key, config.apq.maxEntries, deps.log),
      () => memoryApqStore(config.apq.maxEntries, config.apq.maxBytes))
  const core = await createGraphQLEngine(deps, () => app.graphql.schema, apq)
  const { exchange, streaming, errorOptions } = core
  state.core = core

  app.graphql.defineResolvers({
    Subscription: subscriptionResolvers({ roomTopic: deps.roomTopic, maxCountTarget: config.input.maxCountTarget })
  })
  app.decorateRequest('graphqlOperation', null)
  app.decorateRequest('graphqlAnswer', null)

  // Before the HTTP routes: @fastify/websocket must see the GET route being added.
  await registerWebSocket(app, core, state)

  /** The exchange's result as the reply: status, headers, body; or the event stream it asks for. */
  function sendResult (request: FastifyRequest, reply: FastifyReply, result: HttpExchangeResult) {
    if ('eventStream' in result) {
      return streaming.serveEventStream(
        { params: result.eventStream, transport: 'SSE', caller: request.caller, ip: clientAddress(request) },
        () => {
          reply.hijack()
          return { sink: responseSink(reply.raw), headers: reply.getHeaders() as OutgoingHttpHeaders }
        }
      )
    }
    request.graphqlOperation = result.operation
    request.graphqlAnswer = result.answer
    const headers = result.headers
    for (const name in headers) {
      const value = headers[name] as string
      if (name === 'vary') {
        // Added to a Vary header set earlier (CORS: Origin).
        const prior = reply.getHeader('vary')
        reply.header('vary', prior ? `${String(prior)}, ${value}` : value)
      } else if (name !== 'retry-after' || !reply.hasHeader('retry-after')) {
        // A Retry-After set earlier (the request budget's) stays.
        reply.header(name, value)
      }
    }
    if (result.statusMessage !== undefined) reply.raw.statusMessage = result.statusMessage
    reply.code(result.status)
    if (result.contentType !== undefined) reply.type(result.contentType)
    return reply.send(result.body)
  }

  // Route hooks are synchronous (callback style), one per route: no promise and no extra hook turn
  // per request for checks that never wait.
  /** The checks every /graphql request gets, then who is calling; the refusal, if any. */
  const identify: onRequestHookHandler = (request, _reply, done) => {
    const refusal = requestRefusal(request.method, request.headers)
    // A WebSocket's identity comes from its connection_init message, not from the upgrade request.
    if (refusal || request.ws) return done(refusal)
    try {
      request.caller = deps.authenticate(request.headers.authorization)
    } catch (err) {
      return done(err as AppError)
    }
    done()
  }
  const handler = async (request: FastifyRequest, reply: FastifyReply) =>
    sendResult(request, reply, await exchange(exchangeInput(request)))
  app.post('/graphql', { onRequest: identify }, handler)

  // App deployments for release pipelines: administrators only (admin-routes.ts).
  adminRoutes(app, core.deploymentVerbs, deps, config)
  // graphql-sse's single connection mode starts with a PUT: refused by the exchange.
  app.put('/graphql', handler)
  // Also the WebSocket endpoint (registerWebSocket gives the route its upgrade handler).
  app.get('/graphql', { onRequest: identify }, handler)

  // Every error on the GraphQL routes (its hooks', Fastify's own: 401, 415, 429...) answers as the app's
  // do (routes/fastify-errors.ts); the answer is kept for the GraphQL instruments like any other.
  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    const body = errorAnswer(error, request, reply, errorOptions.production)
    request.graphqlAnswer = body
    return reply.send(body)
  })
  const { answered } = deps.instrumentation
  if (answered) {
    app.addHook('onResponse', (request, _reply, done) => {
      if (request.graphqlAnswer !== null) {
        const params = (request.method === 'GET' ? request.query : request.body) as Parameters<typeof answered>[2]
        answered(request.graphqlAnswer, request.graphqlOperation, params)
      }
      done()
    })
  }

  // onReady: every resolver is in place (and wrapped by @auth), and nothing listens yet. The manifest files
  // are published as app deployments, and every active deployment's operation gets its plan and
  // compilation now (core.warmUp: a manifest text the service cannot run is refused at start).
  app.addHook('onClose', () => core.deployments.stop())
  app.addHook('onReady', async () => {
    // Not ready while the catalog refuses its operations (its view of the store stale); a note when it
    // serves only some deployments.
    app.readinessChecks.set('app deployments', async () => core.deployments.readiness())
    const warmUp = await core.warmUp()
    state.persistedWarmUp = warmUp
    deps.log.info(
      {
        operations: warmUp.compiled,
        ms: warmUp.ms,
        apq: core.persisted.apq?.kind ?? 'off',
        persistedOnly: config.persisted.only
      },
      'persisted queries ready'
    )
  })
}

/**
 * The WebSocket side of GET /graphql (registered before that route is added: @fastify/websocket wires
 * routes as they are added): the upgrade check, ws, and each socket handed to the streaming carriers.
 */
async function registerWebSocket (app: FastifyInstance, { deps, streaming }: GraphQLEngine, state: RoutesState) {
  const { webSocket } = deps.config.streaming
  streaming.evictIdleNearCap(app.server)

  // Before @fastify/websocket's own preClose (which closes sockets without completing anything).
  app.addHook('preClose', () => streaming.shutdown())

  function serveWebSocket (socket: WebSocket, request: FastifyRequest): void {
    const connection = streaming.openWebSocket(socket, clientAddress(request))
    if (!connection) return
    // ws hands messages over as Buffers (its default binaryType); the session's budget counts their bytes.
    socket.on('message', (data: Buffer) => connection.message(data))
    socket.on('ping', (data: Buffer) => connection.ping(data))
    socket.once('close', () => connection.socketClosed())
  }
  // GET /graphql is also the WebSocket endpoint: give the route its upgrade handler as it is added
  // (before @fastify/websocket's own onRoute hook, which wires it).
  app.addHook('onRoute', (route) => {
    if (route.url === '/graphql' && route.method === 'GET') route.wsHandler = serveWebSocket
  })

  // The GraphQL routes are a scope of its own, so @fastify/websocket's handling of upgrades reaches its routes only;
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
      maxPayload: webSocket.maxMessageBytes,
      // Pongs are sent by the connection (websocket.ts), through the send path that bounds unsent bytes.
      autoPong: false,
      server: upgrades,
      handleProtocols: (offered: Set<string>) => SUBPROTOCOLS.find((p) => offered.has(p)) ?? false
    }
  })
  state.webSocketClients = () => app.websocketServer.clients

  // Refusals before the upgrade answer in HTTP with our error shape (registered after @fastify/websocket,
  // whose own onRequest hook sets request.ws). Runs on every request of the GraphQL routes (its scope:
  // never on SOAP, health or UI requests): synchronous (callback style), so a request that is no upgrade
  // pays one property read, not a promise and a hook turn.
  app.addHook('onRequest', (request, _reply, done) => {
    if (!request.ws) return done()
    const { origin, 'sec-websocket-protocol': protocols } = request.headers
    done(streaming.upgradeRefusal({ origin, protocols, ip: clientAddress(request) }))
  })
}
