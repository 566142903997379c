// Load shedding: when the event loop lags (or utilisation, heap or RSS pass their configured
// thresholds) new requests are answered at once with 503 + Retry-After, in the GraphQL error shape,
// instead of queueing behind a stalled loop until every client times out. The load balancer sends
// idempotent requests elsewhere; other clients retry after the advertised delay.
// Liveness and metrics stay exempt: the process is alive, and operators need to see the pressure.
//
// The sampling is our own rather than @fastify/under-pressure's: that plugin (9.2.0, the latest) reads
// process.memoryUsage() on a timer with no guard and no option to replace it, and Node reads RSS from
// /proc/self/stat, which throws EMFILE when descriptors run out: an uncaught exception on a timer,
// which ended the process. Here the heap comes from V8 (no file) and RSS is read with a guard that
// keeps the last value; the thresholds and answers are the ones the plugin gave.
import fp from 'fastify-plugin'
import { getHeapStatistics } from 'node:v8'
import { monitorEventLoopDelay, performance, type EventLoopUtilization } from 'node:perf_hooks'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AppError } from '../app/core/errors.ts'

export const PRESSURE_MESSAGE = 'The service is overloaded; retry later'
const EXEMPT = new Set(['/health/live', '/metrics'])
/** The delay histogram's resolution (ms): a loop that is never late still measures about this much. */
const RESOLUTION_MS = 10

export default fp(async function pressure (app: FastifyInstance) {
  const { loadShedding: limits } = app.config
  const checks: [type: string, max: number, value: () => number][] = []
  let eventLoopDelay = 0
  let heapUsed = 0
  let rss = 0
  let utilization = 0
  if (limits.maxEventLoopDelayMs > 0) checks.push(['eventLoopDelay', limits.maxEventLoopDelayMs, () => eventLoopDelay])
  if (limits.maxHeapUsedBytes > 0) checks.push(['heapUsedBytes', limits.maxHeapUsedBytes, () => heapUsed])
  if (limits.maxRssBytes > 0) checks.push(['rssBytes', limits.maxRssBytes, () => rss])
  if (limits.maxEventLoopUtilization > 0) {
    checks.push(['eventLoopUtilization', limits.maxEventLoopUtilization, () => utilization])
  }
  if (checks.length === 0) return

  const histogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS })
  histogram.enable()
  let elu: EventLoopUtilization = performance.eventLoopUtilization()
  const sample = () => {
    // No sample in a whole interval means the loop never turned: as late as can be.
    eventLoopDelay = Number.isNaN(histogram.mean) ? Infinity : Math.max(0, histogram.mean / 1e6 - RESOLUTION_MS)
    histogram.reset()
    // Utilisation over the last interval, not since start (which never recovers quickly).
    const now = performance.eventLoopUtilization()
    utilization = performance.eventLoopUtilization(now, elu).utilization
    elu = now
    heapUsed = getHeapStatistics().used_heap_size
    if (limits.maxRssBytes > 0) {
      try { rss = process.memoryUsage.rss() } catch { /* EMFILE: keep the last value until descriptors free up */ }
    }
  }
  const timer = setInterval(sample, limits.sampleIntervalMs)
  timer.unref()
  app.addHook('onClose', async () => {
    clearInterval(timer)
    histogram.disable()
  })

  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    const exceeded = checks.find(([, max, value]) => value() > max)
    if (!exceeded || EXEMPT.has(request.url.split('?')[0]!)) return done()
    request.log.warn({ pressure: exceeded[0], value: exceeded[2]() }, 'shedding load')
    reply.code(503).header('retry-after', String(limits.retryAfterSec))
    // SOAP callers get a fault: the error goes to the SOAP routes' error handler.
    if (/xml/i.test(request.headers['content-type'] ?? '')) {
      return done(new AppError('SERVICE_UNAVAILABLE', PRESSURE_MESSAGE, { retryAfterSec: limits.retryAfterSec }))
    }
    reply.send({
      errors: [
        { message: PRESSURE_MESSAGE, extensions: { code: 'SERVICE_UNAVAILABLE', retryAfterSec: limits.retryAfterSec } }
      ]
    })
  })
}, { name: 'under-pressure', dependencies: ['config'] })
