// The GraphQL engine and its carriers, assembled without Fastify over the engine's dependencies
// (app/graphql/dependencies.ts), in dependency order, by `createGraphQLEngine`:
//
//   plans (pipeline.ts: createPlans) → the app deployments' catalog (deployment-catalog.ts; retains the
//     operations it serves) → persisted registry (persisted-registry.ts; plans registered texts) →
//     pipeline (pipeline.ts; resolves documents through the registry) → the HTTP exchange
//     (http-exchange.ts) and the streaming carriers (streaming.ts: WebSocket sessions, event streams)
//
// Built in that order, nothing waits for anything built later. The routes (index.ts) translate requests
// and sockets into its calls.
import type { GraphQLSchema } from 'graphql'
import type { FormatOptions } from '../../app/core/error-format.ts'
import type { ApqStore } from '../../app/graphql/apq-store.ts'
import { deploymentVerbs, manifestFileDeployment, publishManifest } from '../../app/graphql/app-deployments.ts'
import { createDeploymentCatalog, type DeploymentCatalog } from '../../app/graphql/deployment-catalog.ts'
import { createHttpExchange } from './http-exchange.ts'
import { createPersistedQueries } from '../../app/graphql/persisted-registry.ts'
import type { PersistedQueries } from '../../app/graphql/persisted.ts'
import { createPipeline, type Pipeline } from '../../app/graphql/pipeline.ts'
import { createPlans, type Plans } from '../../app/graphql/plans.ts'
import type { GraphQLDependencies } from '../../app/graphql/dependencies.ts'
import { operationLimits } from '../../app/graphql/operation-limits.ts'
import { createStreaming, type Streaming } from './streaming.ts'
import { schemaSDL } from '../../app/graphql/schema.ts'

export interface WarmUpReport {
  /** Operations of the active app deployments planned (parsed, validated, analysed) and compiled at start. */
  compiled: number
  ms: number
}

/** The engine: its dependencies and what is built over them. */
export interface GraphQLEngine {
  deps: GraphQLDependencies
  /** The executable schema (built by Mercurius, with mercurius-auth's @auth wrappers). */
  schema (): GraphQLSchema
  /** The plans of document texts, with their compilations (plans.ts). */
  plans: Plans
  /** What a request names, resolved to the text it runs (persisted-registry.ts). */
  persisted: PersistedQueries
  /** Every GraphQL operation, whatever its transport, is admitted and run through it. */
  pipeline: Pipeline
  /** How errors are shaped for callers (no internals in production), and where internal ones are logged. */
  errorOptions: FormatOptions
  /** One HTTP request to /graphql, answered (http-exchange.ts). */
  exchange: ReturnType<typeof createHttpExchange>
  /** WebSocket sessions and event streams (streaming.ts). */
  streaming: Streaming
  /** The active app deployments' operations this instance serves, reloaded as they change. */
  deployments: DeploymentCatalog
  /** The app deployments' verbs for an administrator over HTTP (app-deployments.ts). */
  deploymentVerbs: ReturnType<typeof deploymentVerbs>
  /**
   * Publishes each PERSISTED_MANIFEST file as an app deployment named after its file (a no-op when
   * published already; a text the service cannot run, such as schema drift or a limit like MAX_DEPTH,
   * is a broken deploy: thrown, refused at start), then loads every active deployment, planned and
   * compiled before the first request, and follows their changes.
   */
  warmUp (): Promise<WarmUpReport>
}

/**
 * The core over its deps. `apq`: the automatic persisted queries' store (null: APQ off), chosen by the
 * route, which knows whether Redis is there.
 */
export async function createGraphQLEngine (
  deps: GraphQLDependencies, schema: () => GraphQLSchema, apq: ApqStore | null
): Promise<GraphQLEngine> {
  const { config } = deps
  const errorOptions: FormatOptions = {
    production: config.profile === 'production',
    logInternal: (err) => deps.log.error({ err }, 'GraphQL request failed')
  }
  // What every operation is checked against, here and in the profile this instance records (npm run app checks
  // a publish against the running instances' profiles).
  const limits = operationLimits(config)
  const plans = createPlans(schema, limits)

  // Persisted queries: the active app deployments (the catalog: published by release pipelines, and
  // PERSISTED_MANIFEST's comma-separated files as deployments named after them) and automatic
  // registration (APQ: in memory, or in Redis when REDIS_URL is set; off in persisted-only mode).
  const files = (config.persisted.manifest ?? '').split(',').map((f) => f.trim()).filter(Boolean)
  // Read and checked now: a manifest the service cannot honour stops the start before anything listens.
  const manifestFiles: Awaited<ReturnType<typeof manifestFileDeployment>>[] = []
  for (const file of files) manifestFiles.push(await manifestFileDeployment(file, schema(), limits))
  const deployments = createDeploymentCatalog({
    store: deps.domain.store,
    retain: plans.retain,
    release: plans.release,
    maxBytes: config.deployments.maxBytes,
    usageFlushMs: config.deployments.usageFlushMs,
    profile: { schema: schemaSDL, limits, maxBytes: config.deployments.maxBytes },
    log: deps.log
  })
  const persisted = createPersistedQueries({
    registered: deployments.registered,
    persistedOnly: config.persisted.only,
    apq,
    apqMaxEntries: config.apq.maxEntries,
    apqMaxBytes: config.apq.maxBytes,
    apqMaxDocumentBytes: config.apq.maxDocumentBytes,
    plan: plans.plan
  })

  const pipeline = createPipeline({
    schema,
    limits,
    introspection: config.schemaDiscovery.introspection,
    timeoutMs: limits.timeoutMs,
    domain: deps.domain,
    plans,
    persisted,
    ...deps.budgets,
    instrumentation: deps.instrumentation
  })

  const warmUp = async (): Promise<WarmUpReport> => {
    const started = performance.now()
    for (const [i, { name, version, manifest }] of manifestFiles.entries()) {
      const file = files[i]
      try {
        await publishManifest(deps.domain.store, {
          name, version, manifest, schema: schema(), limits, maxBytes: config.deployments.maxBytes
        })
      } catch (err) {
        throw new Error(`Persisted query manifest ${file}: ${(err as Error).message}`)
      }
    }
    await deployments.refresh()
    await deployments.start()
    if (config.persisted.only && deployments.stats.operations === 0) {
      deps.log.warn({}, 'persisted-only mode without an active app deployment (npm run app -- publish, or PERSISTED_MANIFEST): every GraphQL operation will be refused')
    }
    return { compiled: deployments.stats.operations, ms: Math.round((performance.now() - started) * 10) / 10 }
  }

  const exchange = createHttpExchange({
    config, persisted, ...pipeline, errorOptions, responseCache: deps.responseCache, schema
  })
  const streaming = createStreaming({ deps, schema, pipeline, errorOptions })
  const verbs = deploymentVerbs({
    store: deps.domain.store,
    schema,
    limits,
    maxBytes: config.deployments.maxBytes,
    catalog: deployments,
    log: deps.log
  })
  return {
    deps,
    schema,
    plans,
    persisted,
    pipeline,
    errorOptions,
    exchange,
    streaming,
    deployments,
    deploymentVerbs: verbs,
    warmUp
  }
}
