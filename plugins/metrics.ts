// Prometheus metrics at GET /metrics (text exposition format), one registry per app instance:
// HTTP requests and latency by route, GraphQL operations by name and outcome, GraphQL error codes,
// rate-limit rejections, SOAP faults, open subscriptions, and the process defaults (CPU, memory,
// event loop lag, GC). Scrape each instance directly: the load balancer does not expose /metrics.
// Where they are served (METRICS_PORT): on a port of their own (Prometheus's convention) when it is set;
// on the API port in development when it is not; nowhere in production when it is not (or is 0). The
// API port of a production instance never serves them: operation names and error rates are not public.
import { createServer } from 'node:http'
import fp from 'fastify-plugin'
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { appendRouteHook } from '../app/route-hooks.ts'
import { connectionCaps, guardListener } from '../app/descriptors.ts'

declare module 'fastify' {
  interface FastifyInstance {
    metricsRegistry: Registry
  }
  interface FastifyRequest {
    /**
     * The GraphQL answer (or batch of answers) sent, as an object: its
     * outcome and error codes are counted once the response is sent.
     */
    graphqlAnswer: unknown
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
 * Counts for one counter, kept in plain records on the hot path and added to the prom-client counter
 * when it is scraped: prom-client validates and hashes a label set on every inc (its labelled children
 * only bind the values), which cost more per request than all the rest of this bookkeeping. Records
 * are found through nested Maps by label value, so counting builds no string.
 */
class Tally {
  readonly #labelNames: readonly string[]
  readonly #index = new Map<unknown, unknown>()
  readonly #records: { labels: Record<string, string>; count: number }[] = []

  constructor (labelNames: readonly string[]) {
    this.#labelNames = labelNames
  }

  /** The record of one label combination (values in labelNames order); callers add to its count. */
  of (...values: (string | number)[]): { count: number } {
    let node = this.#index
    for (let i = 0; i < values.length - 1; i++) {
      let next = node.get(values[i]) as Map<unknown, unknown> | undefined
      if (!next) node.set(values[i], next = new Map())
      node = next
    }
    const last = values[values.length - 1]
    let record = node.get(last) as { labels: Record<string, string>; count: number } | undefined
    if (!record) {
      record = { labels: Object.fromEntries(this.#labelNames.map((name, i) => [name, String(values[i])])), count: 0 }
      node.set(last, record)
      this.#records.push(record)
    }
    return record
  }

  /** Adds what was counted since the last scrape to `counter` (its collect function). */
  flushInto (counter: Counter<string>): void {
    for (const record of this.#records) {
      if (record.count === 0) continue
      counter.inc(record.labels, record.count)
      record.count = 0
    }
  }
}

/** A label value in the text exposition format: backslash, double quote and line feed escaped. */
const labelValue = (value: string) => value.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`))

/** One label combination of a histogram: counts per bucket (not cumulative; the last is +Inf), sum and count. */
interface Series { labels: string; counts: number[]; sum: number; count: number }

/**
 * A histogram kept in plain arrays and written in the text exposition format when scraped. Not
 * prom-client's Histogram: it validates and hashes the label set on every observation (its labelled
 * children only bind the values), about 2 µs a request here, and it has no documented way to add
 * counts gathered elsewhere. A series is found once per route and method, then observing is a few
 * comparisons and additions.
 */
class LatencyHistogram {
  readonly #header: string
  readonly #name: string
  readonly #bounds: readonly number[]
  readonly #series: Series[] = []

  constructor (name: string, help: string, bounds: readonly number[]) {
    this.#name = name
    this.#header = `# HELP ${name} ${help}\n# TYPE ${name} histogram\n`
    this.#bounds = bounds
  }

  /** The series of one label combination (names and values in order), made on first use. */
  series (labels: Record<string, string>): Series {
    const text = Object.entries(labels).map(([k, v]) => `${k}="${labelValue(v)}"`).join(',')
    const series = { labels: text, counts: new Array<number>(this.#bounds.length + 1).fill(0), sum: 0, count: 0 }
    this.#series.push(series)
    return series
  }

  observe (series: Series, value: number): void {
    const bounds = this.#bounds
    let i = 0
    while (i < bounds.length && value > bounds[i]!) i++
    series.counts[i]!++
    series.sum += value
    series.count++
  }

  /** The exposition text, as prom-client writes a histogram: cumulative buckets with `le` first, then sum and count. */
  render (): string {
    if (this.#series.length === 0) return ''
    let text = this.#header
    for (const { labels, counts, sum, count } of this.#series) {
      let cumulative = 0
      for (let i = 0; i <= this.#bounds.length; i++) {
        cumulative += counts[i]!
        const le = i < this.#bounds.length ? String(this.#bounds[i]) : '+Inf'
        text += `${this.#name}_bucket{le="${le}",${labels}} ${cumulative}\n`
      }
      text += `${this.#name}_sum{${labels}} ${sum}\n${this.#name}_count{${labels}} ${count}\n`
    }
    return text
  }
}

/* eslint-disable no-new -- a prom-client metric registers itself in `registers` when constructed */
export default fp(async function metrics (app: FastifyInstance) {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })

  const requests = new Tally(['method', 'route', 'status_code'])
  new Counter({
    name: 'http_requests_total',
    help: 'HTTP requests answered, by method, route (the route pattern, not the URL) and status code',
    labelNames: ['method', 'route', 'status_code'] as const,
    registers: [registry],
    collect () { requests.flushInto(this) }
  })
  const httpDuration = new LatencyHistogram(
    'http_request_duration_seconds',
    'Time from receiving a request to sending the last byte of its response',
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
  )
  /** What a scrape answers: prom-client's registry, then the histogram kept here. */
  const exposition = async () => (await registry.metrics()) + httpDuration.render()
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
  const rejections = new Tally(['route'])
  new Counter({
    name: 'rate_limit_rejections_total',
    help: 'Requests refused with HTTP 429 (request or cost-unit budget exhausted), by route',
    labelNames: ['route'] as const,
    registers: [registry],
    collect () { rejections.flushInto(this) }
  })
  const faults = new Tally(['route', 'status_code'])
  new Counter({
    name: 'soap_faults_total',
    help: 'SOAP responses carrying a fault (HTTP status >= 400), by route and status code',
    labelNames: ['route', 'status_code'] as const,
    registers: [registry],
    collect () { faults.flushInto(this) }
  })
  // Read at scrape time from the GraphQL room's inspection surface (registered after this plugin).
  const subscriptionStats = () => (app.hasDecorator('graphqlRoom') ? app.graphqlRoom.subscriptionStats() : null)
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
    if (knownNames.has(name)) return name
    if (!OPERATION_NAME.test(name)) return '(invalid)'
    if (knownNames.size >= MAX_OPERATION_NAMES) return '(other)'
    knownNames.add(name)
    return name
  }

  // Hooks here are synchronous (callback style): no promise per request for bookkeeping. They are
  // added to each route as it is declared, with the route's pattern in hand: Fastify's
  // request.routeOptions builds a new object on every read. The executed operation is the one
  // the GraphQL pipeline admitted (routes/graphql/http.ts; persisted queries carry no operationName).

  // GraphQL outcomes are read from the answer object the route (or the error handler) kept on the
  // request, once the response is sent: no hook in the way of the response.
  const countGraphQLAnswer = (request: FastifyRequest) => {
    const body = request.graphqlAnswer as { data?: unknown; errors?: { extensions?: { code?: unknown } }[] } | null
    if (body === null || typeof body !== 'object') return
    const errors = Array.isArray(body.errors) ? body.errors : []
    const outcome = errors.length === 0 ? 'success' : body.data != null ? 'partial' : 'error'
    const executed = request.graphqlOperation
    if (executed) {
      operations.of(nameLabel(executed.name), executed.type, outcome).count++
    } else {
      const params = (request.method === 'GET' ? request.query : request.body) as {
        operationName?: unknown
        query?: unknown
      } | null
      const operation = leadingOperation(params?.query)
      const requestedName = typeof params?.operationName === 'string' ? params.operationName : null
      operations.of(nameLabel(operation?.name ?? requestedName), operation?.type ?? 'unknown', outcome).count++
    }
    for (const error of errors) {
      const code = error.extensions?.code
      errorCodes.of(typeof code === 'string' && /^[A-Z_]{1,64}$/.test(code) ? code : 'UNKNOWN').count++
    }
  }

  /** Counts one answered request of `route` (a route pattern, or '(unmatched)'). */
  const answered = (
    route: string,
    durations: Map<string, Series>,
    request: FastifyRequest,
    reply: FastifyReply
  ) => {
    const status = reply.statusCode
    requests.of(request.method, route, status).count++
    let series = durations.get(request.method)
    if (!series) durations.set(request.method, (series = httpDuration.series({ method: request.method, route })))
    httpDuration.observe(series, reply.elapsedTime / 1000)
    if (status === 429) rejections.of(route).count++
    if (status >= 400 && SOAP_ROUTE.test(route)) faults.of(route, status).count++
  }

  app.addHook('onRoute', (route) => {
    const durations = new Map<string, Series>()
    const graphql = route.url === GRAPHQL_ROUTE
    route.onResponse = appendRouteHook(
      route.onResponse,
      (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
        answered(route.url, durations, request, reply)
        if (graphql) countGraphQLAnswer(request)
        done()
      }
    )
  })
  // Unmatched URLs (no route, so none of the hooks above) share one label: raw URLs would make the label set unbounded.
  const unmatchedDurations = new Map<string, Series>()
  app.addHook('onResponse', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    if (request.is404) answered('(unmatched)', unmatchedDurations, request, reply)
    done()
  })

  app.decorate('metricsRegistry', registry)
  app.decorateRequest('graphqlAnswer', null)

  const port = app.config.metricsPort
  if (port === null) {
    app.get('/metrics', { config: { rateLimit: false } }, async (_request, reply) => {
      return reply.type(registry.contentType).send(await exposition())
    })
  } else if (port > 0) {
    // A plain HTTP server on HOST:METRICS_PORT with GET /metrics only, opened and closed with the app.
    const metricsServer = createServer((request, response) => {
      if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
        response.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Not found: GET /metrics\n')
        return
      }
      exposition().then(
        (text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text),
        (err: unknown) => { app.log.error({ err }, 'metrics collection failed'); response.writeHead(500).end() })
    })
    guardListener(metricsServer, connectionCaps(app.config.maxConnections, true).metrics, app.log, 'metrics')
    app.addHook('onReady', async () => {
      await new Promise<void>((resolve, reject) => {
        metricsServer.once('error', reject)
        metricsServer.listen(port, app.config.host, () => { metricsServer.off('error', reject); resolve() })
      })
      app.log.info({ port }, 'metrics served on their own port')
    })
    app.addHook('onClose', async () => {
      metricsServer.closeAllConnections()
      await new Promise((resolve) => metricsServer.close(resolve))
    })
  }
}, { name: 'metrics', dependencies: ['config'] })
