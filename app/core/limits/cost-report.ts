import type { Caller } from '../domain/context.ts'

/** What an operation reports about its price (sent as `extensions.cost`): the budgets' answer to a charge. */
export interface CostReport {
  /** The operation's computed cost. */
  requested: number
  /** The most one operation may cost for this caller's class. */
  budget: number
  /** Cost units left in the caller's current rate-limit window, after this operation. */
  remaining: number
}

/** What a spend of cost units leaves of the caller's window (negative when over), and when the window resets. */
export interface CostUnitsLeft { remaining: number; resetMs: number }

/**
 * What a request spends of its caller's budgets: declared once, implemented by plugins/rate-limit.ts,
 * required by every transport that spends them (the GraphQL pipeline and its dependencies).
 */
export interface BudgetSpending {
  /** Spends one request from the caller's request budget; throws RATE_LIMITED when it is exhausted. */
  spendRequest (caller: Caller | null, ip: string): Promise<void>
  /**
   * What every transport calls once an operation is priced: refuses it over the caller's per-operation
   * budget (COST_LIMIT_EXCEEDED), spends its cost units, refuses it when the window is exhausted
   * (RATE_LIMITED). Returns the price report sent to the caller: at once from in-process counters or a
   * share of the window this instance holds (no promise on the request's path), as a promise from Redis.
   */
  chargeCost (caller: Caller | null, ip: string, cost: number): CostReport | Promise<CostReport>
  /** Spends `units` of the caller's window: what is left (negative when over) and when the window resets. */
  spendCostUnits (caller: Caller | null, ip: string, units: number): CostUnitsLeft | Promise<CostUnitsLeft>
}
