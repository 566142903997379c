// What every domain call receives: who is calling, the per-request loaders, and the dependencies.
// One DomainContext is created per HTTP request, per SOAP request, and per WebSocket/SSE operation;
// nothing caller-specific lives at module level.
import { AppError, Messages } from '../errors.ts'
import type { Role, Store } from '../store/types.ts'
import { createLoaders, type Loaders } from './loaders.ts'
import type { InputCaps } from './input.ts'

export interface Caller {
  id: string
  role: Role
  /** When the credential that identified the caller expires (epoch ms); long-lived connections end then. */
  expiresAt?: number
}

/** Things that happened, for subscribers (GraphQL subscriptions, across instances through Redis). */
export type DomainEvent = { type: 'messageAdded'; message: import('../store/types.ts').MessageRow }

export interface Events {
  publish (event: DomainEvent): Promise<void>
}

export interface DomainDeps {
  store: Store
  events: Events
  caps: InputCaps
  /** Signs and checks page cursors (app/domain/pages.ts). */
  cursorKey: Buffer
}

export interface DomainContext extends DomainDeps {
  caller: Caller | null
  loaders: Loaders
  /** Epoch milliseconds after which nothing may be written (the execution timeout); Infinity when unbounded. */
  deadline: number
}

export function createDomainContext (deps: DomainDeps, caller: Caller | null, deadline = Infinity): DomainContext {
  return { ...deps, caller, loaders: createLoaders(deps.store), deadline }
}

/** Writes call this first, so a request that has already timed out changes nothing. */
export function assertBeforeDeadline (ctx: DomainContext): void {
  if (Date.now() > ctx.deadline) throw new AppError('TIMEOUT', Messages.queryTimeout)
}

/** A race still waiting on its work: `expire` settles it with its timeout value; null once the work settled. */
interface Waiting {
  due: number
  expire: (() => void) | null
}

/**
 * The races of one duration, in the order they started, which is also the order they fall due: one
 * timer for the whole queue, armed for its head, instead of a timer set and cleared per request. The
 * timer wakes at most once per `#slack` (a tenth of the duration, at most 10 ms), taking every race
 * due by then: most races settled long before, and waking for each one's due time would turn the
 * event loop a thousand times a second under load for nothing. A deadline is kept that much late at most.
 */
class DeadlineQueue {
  readonly #ms: number
  readonly #slack: number
  #waiting: Waiting[] = []
  #head = 0
  #timer: NodeJS.Timeout | null = null

  constructor (ms: number) {
    this.#ms = ms
    this.#slack = Math.min(10, ms / 10)
  }

  add (expire: () => void): Waiting {
    const entry: Waiting = { due: performance.now() + this.#ms, expire }
    this.#waiting.push(entry)
    this.#timer ??= this.#arm(this.#ms)
    return entry
  }

  readonly #sweep = () => {
    this.#timer = null
    const now = performance.now()
    const waiting = this.#waiting
    while (this.#head < waiting.length && waiting[this.#head]!.due <= now) {
      const entry = waiting[this.#head++]!
      entry.expire?.()
      entry.expire = null
    }
    // The settled prefix is dropped once it is half the array: amortised O(1) per race.
    if (this.#head * 2 >= waiting.length) {
      this.#waiting = waiting.slice(this.#head)
      this.#head = 0
    }
    if (this.#waiting.length > this.#head) {
      this.#timer = this.#arm(Math.max(this.#slack, this.#waiting[this.#head]!.due - now))
    }
  }

  // Unref'd: settled races must not keep a closing process alive until they fall due (pending work
  // keeps it alive through its own sockets and queries).
  #arm (ms: number): NodeJS.Timeout {
    return setTimeout(this.#sweep, ms).unref()
  }
}

const queues = new Map<number, DeadlineQueue>()

/**
 * Settles as `work` does, or with `onTimeout` once `ms` have passed first. The deadlines of one
 * duration share a queue and its one timer (see DeadlineQueue). (A timer cannot interrupt synchronous
 * work: that is bounded by the cost budgets instead.)
 */
export function withinDeadline<T, U> (work: Promise<T>, ms: number, onTimeout: U): Promise<T | U> {
  let queue = queues.get(ms)
  if (!queue) queues.set(ms, queue = new DeadlineQueue(ms))
  const deadlines = queue
  return new Promise((resolve, reject) => {
    const entry = deadlines.add(() => resolve(onTimeout))
    work.then(
      (value) => {
        entry.expire = null
        resolve(value)
      },
      (err: unknown) => {
        entry.expire = null
        reject(err)
      }
    )
  })
}
