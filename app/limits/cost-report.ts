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
