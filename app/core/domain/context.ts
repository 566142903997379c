// What every domain call receives: who is calling, the per-request loaders, and the dependencies.
// One DomainContext is created per HTTP request, per SOAP request, and per WebSocket/SSE operation;
// nothing caller-specific lives at module level.
import { AppError, Messages } from '../errors.ts'
import type { Role, Store } from '../store/types.ts'
import { createLoaders, type Loaders } from './loaders.ts'
import type { InputCaps } from './input.ts'
import type { ReadSet } from './read-tags.ts'
import { recordingReads } from './store-tags.ts'

export interface Caller {
  id: string
  role: Role
  /** When the credential that identified the caller expires (epoch ms); long-lived connections end then. */
  expiresAt?: number
}

/**
 * Who a budget or a cap counts: the user when authenticated, the client address otherwise. The one
 * home of that rule: the rate limits (plugins/rate-limit.ts), the subscription caps and event pricing.
 */
export function callerKey (caller: Caller | null, ip: string): string {
  return caller ? `user:${caller.id}` : `ip:${ip}`
}

/** Things that happened, for subscribers (GraphQL subscriptions, across instances through Redis). */
export type DomainEvent =
  | { type: 'messageAdded'; message: import('../store/types.ts').MessageRow }
  /** A user's role was written (`role`: the new one), or the user was deleted (`role`: null). */
  | { type: 'userChanged'; userId: string; role: Role | null }

export interface Events {
  publish (event: DomainEvent): Promise<void>
}

export interface DomainDeps {
  /** The store, its writes telling the response cache what they change (store-tags.ts `tellingChanges`). */
  store: Store
  events: Events
  caps: InputCaps
  /** Signs and checks page cursors (app/core/domain/pages.ts). */
  cursorKey: Buffer
}

export interface DomainContext extends DomainDeps {
  caller: Caller | null
  loaders: Loaders
  /** Epoch milliseconds after which nothing may be written (the execution timeout); Infinity when unbounded. */
  deadline: number
}

/**
 * `reads`: where every store read of the request records its tags (a cacheable query: its store is
 * `recordingReads`), or null for no recording.
 */
export function createDomainContext (
  deps: DomainDeps,
  caller: Caller | null,
  deadline = Infinity,
  reads: ReadSet | null = null
): DomainContext {
  const store = reads ? recordingReads(deps.store, reads) : deps.store
  return { ...deps, store, caller, loaders: createLoaders(store), deadline }
}

/** Writes call this first, so a request that has already timed out changes nothing. */
export function assertBeforeDeadline (ctx: DomainContext): void {
  if (Date.now() > ctx.deadline) throw new AppError('TIMEOUT', Messages.queryTimeout)
}

/** A race still waiting on its work: `expire` settles it with its timeout value. */
interface Waiting {
  due: number
  expire: () => void
}

/**
 * The races of one duration still waiting, in the order they started, which is also the order they
 * fall due: one timer for the whole set instead of a timer set and cleared per request. A race that
 * settles leaves the set at once (nothing of it is kept until its due time), and the timer is armed for
 * the oldest waiting race, at least `#slack` ahead (a tenth of the duration, at most 10 ms), so a race
 * expires at most that late and the timer wakes rarely: under load, the oldest race has usually just
 * started.
 */
class DeadlineQueue {
  readonly #ms: number
  readonly #slack: number
  readonly #waiting = new Set<Waiting>()
  #timer: NodeJS.Timeout | null = null

  constructor (ms: number) {
    this.#ms = ms
    this.#slack = Math.min(10, ms / 10)
  }

  add (expire: () => void): Waiting {
    const entry: Waiting = { due: performance.now() + this.#ms, expire }
    this.#waiting.add(entry)
    this.#timer ??= this.#arm(this.#ms)
    return entry
  }

  settled (entry: Waiting): void {
    this.#waiting.delete(entry)
  }

  readonly #sweep = () => {
    this.#timer = null
    const now = performance.now()
    for (const entry of this.#waiting) {
      if (entry.due > now) {
        this.#timer = this.#arm(Math.max(this.#slack, entry.due - now))
        return
      }
      this.#waiting.delete(entry)
      entry.expire()
    }
  }

  // Unref'd: a closing process is kept alive by pending work's own sockets and queries, not by its deadline.
  #arm (ms: number): NodeJS.Timeout {
    return setTimeout(this.#sweep, ms).unref()
  }
}

const queues = new Map<number, DeadlineQueue>()

/**
 * Settles as `work` does, or with `onTimeout` once `ms` have passed first. The deadlines of one
 * duration share a queue and its one timer (see DeadlineQueue), kept for the process's life: `ms` must
 * be a setting, never a computed remainder, or the queues would grow with the requests. (A timer cannot
 * interrupt synchronous work: that is bounded by the cost budgets instead.)
 */
export function withinDeadline<T, U> (work: Promise<T>, ms: number, onTimeout: U): Promise<T | U> {
  let queue = queues.get(ms)
  if (!queue) queues.set(ms, queue = new DeadlineQueue(ms))
  const deadlines = queue
  return new Promise((resolve, reject) => {
    const entry = deadlines.add(() => resolve(onTimeout))
    work.then(
      (value) => {
        deadlines.settled(entry)
        resolve(value)
      },
      (err: unknown) => {
        deadlines.settled(entry)
        reject(err)
      }
    )
  })
}
