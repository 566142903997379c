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
// A caller's request and cost budgets are leased together when neither is held (one script for both keys,
// which share a hash slot): a caller who sends a request now and then, so that each of its windows has
// ended before it comes back, costs one script per request, not two.
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
  take (key: string, amount: number, limit: number, windowMs: number, alongside?: Alongside): Taken | Promise<Taken>
  /**
   * Spends up to `amount` units: what the window still holds is taken, and `remaining` goes below zero
   * by what it could not cover (a subscription event's payer covers the subscribers it can).
   */
  spend (key: string, amount: number, limit: number, windowMs: number): Taken | Promise<Taken>
}

/** Another key of the same window a take leases with its own when this instance holds no share of it. */
export interface Alongside {
  key: string
  limit: number
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

// For each key i: grants up to ARGV[2i-1] units of a window of ARGV[2i] (the key: the units granted so far,
// expiring with the window of ARGV[last] ms that its first grant opened); answers, per key, the grant, the
// total granted and the window's time left. Its keys share a hash slot: on a Redis Cluster it runs on one node.
const LEASE = `
local windowMs = tonumber(ARGV[#ARGV])
local answers = {}
for i, key in ipairs(KEYS) do
  local want = tonumber(ARGV[2 * i - 1])
  local limit = tonumber(ARGV[2 * i])
  -- Increment first and give back what passes the limit: two calls for a share, not four.
  local used = redis.call('INCRBY', key, want)
  local grant = want
  if used > limit then
    grant = math.max(0, limit - (used - want))
    used = redis.call('DECRBY', key, want - grant)
  end
  local ttl
  if used == grant then
    -- Nothing was granted before: this grant opens the window.
    redis.call('PEXPIRE', key, windowMs)
    ttl = windowMs
  else
    ttl = redis.call('PTTL', key)
    if ttl < 0 then
      redis.call('PEXPIRE', key, windowMs)
      ttl = windowMs
    end
  end
  answers[#answers + 1] = grant
  answers[#answers + 1] = used
  answers[#answers + 1] = ttl
end
return answers`

/** Units of one key's window asked for. */
export interface Ask {
  key: string
  want: number
  limit: number
}
/** What was granted, the total granted, the window's time left (ms). */
export type Granted = [grant: number, granted: number, ttl: number]
/** Asks for units of one window's keys (one or two, in one hash slot): what each was granted, in order. */
export type LeaseScript = (asks: readonly Ask[], windowMs: number) => Promise<Granted[]>

/** The lease script's name: its key count varies, so a cluster connection sends it outside auto-pipelining. */
export const LEASE_SCRIPT = 'budgetLease'

/** The lease script on a connection (EVALSHA through ioredis's defineCommand: the text is sent once). */
export function leaseScript (redis: Redis | Cluster, prefix = ''): LeaseScript {
  if (!(LEASE_SCRIPT in redis)) redis.defineCommand(LEASE_SCRIPT, { lua: LEASE })
  type Run = (...args: Array<string | number>) => Promise<number[]>
  const run = (redis as unknown as Record<string, Run>)[LEASE_SCRIPT]!.bind(redis)
  return async (asks, windowMs) => {
    const args: Array<string | number> = [asks.length]
    for (const ask of asks) args.push(prefix + ask.key)
    for (const ask of asks) args.push(ask.want, ask.limit)
    args.push(windowMs)
    const flat = await run(...args)
    return asks.map((_, i) => [Number(flat[3 * i]), Number(flat[3 * i + 1]), Number(flat[3 * i + 2])])
  }
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
  alongside: Alongside | undefined
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

  take (key: string, amount: number, limit: number, windowMs: number, alongside?: Alongside): Taken | Promise<Taken> {
    return this.#settle(key, amount, limit, windowMs, false, alongside)
  }

  spend (key: string, amount: number, limit: number, windowMs: number): Taken | Promise<Taken> {
    return this.#settle(key, amount, limit, windowMs, true)
  }

  /** At once from the share when it covers `amount` (or the window is known spent); else after a grant. */
  #settle (
    key: string, amount: number, limit: number, windowMs: number, partly: boolean, alongside?: Alongside
  ): Taken | Promise<Taken> {
    const lease = this.#current(key)
    if (lease && (covers(lease, amount) || lease.spent)) return this.#use(lease, amount, limit, partly)
    return new Promise<Taken>((resolve, reject) => {
      const answer = (taken: Taken | Promise<Taken>) => { Promise.resolve(taken).then(resolve, reject) }
      let queue = this.#queues.get(key)
      if (queue) {
        queue.waiting.push({ amount, partly, answer })
        return
      }
      this.#queues.set(key, queue = { waiting: [{ amount, partly, answer }], limit, windowMs, alongside })
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
    const leasing = this.#counting === 'leases'
    const asks: Ask[] = [{ key, want: leasing ? shareSize(limit, held?.granted ?? 0, need) : need, limit }]
    // The key alongside, when this instance holds no share of it and asks for none: a share of it too.
    const other = queue.alongside
    if (leasing && other && !this.#current(other.key) && !this.#queues.has(other.key)) {
      asks.push({ key: other.key, want: shareSize(other.limit, 0, 1), limit: other.limit })
    }
    const sentAt = this.#now()
    this.#lease(asks, windowMs).then((grants) => {
      asks.forEach((ask, i) => {
        const [grant, granted, ttl] = grants[i]!
        this.#granted(ask.key, sentAt + ttl, windowMs, grant, granted, grant < ask.want)
      })
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
