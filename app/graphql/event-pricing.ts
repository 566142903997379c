// What a subscription event costs, and who pays it: each subscriber's price is spent from the budget of
// whoever holds it (the user, or the client address when anonymous), one spend per distinct payer per
// event. The operations the streaming carriers start (operations.ts: one subscription's event) and the
// fan-out hub (fanout.ts: one event for every subscriber of a topic) both use it.
import { callerKey, type Caller } from '../core/domain/context.ts'
import type { BudgetSpending, CostUnitsLeft } from '../core/limits/cost-report.ts'
/** Pays for one event of running subscriptions: the subscribers that could not be paid for. */
export type ChargeEvent = <M extends Payer>(subscribers: M[]) => Promise<{ refused: M[]; resetMs: number }>

/** Who pays for a subscriber's events, and how much each costs. */
export interface Payer {
  caller: Caller | null
  ip: string
  /** Cost units per event. */
  cost: number
}

/**
 * Spends the price of one event for each subscriber: one spend per distinct payer (the user, or the IP
 * when anonymous) with the summed cost. When a payer's window cannot cover all its subscribers, those
 * it still covers (in order) are paid and the rest refused. (The refused ones' units are counted too:
 * the window is exhausted by then anyway.) Returns the refused subscribers and when their window resets.
 */
export async function chargeEvent<M extends Payer> (
  spend: BudgetSpending['spendCostUnits'],
  members: Iterable<M>
): Promise<{ refused: M[]; resetMs: number }> {
  const payers = new Map<string, { first: M; total: number; members: M[] }>()
  for (const member of members) {
    const key = callerKey(member.caller, member.ip)
    const payer = payers.get(key)
    if (payer) {
      payer.total += member.cost
      payer.members.push(member)
    } else {
      payers.set(key, { first: member, total: member.cost, members: [member] })
    }
  }
  const refused: M[] = []
  let resetMs = 0
  const settle = ({ total, members }: { total: number; members: M[] }, spent: CostUnitsLeft) => {
    if (spent.remaining >= 0) return
    resetMs = Math.max(resetMs, spent.resetMs)
    let affordable = spent.remaining + total
    for (const member of members) {
      affordable -= member.cost
      if (affordable < 0) refused.push(member)
    }
  }
  // In-process counters answer at once: no promise per payer (an event may have thousands of payers).
  const waiting: Promise<void>[] = []
  for (const payer of payers.values()) {
    const spent = spend(payer.first.caller, payer.first.ip, payer.total)
    if (spent instanceof Promise) waiting.push(spent.then((left) => settle(payer, left)))
    else settle(payer, spent)
  }
  if (waiting.length > 0) await Promise.all(waiting)
  return { refused, resetMs }
}
