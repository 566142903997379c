// What operations cost and what callers may spend: the price of a write, the most one operation may cost,
// and the requests and cost units each caller may spend per window (GraphQL and SOAP alike).
import { area } from './area.ts'

export const budgets = area({
  key: 'budgets',
  title: 'Budgets: what callers may spend',
  about: 'An operation\'s cost is priced from its selection (a write adds `MUTATION_COST`), GraphQL and SOAP alike. One operation may cost at most its caller\'s `COST_BUDGET_*`; each caller (a user, or the client address when anonymous) may spend `RATE_LIMIT_REQUESTS` requests and `RATE_LIMIT_COST` cost units per window.',
  settings: {
    MUTATION_COST: { type: 'integer', minimum: 1, default: 10, doc: 'each mutation field\'s cost on top of its selection (writes are dearer than reads)' },
    COST_BUDGET_ANONYMOUS: { type: 'integer', minimum: 1, default: 1000, doc: 'most one operation may cost for an anonymous caller (`COST_LIMIT_EXCEEDED`)' },
    COST_BUDGET_USER: { type: 'integer', minimum: 1, default: 10000, doc: 'the same for role USER' },
    COST_BUDGET_ADMIN: { type: 'integer', minimum: 1, default: 100000, doc: 'the same for role ADMIN' },
    COST_BUDGET_SERVICE: { type: 'integer', minimum: 1, default: 100000, doc: 'the same for role SERVICE (partners)' },
    RATE_LIMIT_WINDOW_MS: { type: 'integer', minimum: 1000, default: 60000, doc: 'the rate window of both budgets below' },
    RATE_LIMIT_REQUESTS: { type: 'integer', minimum: 1, default: 100, doc: 'requests per caller (user, or client IP when anonymous) per window, GraphQL and SOAP (`RATE_LIMITED`)' },
    RATE_LIMIT_COST: { type: 'integer', minimum: 1, default: 100000, doc: 'cost units per caller per window (`RATE_LIMITED`)' },
    RATE_LIMIT_COUNTING: { type: 'string', enum: ['leases', 'per-request'], default: 'leases', doc: 'how instances share both budgets through Redis: `leases` (each instance takes a share of a caller\'s window ahead and spends it with no round trip; never more than the limit across the fleet) or `per-request` (a Redis round trip for every request and operation); unused without Redis ([guarantees](guarantees.md#budgets-across-instances))' }
  },
  read: (e) => ({
    /** Cost of each mutation field (or SOAP write) on top of its selection. */
    mutationCost: e.MUTATION_COST,
    /** The most one operation may cost, by caller. */
    maxOperationCost: {
      anonymous: e.COST_BUDGET_ANONYMOUS,
      USER: e.COST_BUDGET_USER,
      ADMIN: e.COST_BUDGET_ADMIN,
      SERVICE: e.COST_BUDGET_SERVICE
    },
    windowMs: e.RATE_LIMIT_WINDOW_MS,
    requestsPerWindow: e.RATE_LIMIT_REQUESTS,
    costUnitsPerWindow: e.RATE_LIMIT_COST,
    /**
     * How instances share the windows through Redis: `leases` (each takes a share of a caller's window ahead,
     * spent with no round trip) or `per-request` (a round trip for every request). Unused without Redis.
     */
    counting: e.RATE_LIMIT_COUNTING
  })
})
