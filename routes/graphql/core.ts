// The room's Fastify-free core, built over its ports (ports.ts) in dependency order by `createRoomCore`:
//
//   plans (pipeline.ts: createPlans) → persisted registry (persisted-registry.ts; plans registered
//     texts) → pipeline (pipeline.ts; resolves documents through the registry) → the HTTP exchange
//     (http-exchange.ts) and the streaming carriers (streaming.ts: WebSocket sessions, event streams)
//
// Built in that order, nothing waits for anything built later. The door (index.ts) translates requests
// and sockets into its calls.
import type { GraphQLSchema } from 'graphql'
import type { FormatOptions } from '../../app/error-format.ts'
import type { ApqStore } from './apq-store.ts'
import { createHttpExchange } from './http-exchange.ts'
import { emptyManifest, loadManifests } from './persisted-manifest.ts'
import { createPersistedQueries } from './persisted-registry.ts'
import { createPipeline, createPlans, type Pipeline } from './pipeline.ts'
import type { GraphQLPorts } from './ports.ts'
import { createStreaming, type Streaming } from './streaming.ts'

export interface WarmUpReport {
  /** Operations planned (parsed, validated, analysed) and compiled at start. */
  compiled: number
  ms: number
}

/** The core: the ports and what is built over them. */
export interface RoomCore {
  ports: GraphQLPorts
  /** The executable schema (built by Mercurius, with mercurius-auth's @auth wrappers). */
  schema (): GraphQLSchema
  /** Every GraphQL operation, whatever its transport, is admitted and run through it. */
  pipeline: Pipeline
  /** How errors are shaped for callers (no internals in production), and where internal ones are logged. */
  errorOptions: FormatOptions
  /** One HTTP request to /graphql, answered (http-exchange.ts). */
  exchange: ReturnType<typeof createHttpExchange>
  /** WebSocket sessions and event streams (streaming.ts). */
  streaming: Streaming
  /**
   * Plans and compiles every manifest operation, kept for the life of the process; a text the service
   * cannot run (schema drift, a limit such as MAX_DEPTH) is a broken deploy: thrown, refused at start.
   */
  warmUp (): WarmUpReport
}

/**
 * The core over its ports. `apq`: the automatic persisted queries' store (null: APQ off), chosen by the
 * door, which knows whether Redis is there.
 */
export function createRoomCore (ports: GraphQLPorts, schema: () => GraphQLSchema, apq: ApqStore | null): RoomCore {
  const { config } = ports
  const errorOptions: FormatOptions = {
    production: config.profile === 'production',
    logInternal: (err) => ports.log.error({ err }, 'GraphQL request failed')
  }
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

  const warmUp = (): WarmUpReport => {
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
    return { compiled: manifest.operations.length, ms: Math.round((performance.now() - started) * 10) / 10 }
  }

  const exchange = createHttpExchange({ config, pipeline, errorOptions, responseCache: ports.responseCache, schema })
  const streaming = createStreaming({ ports, schema, pipeline, errorOptions })
  return { ports, schema, pipeline, errorOptions, exchange, streaming, warmUp }
}
