// Two budgets per caller per window, whichever is exhausted first blocks (HTTP 429, Retry-After,
// rate-limit headers, code RATE_LIMITED): requests (@fastify/rate-limit, every API route including
// SOAP) and cost units (spent by each GraphQL operation once its cost is known). The caller is the
// user when authenticated, the client IP otherwise (X-Forwarded-For only from trusted proxies:
// Fastify's trustProxy). Counters are shared through Redis when configured.
import fp from 'fastify-plugin'
import rateLimit from '@fastify/rate-limit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Caller } from '../app/domain/context.ts'
import { AppError } from '../app/errors.ts'
import { localCounters, redisCounters, sharedCounters, type WindowCounters } from '../app/limits/window-counters.ts'

declare module 'fastify' {
  interface FastifyInstance {
    rateCounters: WindowCounters
  }
}

export function rateKey (caller: Caller | null, ip: string): string {
  return caller ? `user:${caller.id}` : `ip:${ip}`
}

/** Paths that are not API calls: probes and scraping must keep working while a client is limited. */
const EXEMPT = /^\/(health\/|metrics(\?|$))/

export default fp(async function rateLimits (app: FastifyInstance) {
  const { limits } = app.config
  let lastWarning = 0
  const counters = app.redis
    ? sharedCounters(redisCounters(app.redis, app.redisKey('rl:')), localCounters(), (err) => {
      // One line per window at most: an outage must not flood the logs.
      if (Date.now() - lastWarning > limits.rateWindowMs) {
        lastWarning = Date.now()
        app.log.warn({ err: (err as Error).message }, 'rate-limit counters unavailable in Redis; enforcing per instance')
      }
    })
    : localCounters()
  app.decorate('rateCounters', counters)

  // @fastify/rate-limit drives the request budget through our counters (one store abstraction for both budgets).
  class CounterStore {
    incr (key: string, cb: (err: Error | null, res?: { current: number; ttl: number }) => void, timeWindow: number) {
      if (counters.incrNow) {
        const c = counters.incrNow(`req:${key}`, 1, timeWindow)
        return cb(null, { current: c.total, ttl: c.resetMs })
      }
      counters.incr(`req:${key}`, 1, timeWindow).then((c) => cb(null, { current: c.total, ttl: c.resetMs }), (err) => cb(err))
    }

    child () { return this }
  }

  await app.register(rateLimit, {
    global: true,
    max: limits.rateRequests,
    timeWindow: limits.rateWindowMs,
    store: CounterStore as never,
    keyGenerator: (request: FastifyRequest) => rateKey(request.caller, request.ip),
    allowList: (request: FastifyRequest) => EXEMPT.test(request.url),
    errorResponseBuilder: (_request, context) => {
      const error = new AppError('RATE_LIMITED', `Rate limit exceeded: at most ${context.max} requests per ${Math.round(limits.rateWindowMs / 1000)} s; retry in ${context.after}`)
      return Object.assign(error, { statusCode: 429 })
    }
  })

  app.decorate('spendCostUnits', async (caller: Caller | null, ip: string, cost: number) => {
    const { total, resetMs } = await counters.incr(`cost:${rateKey(caller, ip)}`, cost, limits.rateWindowMs)
    return { remaining: limits.rateCostUnits - total, resetMs }
  })
}, { name: 'rate-limit', dependencies: ['config', 'redis'] })
