// Fixed-window budgets (requests and cost units per caller per window): in-process by default; shared
// by every instance through Redis when configured, in one of two ways (RATE_LIMIT_COUNTING):
//
// - `leases` (the default with Redis): each instance takes a share of a caller's window from Redis (a
//   lease: a Lua script that grants what is asked for, never more than the limit leaves) and spends it
//   in the process, with no round trip, until it is used up. Redis's counter is the total granted, so the
//   units admitted across any number of instances never pass the limit. Shares shrink as the window
//   fills (an eighth of what is left, at most a sixteenth of the limit), so near the limit every take is
//   a round trip of one unit, and a caller far from it costs Redis one script per share. Google's
//   Doorman leases capacity the same way; Kong's and Envoy's synced counters, by contrast, let a burst
//   pass the limit by what every instance admits between two syncs, a bound that grows with the rate.
//   The price: units leased to one instance and unspent there are not available to the caller's
//   requests on another until they are spent or the window ends (docs/guarantees.md gives the bound).
// - `per-request`: every take that its instance cannot cover asks Redis for exactly what it needs; a
//   request spends a round trip, and nothing is ever leased ahead.
//
// While Redis is unreachable the shared counters fall back to in-process ones: each instance then
// enforces the limits on its own traffic (availability over strictness: an outage of the counter store
// must not take the API down, nor lift every limit).
//
// Either way a refused take spends nothing, and a caller the window refused is refused again without a
// round trip until the window ends: a client hammering past its limit costs Redis nothing more.
import type { Cluster, Redis } from 'ioredis'

/** What a take answered: whether it was admitted, what the caller has left, when the window resets. */
export interface Taken {
  admitted: boolean
  /** Units left for the caller in the window (an estimate with leases: see `remaining` below). */
  remaining: number
  /** Milliseconds until the window resets. */
  resetMs: number
}

export interface WindowCounters {
  /**
   * Takes `amount` units of the key's window of `limit`, all or nothing. `amount` 0 takes nothing and
   * says whether one more unit would be admitted. In-process counters and a covering lease answer at
   * once: the hot path waits no promise for a Map update.
   */
  take (key: string, amount: number, limit: number, windowMs: number): Taken | Promise<Taken>
  /**
   * Spends up to `amount` units: what the window still holds is taken, and `remaining` goes below zero
   * by what it could not cover (a subscription event's payer covers the subscribers it can).
   */
  spend (key: string, amount: number, limit: number, windowMs: number): Taken | Promise<Taken>
}

/** How counters shared through Redis are kept: leases (the default) or a round trip per request. */
export type Counting = 'leases' | 'per-request'

interface Window {
  used: number
  endsAt: number
}

/** Bounds a map of windows: when full, the oldest tenth goes (a Map keeps insertion order). */
function makeRoom (map: Map<string, unknown>, maxKeys: number): void {
  if (map.size < maxKeys) return
  for (const key of map.keys()) { map.delete(key); if (map.size < maxKeys * 0.9) break }
}

/** Exact counters of this process alone, bounded in keys (the oldest windows are dropped past `maxKeys`). */
export function localCounters (maxKeys = 100_000, now: () => number = Date.now): WindowCounters {
  const windows = new Map<string, Window>()
  const windowOf = (key: string, windowMs: number): Window => {
    const at = now()
    let window = windows.get(key)
    if (!window || window.endsAt <= at) {
      if (!window) makeRoom(windows, maxKeys)
      window = { used: 0, endsAt: at + windowMs }
      windows.delete(key)
      windows.set(key, window)
    }
    return window
  }
  return {
    take (key, amount, limit, windowMs) {
      const window = windowOf(key, windowMs)
      const left = limit - window.used
      const admitted = amount === 0 ? left >= 1 : amount <= left
      if (admitted) window.used += amount
      return { admitted, remaining: admitted ? left - amount : left, resetMs: window.endsAt - now() }
    },
    spend (key, amount, limit, windowMs) {
      const window = windowOf(key, windowMs)
      const left = limit - window.used
      window.used += Math.max(0, Math.min(amount, left))
      return { admitted: amount <= left, remaining: left - amount, resetMs: window.endsAt - now() }
    }
  }
}

// Grants up to ARGV[1] units of a window of ARGV[2] (KEYS[1]: the units granted so far, expiring with the
// window of ARGV[3] ms that its first grant opened); answers the grant, the total granted, the window's
// time left. One key: on a Redis Cluster it runs on the node of that key.
const LEASE = `
local want = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local grant = math.max(0, math.min(want, limit - used))
if grant > 0 then used = redis.call('INCRBY', KEYS[1], grant) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  ttl = tonumber(ARGV[3])
elseif ttl == -2 then
  ttl = tonumber(ARGV[3])
end
return { grant, used, ttl }`

/** Asks for `want` units of a key's window: what was granted, the total granted, the window's time left (ms). */
export type LeaseScript = (key: string, want: number, limit: number, windowMs: number) => Promise<Granted>
type Granted = [grant: number, granted: number, ttl: number]

/** The lease script on a connection (EVALSHA through ioredis's defineCommand: the text is sent once). */
export function leaseScript (redis: Redis | Cluster): LeaseScript {
  if (!('budgetLease' in redis)) redis.defineCommand('budgetLease', { numberOfKeys: 1, lua: LEASE })
  return (redis as unknown as { budgetLease: LeaseScript }).budgetLease.bind(redis)
}

/** A share of a caller's window held by this instance. */
interface Lease {
  /** Units leased here and not spent yet. */
  left: number
  /** Units granted across the fleet as of the last grant (this share included). */
  granted: number
  /** When the window ends, on this process's clock, measured from before the grant was asked: never late. */
  endsAt: number
  /** Redis granted less than was asked: the window is spent, and nothing more is asked until it ends. */
  spent: boolean
}

export interface SharedCountersOptions {
  /** `leases`: a share ahead, then no round trip until it is spent; `per-request`: exactly what each take needs. */
  counting: Counting
  /** Told of every Redis failure; that take is then counted by `fallback`. */
  onFallback (err: unknown): void
  /** The counters used while Redis fails (each instance alone). */
  fallback?: WindowCounters
  /** Most windows kept in this process; past it the oldest shares are dropped (their units go unspent). */
  maxKeys?: number
  now? (): number
}

/** A new share: a sixteenth of the limit, an eighth of what is left at most, never less than `need`. */
export function shareSize (limit: number, granted: number, need: number): number {
  return Math.max(need, Math.min(Math.ceil(limit / 16), Math.floor((limit - granted) / 8)))
}

/** A take waiting for a grant. */
interface Waiting {
  amount: number
  /** `spend` (covers what it can) rather than `take` (all or nothing). */
  partly: boolean
  answer (taken: Taken | Promise<Taken>): void
}

/** The takes of one key waiting for a grant, and the window they ask in. */
interface Queue {
  waiting: Waiting[]
  limit: number
  windowMs: number
}

/** Counters every instance shares through the lease script, kept as `options.counting` says. */
export class SharedCounters implements WindowCounters {
  readonly #lease: LeaseScript
  readonly #counting: Counting
  readonly #onFallback: (err: unknown) => void
  readonly #fallback: WindowCounters
  readonly #maxKeys: number
  readonly #now: () => number
  readonly #leases = new Map<string, Lease>()
  /**
   * Takes waiting for a grant, by key: one grant in flight per key, asked for what they all need (so a
   * burst on one instance costs one round trip, not one each), then served in their order.
   */
  readonly #queues = new Map<string, Queue>()

  constructor (lease: LeaseScript, options: SharedCountersOptions) {
    this.#lease = lease
    this.#counting = options.counting
    this.#onFallback = options.onFallback
    this.#fallback = options.fallback ?? localCounters()
    this.#maxKeys = options.maxKeys ?? 100_000
    this.#now = options.now ?? Date.now
  }

  take (key: string, amount: number, limit: number, windowMs: number): Taken | Promise<Taken> {
    return this.#settle(key, amount, limit, windowMs, false)
  }

  spend (key: string, amount: number, limit: number, windowMs: number): Taken | Promise<Taken> {
    return this.#settle(key, amount, limit, windowMs, true)
  }

  /** At once from the share when it covers `amount` (or the window is known spent); else after a grant. */
  #settle (key: string, amount: number, limit: number, windowMs: number, partly: boolean): Taken | Promise<Taken> {
    const lease = this.#current(key)
    if (lease && (covers(lease, amount) || lease.spent)) return this.#use(lease, amount, limit, partly)
    return new Promise<Taken>((resolve, reject) => {
      const answer = (taken: Taken | Promise<Taken>) => { Promise.resolve(taken).then(resolve, reject) }
      let queue = this.#queues.get(key)
      if (queue) {
        queue.waiting.push({ amount, partly, answer })
        return
      }
      this.#queues.set(key, queue = { waiting: [{ amount, partly, answer }], limit, windowMs })
      this.#ask(key, queue)
    })
  }

  /** Asks Redis for what the queue's takes need (a share ahead with leases), then serves them. */
  #ask (key: string, queue: Queue): void {
    const { limit, windowMs } = queue
    const held = this.#current(key)
    let need = -(held?.left ?? 0)
    for (const waiting of queue.waiting) need += Math.max(waiting.amount, 1)
    need = Math.max(need, 1)
    const want = this.#counting === 'leases' ? shareSize(limit, held?.granted ?? 0, need) : need
    const sentAt = this.#now()
    this.#lease(key, want, limit, windowMs).then(([grant, granted, ttl]) => {
      this.#granted(key, sentAt + ttl, windowMs, grant, granted, grant < want)
      this.#serve(key, queue)
    }, (err: unknown) => {
      // Redis failed: these takes are counted by this instance alone (the next take asks Redis again).
      this.#queues.delete(key)
      this.#onFallback(err)
      for (const { amount, partly, answer } of queue.waiting) {
        const counters = this.#fallback
        answer(partly ? counters.spend(key, amount, limit, windowMs) : counters.take(key, amount, limit, windowMs))
      }
    })
  }

  /** Answers, in order, the waiting takes the share covers (all, once the window is spent); asks again for the rest. */
  #serve (key: string, queue: Queue): void {
    const lease = this.#current(key)
    if (lease) {
      for (let next = queue.waiting[0]; next && (covers(lease, next.amount) || lease.spent); next = queue.waiting[0]) {
        queue.waiting.shift()
        next.answer(this.#use(lease, next.amount, queue.limit, next.partly))
      }
    }
    if (queue.waiting.length === 0) this.#queues.delete(key)
    else this.#ask(key, queue)
  }

  /** Spends from the share what it covers: all of `amount`, or (partly) what is left of it. */
  #use (lease: Lease, amount: number, limit: number, partly: boolean): Taken {
    const admitted = covers(lease, amount)
    const remaining = () => Math.max(0, limit - lease.granted + lease.left)
    const resetMs = Math.max(0, lease.endsAt - this.#now())
    if (admitted) {
      lease.left -= amount
      return { admitted, remaining: remaining(), resetMs }
    }
    if (!partly) return { admitted, remaining: remaining(), resetMs }
    const short = amount - lease.left
    lease.left = 0
    return { admitted, remaining: remaining() - short, resetMs }
  }

  /** This instance's share of the key's current window, if it holds one. */
  #current (key: string): Lease | undefined {
    const lease = this.#leases.get(key)
    if (lease && lease.endsAt <= this.#now()) {
      this.#leases.delete(key)
      return undefined
    }
    return lease
  }

  #granted (key: string, endsAt: number, windowMs: number, grant: number, granted: number, spent: boolean): void {
    let lease = this.#current(key)
    // A grant from a window that began after the share's (Redis's ended meanwhile) starts a new share.
    if (!lease || endsAt > lease.endsAt + windowMs / 2) {
      if (!lease) makeRoom(this.#leases, this.#maxKeys)
      lease = { left: 0, granted: 0, endsAt, spent: false }
      this.#leases.delete(key)
      this.#leases.set(key, lease)
    }
    lease.left += grant
    lease.granted = Math.max(lease.granted, granted)
    lease.endsAt = Math.min(lease.endsAt, endsAt)
    lease.spent = spent
  }
}

/** Whether a share covers `amount` (0: whether one more unit would be admitted). */
const covers = (lease: Lease, amount: number) => (amount === 0 ? lease.left >= 1 : lease.left >= amount)
