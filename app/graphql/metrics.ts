// The GraphQL routes' metrics, on the app's registry (plugins/metrics.ts): operations by name, type and
// outcome, error codes, open subscriptions and WebSockets. The composition root (app/app.ts) hands the
// routes `answered` as one of its instruments, and these gauges read the GraphQL inspection surface when
// scraped: the metrics plugin itself knows nothing of GraphQL.
import { Counter, Gauge, type Registry } from 'prom-client'
import { Tally } from '../core/tally.ts'

/** Operation names come from clients: bounded, so a client can't grow the label set without limit. */
const MAX_OPERATION_NAMES = 200
const OPERATION_NAME = /^[_A-Za-z][_0-9A-Za-z]{0,63}$/

interface OperationSeen { name: string | null; type: string }

/**
 * For documents that never reached execution (parse or validation failures): the name of a leading
 * named operation, read without parsing. Anything else counts as anonymous.
 */
const LEADING_OPERATION = /^(?:\s|,|#[^\n]*\n)*(query|mutation|subscription)\s+([_A-Za-z][_0-9A-Za-z]*)/
function leadingOperation (source: unknown): OperationSeen | null {
  if (typeof source !== 'string') return null
  const match = LEADING_OPERATION.exec(source.slice(0, 1000))
  return match ? { name: match[2]!, type: match[1]! } : null
}

/** Open subscriptions and sockets on this instance. */
export interface SubscriptionCounts {
  webSockets: number
  /** Subscriptions delivering events over WebSocket. */
  webSocketSubscriptions: number
  eventStreams: number
}

/** Counts one answered exchange: its answer (or batch) as sent, the operation it executed, its parameters. */
export type CountAnswer = (
  answer: unknown,
  executed: OperationSeen | null,
  params: { query?: unknown; operationName?: unknown } | null
) => void

/** What the metrics read from the GraphQL routes when scraped (its inspection surface). */
export interface GraphQLReadings {
  subscriptionStats (): SubscriptionCounts
  /** Every active app deployment, with the requests served for it since the last call. */
  takeDeploymentUsage (): { name: string; version: string; requests: number }[]
  /** Whether the response cache answers now (and where it keeps answers); null when there is none. */
  responseCacheStats (): { serving: boolean; bytes: number | null } | null
}

/* eslint-disable no-new -- a prom-client metric registers itself in `registers` when constructed */
export function graphqlMetrics (registry: Registry, inspection: () => GraphQLReadings): CountAnswer {
  const subscriptionStats = () => inspection().subscriptionStats()
  const operations = new Tally(['operation_name', 'operation_type', 'outcome'])
  new Counter({
    name: 'graphql_operations_total',
    help: 'GraphQL operations over HTTP by operation name, type and outcome (success, partial: data with errors, error: no data)',
    labelNames: ['operation_name', 'operation_type', 'outcome'] as const,
    registers: [registry],
    collect () { operations.flushInto(this) }
  })
  const errorCodes = new Tally(['code'])
  new Counter({
    name: 'graphql_errors_total',
    help: 'Errors in GraphQL responses, by extensions.code',
    labelNames: ['code'] as const,
    registers: [registry],
    collect () { errorCodes.flushInto(this) }
  })
  new Gauge({
    name: 'graphql_open_subscriptions',
    help: 'GraphQL subscriptions currently open on this instance, by transport (ws, sse)',
    labelNames: ['transport'] as const,
    registers: [registry],
    collect () {
      const stats = subscriptionStats()
      this.set({ transport: 'ws' }, stats.webSocketSubscriptions)
      this.set({ transport: 'sse' }, stats.eventStreams)
    }
  })
  new Gauge({
    name: 'graphql_websocket_connections',
    help: 'Open GraphQL WebSocket connections on this instance',
    registers: [registry],
    collect () { this.set(subscriptionStats().webSockets) }
  })

  // Whether the response cache answers. It stops (every read executes, nothing is kept) while changes made
  // beside the service cannot be seen (the store's change feed is down: PostgreSQL's LISTEN connection
  // lost) or applied (Redis unreachable): app/core/cache/store-changes.ts. No series without a cache, so the
  // alert on it (deploy/prometheus/alerts.yml) never fires for an instance that has none.
  new Gauge({
    name: 'graphql_response_cache_serving',
    help: '1 while the response cache answers; 0 while it is bypassed because changes made beside the service cannot be seen (the change feed is down) or applied',
    labelNames: ['store'] as const,
    registers: [registry],
    collect () {
      const stats = inspection().responseCacheStats()
      if (stats) this.set({ store: stats.bytes === null ? 'redis' : 'memory' }, stats.serving ? 1 : 0)
    }
  })

  // One series per active app deployment (0 until used), dropped when it is retired: the label set is
  // bounded by what administrators publish, not by what clients send.
  let deploymentSeries = new Map<string, { app: string; version: string }>()
  new Counter({
    name: 'graphql_app_deployment_requests_total',
    help: 'Persisted operations served for each active app deployment (app name and version, as published)',
    labelNames: ['app', 'version'] as const,
    registers: [registry],
    collect () {
      const active = new Map<string, { app: string; version: string }>()
      for (const { name, version, requests } of inspection().takeDeploymentUsage()) {
        const labels = { app: name, version }
        active.set(`${name} ${version}`, labels)
        this.inc(labels, requests)
      }
      for (const [key, labels] of deploymentSeries) if (!active.has(key)) this.remove(labels)
      deploymentSeries = active
    }
  })

  const knownNames = new Set<string>()
  const nameLabel = (name: string | null | undefined): string => {
    if (!name) return '(anonymous)'
    if (knownNames.has(name)) return name
    if (!OPERATION_NAME.test(name)) return '(invalid)'
    if (knownNames.size >= MAX_OPERATION_NAMES) return '(other)'
    knownNames.add(name)
    return name
  }

  // The executed operation is the one the GraphQL pipeline admitted (persisted queries carry no
  // operationName); a request refused before that counts under the name its text or operationName gives.
  return (answer, executed, params) => {
    const body = answer as { data?: unknown; errors?: { extensions?: { code?: unknown } }[] } | null
    if (body === null || typeof body !== 'object') return
    const errors = Array.isArray(body.errors) ? body.errors : []
    const outcome = errors.length === 0 ? 'success' : body.data != null ? 'partial' : 'error'
    if (executed) {
      operations.of(nameLabel(executed.name), executed.type, outcome).count++
    } else {
      const operation = leadingOperation(params?.query)
      const requestedName = typeof params?.operationName === 'string' ? params.operationName : null
      operations.of(nameLabel(operation?.name ?? requestedName), operation?.type ?? 'unknown', outcome).count++
    }
    for (const error of errors) {
      const code = error.extensions?.code
      errorCodes.of(typeof code === 'string' && /^[A-Z_]{1,64}$/.test(code) ? code : 'UNKNOWN').count++
    }
  }
}
