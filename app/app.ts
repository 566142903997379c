// The root plugin: builds the service from a configuration, registering plugins in an explicit order.
// Tests build it with inject or listen on port 0; app/server.ts runs it.
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify'
import type { Config } from './core/config/index.ts'
import { accessLog, logDestination, serverLogging, type LoggingOptions } from '../plugins/logging.ts'
import { limitConnectionsPerPeer, requestIdFrom, trustedPeers } from './core/peers.ts'
import { connectionCaps, guardListener } from './core/descriptors.ts'
import { createResponseCache, memoryCacheStore, redisCacheStore } from './core/cache/create.ts'
import { responseCacheMetrics } from './core/cache/metrics.ts'
import { followStoreChanges } from './core/cache/store-changes.ts'
import type { DomainDeps } from './core/domain/context.ts'
import { cursorKey } from './core/domain/pages.ts'
import { tellingChanges, type Invalidation } from './core/domain/store-tags.ts'
import { AppError, type ErrorCode } from './core/errors.ts'
import { errorAnswer } from '../routes/fastify-errors.ts'
import type { Store } from './core/store/types.ts'
import configPlugin from '../plugins/config.ts'
import readinessPlugin from '../plugins/readiness.ts'
import tracingPlugin from '../plugins/tracing.ts'
import corsPlugin from '../plugins/cors.ts'
import storePlugin from '../plugins/store.ts'
import metricsPlugin from '../plugins/metrics.ts'
import underPressurePlugin from '../plugins/under-pressure.ts'
import gracefulDrainPlugin from '../plugins/graceful-drain.ts'
import eventsPlugin from '../plugins/events.ts'
import redisPlugin from '../plugins/redis.ts'
import authPlugin from '../plugins/auth.ts'
import rateLimitPlugin from '../plugins/rate-limit.ts'
import { createGraphQLRoutes, type GraphQLInspection } from '../routes/graphql/index.ts'
import { graphqlMetrics } from './graphql/metrics.ts'
import { formatError } from './core/error-format.ts'
import healthRoutes from '../routes/health.ts'
import queryUiRoutes from '../routes/query-ui.ts'
import soapRoutes from '../routes/soap/index.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /** The GraphQL routes' inspection surface (plan cache, open subscriptions, warm-up), for tests. */
    graphqlInspection: GraphQLInspection
  }
}

/** How long a starting instance waits for its response cache's change feed before it listens anyway. */
const STORE_CHANGES_WAIT_MS = 5000

export interface BuildOptions extends LoggingOptions {
  /** A store owned by the caller (tests); otherwise the configured one is opened and closed with the app. */
  store?: Store
  /** Epoch-milliseconds clock for WS-Security freshness (tests replaying captured SOAP requests inject one). */
  clock?: () => number
  /** Told of every write's changed read tags, whatever the transport, instead of the response cache (tests). */
  invalidation?: Invalidation
  /** Entries of the SOAP binding's in-process replay memory (tests make it small; REPLAY_MEMORY_ENTRIES otherwise). */
  soapReplayMemoryEntries?: number
}

/**
 * Errors Node's HTTP parser meets before there is a request (a request not whole within
 * REQUEST_TIMEOUT_MS, headers over Node's size limit, bytes that are not HTTP) are answered on the raw
 * socket, which Fastify's clientErrorHandler option hands us: in the interface's shape with a code,
 * like every other refusal, then closed. (Fastify's default writes a body of its own.)
 */
function clientErrorHandler (err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return
  const [code, message]: [ErrorCode, string] = err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
    ? ['REQUEST_TIMEOUT', 'The request did not arrive whole in time']
    : err.code === 'HPE_HEADER_OVERFLOW'
      ? ['REQUEST_HEADER_FIELDS_TOO_LARGE', 'The request headers are too large']
      : ['BAD_REQUEST', 'Malformed HTTP request']
  const error = new AppError(code, message)
  const body = JSON.stringify({ errors: [formatError(error, { production: true, logInternal: () => {} })] })
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n${body}`)
  }
  socket.destroy(err)
}

/**
 * The HTTP server every request meets first: Fastify's options (body cap, trusted proxies, request ids,
 * slow-client deadlines), the connection caps, the access log and the hooks on every response. The
 * service builds on it (buildApp), and so does the bench's guarded baseline (bench/guarded-server.ts).
 */
export function createServer (config: Config, options: LoggingOptions = {}): FastifyInstance {
  const trustedPeer = trustedPeers(config.server.trustProxy)
  const destination = logDestination(options, config.server.logLevel)
  const app = Fastify({
    ...serverLogging(config, options, destination),
    bodyLimit: config.server.bodyLimitBytes,
    trustProxy: config.server.trustProxy.length > 0 ? config.server.trustProxy : false,
    // X-Request-Id is taken from trusted proxies only, and only in a safe form (app/core/peers.ts).
    requestIdHeader: false,
    genReqId: requestIdFrom(trustedPeer),
    // Slow clients: a request must arrive whole within requestTimeout, and a connection silent both ways
    // is closed after connectionTimeout. Node enforces the request deadline only when the server is
    // created with it (hence `http` too), checking on an interval (30 s by default): a quarter of the
    // timeout closes a slow sender within 1.25 x REQUEST_TIMEOUT_MS.
    requestTimeout: config.server.requestTimeoutMs,
    connectionTimeout: config.server.connectionTimeoutMs,
    http: {
      requestTimeout: config.server.requestTimeoutMs,
      connectionsCheckingInterval: config.server.requestTimeoutMs > 0
        ? Math.min(30_000, Math.max(100, config.server.requestTimeoutMs / 4))
        : 30_000
    },
    // While closing, requests that still arrive on open connections are served (the store is still open)
    // rather than refused with 503: a load balancer cannot resend a POST it has already sent.
    return503OnClosing: false,
    clientErrorHandler,
    routerOptions: { maxParamLength: 200 }
  })

  limitConnectionsPerPeer(app.server, config.server.maxConnectionsPerIp, trustedPeer)
  guardListener(app.server, connectionCaps(config.server.maxConnections, (config.server.metricsPort ?? 0) > 0).api, app.log, 'api')
  accessLog(app, destination, config.tracing !== null)
  // Every response carries its request id (set on arrival: streamed responses such as SSE skip onSend).
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    done()
  })
  // During a graceful shutdown, responses to requests already in flight close their keep-alive
  // connection; otherwise the server would wait for idle sockets until their keep-alive timeout.
  let closing = false
  app.addHook('preClose', async () => { closing = true })
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close')
    done(null, payload)
  })
  return app
}

/**
 * The protections every API route pays, in their order: config, tracing, CORS, metrics, load shedding,
 * graceful drain, store, Redis, events, identity (JWT) and budgets (request and cost units).
 */
export async function registerProtections (app: FastifyInstance, config: Config, store?: Store): Promise<void> {
  await app.register(configPlugin, { config })
  await app.register(readinessPlugin)
  // Tracing next (when configured): its server span starts before any other route hook, so it covers
  // them, and it wraps every route declared after it.
  await app.register(tracingPlugin)
  // CORS first: preflights are answered before rate limiting, and every answer (429s too) carries the headers.
  await app.register(corsPlugin)
  // Metrics next, so every route's responses are counted; then load shedding, before any real work.
  await app.register(metricsPlugin)
  await app.register(underPressurePlugin)
  await app.register(gracefulDrainPlugin)
  await app.register(storePlugin, { store })
  await app.register(redisPlugin)
  await app.register(eventsPlugin)
  await app.register(authPlugin)
  await app.register(rateLimitPlugin)
}

export async function buildApp (config: Config, options: BuildOptions = {}): Promise<FastifyInstance> {
  const production = config.profile === 'production'
  const app = createServer(config, options)

  // Every error that escapes a route answers in the GraphQL error shape, without internals in production.
  // (The SOAP routes answer with faults through their own handler.)
  app.setErrorHandler(async (error: FastifyError, request, reply) =>
    reply.send(errorAnswer(error, request, reply, production)))
  app.setNotFoundHandler(async (request, reply) => {
    return reply
      .code(404)
      .send({
        errors: [
          {
            message: `Route ${request.method} ${request.url.split('?')[0]} not found`,
            extensions: { code: 'NOT_FOUND' }
          }
        ]
      })
  })

  await registerProtections(app, config, options.store)
  // The shared cache of query answers (in Redis when the service has it, else in process), invalidated
  // by every write through the domain, whatever carries it.
  const { responseCache: cacheSettings } = config
  const responseCache = !cacheSettings.enabled
    ? null
    : createResponseCache(cacheSettings, app.redis.shared('cached answers',
      (redis) => redisCacheStore(cacheSettings, redis),
      () => memoryCacheStore(cacheSettings)
    ), (err) => app.log.warn({ err }, 'response cache unavailable: the request was executed uncached'))
  if (responseCache) {
    responseCacheMetrics(app.metricsRegistry, responseCache)
    // Changes made beside the service (tools, an operator's SQL) reach the cache too.
    const changes = followStoreChanges(app.store, responseCache, {
      onError: (err) => app.log.warn({ err }, 'response cache: a change made outside the service could not be applied yet; answering uncached until it is')
    })
    app.addHook('onClose', () => changes.stop())
    // Listening only once the cache answers (its feed has read the change log once), unless that takes
    // long: then the instance serves uncached until it does, and says so.
    app.addHook('onReady', async () => {
      if (!(await changes.serving(STORE_CHANGES_WAIT_MS))) {
        app.log.warn({}, 'response cache: the store\'s change feed is not live yet; answering uncached until it is')
      }
    })
  }
  // The domain's dependencies, built once here and handed to both transports (GraphQL and SOAP). Every
  // write of its store tells the response cache what it changes (app/core/domain/store-tags.ts).
  const domain: DomainDeps = {
    store: tellingChanges(app.store, options.invalidation ?? responseCache ?? undefined),
    events: app.events,
    caps: config.input,
    cursorKey: cursorKey(config.cursors.secret)
  }
  // The GraphQL routes, in a scope of their own (their hooks run on them only). Its instruments: with
  // tracing on, every operation of every transport is a span; its answers and open subscriptions are
  // counted by the GraphQL metrics, registered here on the app's metrics registry.
  const graphql = createGraphQLRoutes({
    domain,
    responseCache,
    instrumentation: {
      phases: app.tracing?.pipeline,
      answered: graphqlMetrics(app.metricsRegistry, () => graphql.inspection)
    }
  })
  app.decorate('graphqlInspection', graphql.inspection)
  await app.register(graphql.plugin)
  await app.register(healthRoutes)
  await app.register(queryUiRoutes)
  await app.register(soapRoutes, { domain, clock: options.clock, replayMemoryEntries: options.soapReplayMemoryEntries })
  return app
}
