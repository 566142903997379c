// Two budgets per caller per window, whichever is exhausted first blocks (HTTP 429, Retry-After,
// rate-limit headers, code RATE_LIMITED): requests (every API route including SOAP) and cost units
// (spent by each GraphQL operation once its cost is known). The caller is the user when
// authenticated, the client IP otherwise (X-Forwarded-For only from trusted proxies: Fastify's
// trustProxy). Counters are shared through Redis when configured, by leases or per request
// (RATE_LIMIT_COUNTING: app/core/limits/window-counters.ts).
//
// The request budget is our own route hook, not @fastify/rate-limit: the library awaits four promises
// per request (key, allow list, store, the hook itself) even when its store answers at once, which
// measured about a tenth of a GraphQL request's CPU; this hook answers synchronously from in-process
// counters and waits only for Redis. Same headers (X-RateLimit-Limit/-Remaining/-Reset, Retry-After).
import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, onRequestHookHandler } from 'fastify'
import { callerKey, type Caller } from '../app/core/domain/context.ts'
import { AppError } from '../app/core/errors.ts'
import type { BudgetSpending, CostReport, CostUnitsLeft } from '../app/core/limits/cost-report.ts'
import { clientAddress } from '../app/core/peers.ts'
import { appendRouteHook } from './route-hooks.ts'
import { SharedCounters, leaseScript, localCounters, type Taken, type WindowCounters } from '../app/core/limits/window-counters.ts'

/**
 * The caller's budgets, for what the request hook does not cover: transports call these members through
 * the object at each call, so a test can replace one (to count or slow down spending) and be obeyed.
 */
export interface Budgets extends BudgetSpending {
  /** The window counters of both budgets (in-process, or shared through Redis: app/core/limits/window-counters.ts). */
  counters: WindowCounters
  /** Throws RATE_LIMITED when the caller's request budget is already exhausted; spends nothing. */
  checkRequestBudget (caller: Caller | null, ip: string): Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    budgets: Budgets
  }
  interface FastifyContextConfig {
    /** false: the route spends no request budget. */
    rateLimit?: false
  }
}

/** Routes that are not API calls: probes and scraping must keep working while a client is limited. */
const EXEMPT = /^\/(health\/|metrics$)/

type Budget = 'req' | 'cost'

/**
 * The counter of one budget for a caller: the user when authenticated, the client IP otherwise. A
 * user's keys are made once per remembered caller object (plugins/auth.ts), so a request hashes no new string.
 */
const userKeys = new WeakMap<Caller, Record<Budget, string>>()
function counterKey (budget: Budget, caller: Caller | null, ip: string): string {
  // One caller's two budgets in one hash slot (the braces), so that one script leases both on a cluster.
  if (!caller) return `{${callerKey(null, ip)}}:${budget}`
  let keys = userKeys.get(caller)
  if (!keys) {
    const key = callerKey(caller, ip)
    userKeys.set(caller, keys = { req: `{${key}}:req`, cost: `{${key}}:cost` })
  }
  return keys[budget]
}

export default fp(async function rateLimits (app: FastifyInstance) {
  const settings = app.config.budgets
  let lastWarning = 0
  const counters: WindowCounters = app.redis.shared('budgets', (redis) =>
    new SharedCounters(leaseScript(redis.client, redis.key('rl:')), {
      counting: settings.counting,
      onFallback (err) {
        // One line per window at most: an outage must not flood the logs.
        if (Date.now() - lastWarning > settings.windowMs) {
          lastWarning = Date.now()
          app.log.warn({ err: (err as Error).message }, 'rate-limit counters unavailable in Redis; enforcing per instance')
        }
      }
    }), localCounters)

  const max = settings.requestsPerWindow
  const windowSec = Math.round(settings.windowMs / 1000)
  /** Takes `amount` requests of the caller's budget (0: would one more be admitted?). */
  // The cost budget is leased alongside the request budget when this instance holds none of it: the
  // request's operation will charge it next.
  const takeRequests = (caller: Caller | null, ip: string, amount = 1): Taken | Promise<Taken> =>
    counters.take(counterKey('req', caller, ip), amount, max, settings.windowMs,
      { key: counterKey('cost', caller, ip), limit: settings.costUnitsPerWindow })
  const overBudget = ({ admitted, resetMs }: Taken): AppError | undefined => {
    if (admitted) return undefined
    const resetSec = Math.ceil(resetMs / 1000)
    return new AppError(
      'RATE_LIMITED',
      `Rate limit exceeded: at most ${max} requests per ${windowSec} s; retry in ${resetSec} s`,
      { retryAfter: resetSec }
    )
  }
  /** Sets the budget headers; the error to answer with when the request is over the budget. */
  const judge = (reply: FastifyReply, taken: Taken): AppError | undefined => {
    const resetSec = Math.ceil(taken.resetMs / 1000)
    reply.header('x-ratelimit-limit', max)
    reply.header('x-ratelimit-remaining', taken.remaining)
    reply.header('x-ratelimit-reset', resetSec)
    const refused = overBudget(taken)
    if (refused) reply.header('retry-after', resetSec)
    return refused
  }
  const requestBudget: onRequestHookHandler = (request, reply, done) => {
    const taken = takeRequests(request.caller, clientAddress(request))
    if (!(taken instanceof Promise)) return done(judge(reply, taken))
    taken.then((c) => done(judge(reply, c)), (err: Error) => done(err))
  }
  // Appended to each route's own onRequest hooks, so it runs after the route has identified the caller.
  app.addHook('onRoute', (route) => {
    if (route.config?.rateLimit === false || EXEMPT.test(route.url)) return
    route.onRequest = appendRouteHook(route.onRequest, requestBudget)
  })

  const costRefusal = (requested: number, budget: number, { admitted, remaining, resetMs }: Taken): CostReport => {
    if (!admitted) {
      const retryAfter = Math.ceil(resetMs / 1000)
      throw new AppError(
        'RATE_LIMITED',
        `Cost rate limit exceeded: at most ${settings.costUnitsPerWindow} cost units per ${windowSec} s; retry in ${retryAfter} s`,
        { cost: requested, retryAfter }
      )
    }
    return { requested, budget, remaining }
  }
  const unitsLeft = ({ remaining, resetMs }: Taken): CostUnitsLeft => ({ remaining, resetMs })
  const budgets: Budgets = {
    counters,
    // The same budget for what arrives without a request of its own (each WebSocket operation).
    async spendRequest (caller, ip) {
      const refused = overBudget(await takeRequests(caller, ip))
      if (refused) throw refused
    },
    // Taking 0 spends nothing and says whether one more request would be admitted. (SOAP asks before work
    // that it spends on the client address only afterwards, when the message authenticated nobody.)
    async checkRequestBudget (caller, ip) {
      const refused = overBudget(await takeRequests(caller, ip, 0))
      if (refused) throw refused
    },
    spendCostUnits (caller, ip, cost) {
      const spent = counters.spend(counterKey('cost', caller, ip), cost, settings.costUnitsPerWindow, settings.windowMs)
      return spent instanceof Promise ? spent.then(unitsLeft) : unitsLeft(spent)
    },
    chargeCost (caller, ip, requested) {
      const budget = caller ? settings.maxOperationCost[caller.role] : settings.maxOperationCost.anonymous
      if (requested > budget) {
        throw new AppError(
          'COST_LIMIT_EXCEEDED',
          `Query cost ${requested} exceeds the budget of ${budget} for this caller`,
          { cost: requested, budget }
        )
      }
      // All or nothing: a refused operation spends no units.
      const taken = counters.take(counterKey('cost', caller, ip), requested, settings.costUnitsPerWindow, settings.windowMs)
      return taken instanceof Promise
        ? taken.then((t) => costRefusal(requested, budget, t))
        : costRefusal(requested, budget, taken)
    }
  }
  app.decorate('budgets', budgets)
}, { name: 'rate-limit', dependencies: ['config', 'redis'] })
