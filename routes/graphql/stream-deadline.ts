// When a long-lived carrier (a WebSocket connection, an event stream) must end, whichever comes first:
// - its token's `exp`: the identity it runs under is no longer valid (the client reconnects with a
//   fresh token);
// - its maximum lifetime (SUBSCRIBER_MAX_LIFETIME_MS), less up to a tenth drawn at random: anonymous
//   connections have no `exp`, and a connection that lives for ever stays on the instance it first
//   reached (no rebalancing after a deploy or a scale-out). The random share spreads the reconnections
//   of clients that connected together (after a restart) instead of ending them all at once.
// One timer per carrier, whatever the deadline.

/** Why a carrier ends. */
export type StreamEnd = 'token-expired' | 'lifetime-ended'

/** The share of the lifetime drawn at random for each carrier. */
const LIFETIME_JITTER = 0.1
/** setTimeout holds at most ~24.8 days; a later deadline is waited for in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1

/**
 * Calls `end` once, at `expiresAt` (epoch ms; undefined: no token, or one without `exp`) or when
 * `maxLifetimeMs` (0: no limit) has passed since `openedAt`, whichever comes first. Returns the cancel.
 */
export function endAtDeadline (
  expiresAt: number | undefined,
  openedAt: number,
  maxLifetimeMs: number,
  end: (why: StreamEnd) => void
): () => void {
  const retiresAt = maxLifetimeMs > 0 ? openedAt + maxLifetimeMs * (1 - Math.random() * LIFETIME_JITTER) : Infinity
  const expiresFirst = expiresAt !== undefined && expiresAt <= retiresAt
  const deadline = expiresFirst ? expiresAt : retiresAt
  if (deadline === Infinity) return () => {}
  let timer: NodeJS.Timeout
  const arm = () => {
    timer = setTimeout(() => {
      if (Date.now() >= deadline) end(expiresFirst ? 'token-expired' : 'lifetime-ended')
      else arm()
    }, Math.max(0, Math.min(deadline - Date.now(), MAX_TIMER_MS)))
  }
  arm()
  return () => clearTimeout(timer)
}
