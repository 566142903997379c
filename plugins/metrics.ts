// Prometheus metrics at GET /metrics (text exposition format), one registry per app instance:
// HTTP requests and latency by route, GraphQL operations by name and outcome, GraphQL error codes,
// rate-limit rejections, SOAP faults, open subscriptions, and the process defaults (CPU, memory,
// event loop lag, GC). Scrape each instance directly: the load balancer does not expose /metrics.
import fp from 'fastify-plugin'
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'

declare module 'fastify' {
  interface FastifyInstance {
    metricsRegistry: Registry
  }
}

const GRAPHQL_ROUTE = '/graphql'
const SOAP_ROUTE = /^\/v\d+\/[A-Za-z]+Service$/
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

/**
 * A labelled child per label combination, made once: prom-client hashes a labels object on every
 * inc/observe, which on the hot path costs more than the counting itself.
 */
function childrenOf<T> (make: (...labels: string[]) => T): (...labels: string[]) => T {
  const children = new Map<string, T>()
  return (...labels) => {
    const key = labels.join('\u0000')
    let child = children.get(key)
    if (!child) children.set(key, child = make(...labels))
    return child
  }
}

export default fp(async function metrics (app: FastifyInstance) {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })

  const httpRequests = new Counter({
    name: 'http_requests_total',
    help: 'HTTP requests answered, by method, route (the route pattern, not the URL) and status code',
    labelNames: ['method', 'route', 'status_code'] as const,
    registers: [registry]
  })
  const httpDuration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'Time from receiving a request to sending the last byte of its response',
    labelNames: ['method', 'route'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry]
  })
  const graphqlOperations = new Counter({
    name: 'graphql_operations_total',
    help: 'GraphQL operations over HTTP by operation name, type and outcome (success, partial: data with errors, error: no data)',
    labelNames: ['operation_name', 'operation_type', 'outcome'] as const,
    registers: [registry]
  })
  const graphqlErrors = new Counter({
    name: 'graphql_errors_total',
    help: 'Errors in GraphQL responses, by extensions.code',
    labelNames: ['code'] as const,
    registers: [registry]
  })
  const rateLimited = new Counter({
    name: 'rate_limit_rejections_total',
    help: 'Requests refused with HTTP 429 (request or cost-unit budget exhausted), by route',
    labelNames: ['route'] as const,
    registers: [registry]
  })
  const soapFaults = new Counter({
    name: 'soap_faults_total',
    help: 'SOAP responses carrying a fault (HTTP status >= 400), by route and status code',
    labelNames: ['route', 'status_code'] as const,
    registers: [registry]
  })
  // Read at scrape time from the subscriptions plugin (registered after this one).
  const subscriptionStats = () => (app.hasDecorator('subscriptionStats') ? app.subscriptionStats() : null)
  new Gauge({
    name: 'graphql_open_subscriptions',
    help: 'GraphQL subscriptions currently open on this instance, by transport (ws, sse)',
    labelNames: ['transport'] as const,
    registers: [registry],
    collect () {
      const stats = subscriptionStats()
      this.set({ transport: 'ws' }, stats?.webSocketSubscriptions ?? 0)
      this.set({ transport: 'sse' }, stats?.eventStreams ?? 0)
    }
  })
  new Gauge({
    name: 'graphql_websocket_connections',
    help: 'Open GraphQL WebSocket connections on this instance',
    registers: [registry],
    collect () { this.set(subscriptionStats()?.webSockets ?? 0) }
  })

  const knownNames = new Set<string>()
  const nameLabel = (name: string | null | undefined): string => {
    if (!name) return '(anonymous)'
    if (!OPERATION_NAME.test(name)) return '(invalid)'
    if (knownNames.has(name)) return name
    if (knownNames.size >= MAX_OPERATION_NAMES) return '(other)'
    knownNames.add(name)
    return name
  }

  const operationsBy = childrenOf((name, type, outcome) => graphqlOperations.labels(name!, type!, outcome!))
  const errorsBy = childrenOf((code) => graphqlErrors.labels(code!))
  const requestsBy = childrenOf((method, route, status) => httpRequests.labels(method!, route!, status!))
  const durationBy = childrenOf((method, route) => httpDuration.labels(method!, route!))

  // Hooks here are synchronous (callback style): no promise per request for bookkeeping. The executed
  // operation is the one plugins/graphql.ts selected (persisted queries carry no operationName).

  // GraphQL outcomes are read from the response object before it is serialised.
  app.addHook('preSerialization', (request: FastifyRequest, _reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void) => {
    if (request.routeOptions.url === GRAPHQL_ROUTE && payload !== null && typeof payload === 'object') {
      const body = payload as { data?: unknown; errors?: { extensions?: { code?: unknown } }[] }
      const errors = Array.isArray(body.errors) ? body.errors : []
      const outcome = errors.length === 0 ? 'success' : body.data != null ? 'partial' : 'error'
      const params = (request.method === 'GET' ? request.query : request.body) as { operationName?: unknown; query?: unknown } | null
      const executed = request.graphqlOperation
      const operation: OperationSeen | null = executed ? { name: executed.name?.value ?? null, type: executed.operation } : leadingOperation(params?.query)
      const requestedName = typeof params?.operationName === 'string' ? params.operationName : null
      operationsBy(nameLabel(operation?.name ?? requestedName), operation?.type ?? 'unknown', outcome).inc()
      for (const error of errors) {
        const code = error.extensions?.code
        errorsBy(typeof code === 'string' && /^[A-Z_]{1,64}$/.test(code) ? code : 'UNKNOWN').inc()
      }
    }
    done(null, payload)
  })

  app.addHook('onResponse', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    // Unmatched URLs share one label: raw URLs would make the label set unbounded.
    const route = request.routeOptions.url ?? '(unmatched)'
    const status = reply.statusCode
    requestsBy(request.method, route, String(status)).inc()
    durationBy(request.method, route).observe(reply.elapsedTime / 1000)
    if (status === 429) rateLimited.inc({ route })
    if (status >= 400 && SOAP_ROUTE.test(route)) soapFaults.inc({ route, status_code: String(status) })
    done()
  })

  app.decorate('metricsRegistry', registry)

  app.get('/metrics', { config: { rateLimit: false } }, async (_request, reply) => {
    return reply.type(registry.contentType).send(await registry.metrics())
  })
}, { name: 'metrics', dependencies: ['config'] })
