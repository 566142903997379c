// Load shedding: when the event loop lags (or utilisation, heap or RSS pass their configured
// thresholds) new requests are answered at once with 503 + Retry-After, in the GraphQL error shape,
// instead of queueing behind a stalled loop until every client times out. The load balancer sends
// idempotent requests elsewhere; other clients retry after the advertised delay.
// Liveness and metrics stay exempt: the process is alive, and operators need to see the pressure.
import fp from 'fastify-plugin'
import underPressure from '@fastify/under-pressure'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AppError } from '../app/errors.ts'

export const PRESSURE_MESSAGE = 'The service is overloaded; retry later'
const EXEMPT = new Set(['/health/live', '/metrics'])

export default fp(async function pressure (app: FastifyInstance) {
  const { pressure: limits } = app.config
  await app.register(underPressure, {
    maxEventLoopDelay: limits.maxEventLoopDelayMs,
    maxEventLoopUtilization: limits.maxEventLoopUtilization,
    // 'interval': utilisation over the last sample, not since start (the default), which never recovers quickly.
    eventLoopUtilizationMode: 'interval',
    maxHeapUsedBytes: limits.maxHeapUsedBytes,
    maxRssBytes: limits.maxRssBytes,
    sampleInterval: limits.sampleIntervalMs,
    retryAfter: limits.retryAfterSec,
    pressureHandler (request: FastifyRequest, reply: FastifyReply, type: string, value: number | undefined) {
      if (EXEMPT.has(request.url.split('?')[0]!)) return undefined // undefined: let the request through
      request.log.warn({ pressure: type, value }, 'shedding load')
      reply.code(503).header('retry-after', String(limits.retryAfterSec))
      // SOAP callers get a fault: the error goes to the SOAP routes' error handler.
      if (/xml/i.test(request.headers['content-type'] ?? '')) {
        return Promise.reject(new AppError('SERVICE_UNAVAILABLE', PRESSURE_MESSAGE, { retryAfterSec: limits.retryAfterSec }))
      }
      // A value returned here is sent as the response (the plugin's typings say void, its code sends it).
      return { errors: [{ message: PRESSURE_MESSAGE, extensions: { code: 'SERVICE_UNAVAILABLE', retryAfterSec: limits.retryAfterSec } }] } as unknown as void
    }
  })
}, { name: 'under-pressure', dependencies: ['config'] })
