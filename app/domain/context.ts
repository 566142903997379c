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

/**
 * Settles as `work` does, or with `onTimeout` once `ms` have passed first: one timer and one promise,
 * the timer cleared as soon as the work settles. (A timer cannot interrupt synchronous work: that is
 * bounded by the cost budgets instead.)
 */
export function withinDeadline<T, U> (work: Promise<T>, ms: number, onTimeout: U): Promise<T | U> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms, onTimeout)
    work.then(
      (value) => {
        clearTimeout(timer)
        resolve(value)
      },
      (err: unknown) => {
        clearTimeout(timer)
        reject(err)
      }
    )
  })
}
