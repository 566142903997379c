// The GraphQL room's entry, and with http.ts and subscription-carriers.ts its only Fastify code. It
// fills in the room's ports (ports.ts) from the cross-cutting plugins once, builds the Fastify-free core
// over them in dependency order, then registers the carriers:
//
//   schema (Mercurius + mercurius-auth, schema.ts) → plans (pipeline.ts: createPlans)
//     → persisted registry (persisted.ts; plans registered texts) → pipeline (pipeline.ts; resolves
//     documents through the registry) → streaming carriers (subscription-carriers.ts: WebSocket, SSE)
//     → HTTP routes (http.ts: POST, GET, PUT /graphql)
//
// Mercurius builds the executable schema from our SDL and resolvers and hosts mercurius-auth; the
// pipeline runs every operation of every transport through graphql-jit against that schema.
// Mercurius's routes, caches, hooks and pub/sub are not used.
import mercurius from 'mercurius'
import mercuriusAuthModule, { type MercuriusAuthOptions } from 'mercurius-auth'
import type { FastifyError, FastifyInstance, FastifyPluginAsync } from 'fastify'
import type { WebSocket } from 'ws'
import { errorAnswer } from '../../app/fastify-errors.ts'
import type { DomainDeps } from '../../app/domain/context.ts'
import type { FormatOptions } from '../../app/error-format.ts'
import { registerHttpRoutes } from './http.ts'
import { memoryApqStore, redisApqStore } from './apq-store.ts'
import { emptyManifest, loadManifests } from './persisted-manifest.ts'
import { createPersistedQueries } from './persisted-registry.ts'
import { createPipeline, createPlans, type Pipeline } from './pipeline.ts'
import type { RoomCore } from './core.ts'
import type { GraphQLPorts, Instrumentation } from './ports.ts'
import { resolvers } from './resolvers.ts'
import { authPolicy, schemaSDL, stopResolversAtDeadline } from './schema.ts'
import { registerSubscriptionCarriers, type SubscriptionCarriers, type SubscriptionStats } from './subscription-carriers.ts'
import { subscriptionResolvers } from './subscriptions.ts'

// mercurius-auth is CommonJS whose typings declare `export default`: at run time the import is the plugin itself.
const mercuriusAuth = mercuriusAuthModule as unknown as FastifyPluginAsync<MercuriusAuthOptions>

export interface GraphQLRoomOptions {
  /** The domain's dependencies, built once by the composition root (app/app.ts) for every transport. */
  domain: DomainDeps
  /** The instruments the core calls at named phases (tracing), chosen by the composition root. */
  instrumentation?: Instrumentation
}

export interface WarmUpReport {
  /** Operations planned (parsed, validated, analysed) and compiled at start. */
  compiled: number
  ms: number
}

/**
 * The room's inspection surface, read by its metrics (app/graphql-metrics.ts, through the composition
 * root) and tests; nothing in the room reads it.
 */
export interface GraphQLRoomInspection {
  /** The pipeline every operation runs through (its `cacheStats`: plans kept for ad-hoc and APQ texts). */
  readonly pipeline: Pipeline
  /** Open WebSockets, event streams, subscriptions and fan-out topics on this instance. */
  subscriptionStats (): SubscriptionStats
  /** What the persisted manifest's warm-up did at start; null until the server is ready. */
  readonly persistedWarmUp: WarmUpReport | null
  /** The open WebSockets, as ws holds them (tests watch the server's side of a connection). */
  webSocketClients (): ReadonlySet<WebSocket>
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The operation this request executes, once admitted (the room's own state: told to its instruments). */
    graphqlOperation: { name: string | null; type: string } | null
    /** The GraphQL answer (or batch of answers) sent, as an object (the room's own state: told to its instruments). */
    graphqlAnswer: unknown
  }
}

/** The room as the composition root (app/app.ts) assembles it. */
export interface GraphQLRoom {
  /**
   * The room's only Fastify plugin, deliberately NOT wrapped with fastify-plugin: its hooks (the
   * WebSocket upgrade check, @fastify/websocket's), its error handler and its request state stay in its
   * own scope, and never run on SOAP, health or UI requests.
   */
  plugin: FastifyPluginAsync
  /** Readable once the plugin is registered. */
  inspection: GraphQLRoomInspection
}

const NO_SUBSCRIPTIONS: SubscriptionStats = {
  webSockets: 0, webSocketSubscriptions: 0, eventStreams: 0, topics: 0, topicSubscribers: 0, clients: 0
}

/** What the plugin builds, read by the inspection surface. */
interface RoomState {
  built: { pipeline: Pipeline; carriers: SubscriptionCarriers } | null
  persistedWarmUp: WarmUpReport | null
}

export function createGraphQLRoom (options: GraphQLRoomOptions): GraphQLRoom {
  const state: RoomState = { built: null, persistedWarmUp: null }
  const inspection: GraphQLRoomInspection = {
    get pipeline () {
      if (!state.built) throw new Error('The GraphQL room is not registered yet')
      return state.built.pipeline
    },
    subscriptionStats: () => (state.built ? state.built.carriers.stats() : NO_SUBSCRIPTIONS),
    webSocketClients: () => state.built?.carriers.webSocketClients() ?? new Set(),
    get persistedWarmUp () { return state.persistedWarmUp }
  }
  return { plugin: (app) => graphqlRoom(app, options, state), inspection }
}

async function graphqlRoom (app: FastifyInstance, options: GraphQLRoomOptions, state: RoomState) {
  const { config } = app
  // Read at call time: a budget plugin's functions stay replaceable (tests count spends through them).
  const ports: GraphQLPorts = {
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
    instrumentation: options.instrumentation ?? {}
  }
  const errorOptions: FormatOptions = {
    production: config.profile === 'production',
    logInternal: (err) => ports.log.error({ err }, 'GraphQL request failed')
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
    subscription: { emitter: ports.emitter }
  })
  await app.register(mercuriusAuth, { authDirective: 'auth', applyPolicy: authPolicy() })
  stopResolversAtDeadline(app.graphql.schema)
  const schema = () => app.graphql.schema

  // Plans first: the persisted registry plans the texts it registers, and the pipeline resolves
  // documents through the registry. Built in that order, nothing waits for anything built later.
  const plans = createPlans(schema, config.limits)

  // Persisted queries: the deploy-time manifests (PERSISTED_MANIFEST, comma-separated files) and
  // automatic registration (APQ: in memory, or in Redis when REDIS_URL is set; off in persisted-only mode).
  const files = (config.persistedManifest ?? '').split(',').map((f) => f.trim()).filter(Boolean)
  // Hashes and single operations are checked here; validity for this service when the plans are pinned.
  const manifest = files.length > 0 ? loadManifests(files) : emptyManifest()
  if (config.persistedOnly && manifest.operations.length === 0) {
    ports.log.warn(
      {},
      'persisted-only mode without a manifest (PERSISTED_MANIFEST): every GraphQL operation will be refused'
    )
  }
  const apqOn = !config.persistedOnly && config.apqMaxEntries > 0
  const apq = !apqOn
    ? null
    : app.redis.client
      ? redisApqStore(app.redis.client, app.redis.key, config.apqMaxEntries, ports.log)
      : memoryApqStore(config.apqMaxEntries, config.apqMaxBytes)
  const persisted = createPersistedQueries({
    manifest,
    persistedOnly: config.persistedOnly,
    apq,
    apqMaxEntries: config.apqMaxEntries,
    apqMaxBytes: config.apqMaxBytes,
    apqMaxDocumentBytes: config.apqMaxDocumentBytes,
    plan: plans.plan
  })

  const pipeline = createPipeline({
    schema,
    limits: config.limits,
    introspection: config.introspection,
    domain: ports.domain,
    plans,
    persisted,
    ...ports.budgets,
    instrumentation: ports.instrumentation
  })
  const room: RoomCore = { ports, schema, pipeline, errorOptions }

  app.graphql.defineResolvers({
    Subscription: subscriptionResolvers({ roomTopic: ports.roomTopic, maxCountTarget: config.limits.maxCountTarget })
  })
  app.decorateRequest('graphqlOperation', null)
  // Before the HTTP routes: it registers @fastify/websocket, which must see the GET route being added.
  const carriers = await registerSubscriptionCarriers(app, room)
  registerHttpRoutes(app, room, carriers)

  state.built = { pipeline, carriers }

  // Every error on the room's routes (its hooks', Fastify's own: 401, 415, 429...) answers as the app's
  // do (app/fastify-errors.ts); the answer is kept for the room's instruments like any other.
  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    const body = errorAnswer(error, request, reply, errorOptions.production)
    request.graphqlAnswer = body
    return reply.send(body)
  })
  app.decorateRequest('graphqlAnswer', null)
  const { answered } = ports.instrumentation
  if (answered) {
    app.addHook('onResponse', (request, _reply, done) => {
      if (request.graphqlAnswer !== null) {
        const params = (request.method === 'GET' ? request.query : request.body) as Parameters<typeof answered>[2]
        answered(request.graphqlAnswer, request.graphqlOperation, params)
      }
      done()
    })
  }

  // onReady: every resolver is in place (and wrapped by @auth), and nothing listens yet. Each manifest
  // operation gets its plan and compilation now, kept for the life of the process; a text the service
  // cannot run (schema drift, a limit such as MAX_DEPTH) is a broken deploy, refused at start.
  app.addHook('onReady', async () => {
    const started = performance.now()
    for (const operation of manifest.operations) {
      try {
        pipeline.pin(operation.text)
      } catch (err) {
        const nested = (err as { errors?: { message: string }[] }).errors
        const reason = nested?.length ? nested.map((e) => e.message).join('; ') : (err as Error).message
        throw new Error(
        `Persisted operation ${operation.name ?? '(anonymous)'} ${operation.id} is not valid for this service: ${reason}`
        )
      }
    }
    const ms = Math.round((performance.now() - started) * 10) / 10
    state.persistedWarmUp = { compiled: manifest.operations.length, ms }
    ports.log.info(
      {
        operations: manifest.operations.length,
        ms: state.persistedWarmUp.ms,
        apq: apq ? (app.redis.client ? 'redis' : 'memory') : 'off',
        persistedOnly: config.persistedOnly
      },
      'persisted queries ready'
    )
  })
}
