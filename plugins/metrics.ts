// Prometheus metrics at GET /metrics (text exposition format), one registry per app instance:
// HTTP requests and latency by route, rate-limit rejections, SOAP faults, and the process defaults
// (CPU, memory, event loop lag, GC). The GraphQL GraphQL routes' own metrics (operations, error codes, open
// subscriptions) are registered on this registry by app/graphql/metrics.ts: nothing here knows GraphQL.
// Scrape each instance directly: the load balancer does not expose /metrics.
// Where they are served (METRICS_PORT): on a port of their own (Prometheus's convention) when it is set;
// on the API port in development when it is not; nowhere in production when it is not (or is 0). The
// API port of a production instance never serves them: operation names and error rates are not public.
import { createServer } from 'node:http'
import fp from 'fastify-plugin'
import { Counter, Registry, collectDefaultMetrics } from 'prom-client'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { droppedLogLines } from './logging.ts'
import { appendRouteHook } from './route-hooks.ts'
import { connectionCaps, guardListener } from '../app/core/descriptors.ts'
import { Tally } from '../app/core/tally.ts'

declare module 'fastify' {
  interface FastifyInstance {
    metricsRegistry: Registry
  }
}

const SOAP_ROUTE = /^\/v\d+\/[A-Za-z]+Service$/

/** Whether the reply is a server-sent event stream (its content type as the SSE transport sets it). */
function isEventStream (reply: FastifyReply): boolean {
  const type = reply.getHeader('content-type')
  return typeof type === 'string' && type.startsWith('text/event-stream')
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
  const rejections = new Tally(['route'])
  new Counter({
    name: 'rate_limit_rejections_total',
    help: 'Requests refused with HTTP 429 (request or cost-unit budget exhausted), by route',
    labelNames: ['route'] as const,
    registers: [registry],
    collect () { rejections.flushInto(this) }
  })
  let droppedTold = 0
  new Counter({
    name: 'log_lines_dropped_total',
    help: 'Log lines dropped because standard output was not read while the lines waiting for it reached their bound',
    registers: [registry],
    collect () {
      const dropped = droppedLogLines()
      this.inc(dropped - droppedTold)
      droppedTold = dropped
    }
  })
  const faults = new Tally(['route', 'status_code'])
  new Counter({
    name: 'soap_faults_total',
    help: 'SOAP responses carrying a fault (HTTP status >= 400), by route and status code',
    labelNames: ['route', 'status_code'] as const,
    registers: [registry],
    collect () { faults.flushInto(this) }
  })
  // Hooks here are synchronous (callback style): no promise per request for bookkeeping. They are
  // added to each route as it is declared, with the route's pattern in hand: Fastify's
  // request.routeOptions builds a new object on every read.

  /** Counts one answered request of `route` (a route pattern, or '(unmatched)'). */
  const answered = (
    route: string,
    durations: Map<string, Series>,
    request: FastifyRequest,
    reply: FastifyReply
  ) => {
    const status = reply.statusCode
    requests.of(request.method, route, status).count++
    // An event stream (an SSE subscription) lasts as long as the subscription: counted, not timed, or
    // one subscriber would make the route's p99 (and its alert) a subscription's lifetime.
    if (!isEventStream(reply)) {
      let series = durations.get(request.method)
      if (!series) durations.set(request.method, (series = httpDuration.series({ method: request.method, route })))
      httpDuration.observe(series, reply.elapsedTime / 1000)
    }
    if (status === 429) rejections.of(route).count++
    if (status >= 400 && SOAP_ROUTE.test(route)) faults.of(route, status).count++
  }

  app.addHook('onRoute', (route) => {
    const durations = new Map<string, Series>()
    route.onResponse = appendRouteHook(
      route.onResponse,
      (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
        answered(route.url, durations, request, reply)
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

  const port = app.config.server.metricsPort
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
    guardListener(metricsServer, connectionCaps(app.config.server.maxConnections, true).metrics, app.log, 'metrics')
    app.addHook('onReady', async () => {
      await new Promise<void>((resolve, reject) => {
        metricsServer.once('error', reject)
        metricsServer.listen(port, app.config.server.host, () => { metricsServer.off('error', reject); resolve() })
      })
      app.log.info({ port }, 'metrics served on their own port')
    })
    app.addHook('onClose', async () => {
      metricsServer.closeAllConnections()
      await new Promise((resolve) => metricsServer.close(resolve))
    })
  }
}, { name: 'metrics', dependencies: ['config'] })
