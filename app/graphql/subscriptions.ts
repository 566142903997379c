// The Subscription resolvers, independent of their carrier (WebSocket or server-sent events; every
// subscription is admitted by the pipeline first): Subscription.count and Subscription.messageAdded.
import type { DomainEvent } from '../core/domain/context.ts'
import { normalizeRoomId } from '../core/domain/input.ts'
import { badInput } from '../core/errors.ts'
import { TopicEvents } from './fanout.ts'

/** How often `count` emits. The interface says "one value about every second". */
export const COUNT_INTERVAL_MS = 1000

/**
 * 0, 1, … target - 1, one value every `intervalMs`, then done. Written as an iterator rather than an
 * async generator so that `return()` (client gone, server closing) stops the timer at once: a generator
 * parked on its timer would only notice at the next tick.
 */
export function countUpTo (target: number, intervalMs: number): AsyncIterableIterator<number> {
  let next = 0
  let finished = false
  let timer: NodeJS.Timeout | undefined
  let pending: ((result: IteratorResult<number>) => void) | undefined
  const done = (): IteratorResult<number> => ({ done: true, value: undefined })
  return {
    next () {
      if (finished || next >= target) {
        finished = true
        return Promise.resolve(done())
      }
      return new Promise((resolve) => {
        pending = resolve
        timer = setTimeout(() => {
          pending = undefined
          resolve({ done: false, value: next++ })
        }, intervalMs)
      })
    },
    return () {
      finished = true
      clearTimeout(timer)
      pending?.(done())
      pending = undefined
      return Promise.resolve(done())
    },
    [Symbol.asyncIterator] () { return this }
  }
}

export function assertCountTarget (target: number, max: number): number {
  if (!Number.isInteger(target) || target < 0 || target > max) {
    throw badInput(`target must be between 0 and ${max}`, { field: 'target', max })
  }
  return target
}

export interface SubscriptionResolverOptions {
  roomTopic (roomId: string): string
  maxCountTarget: number
  countIntervalMs?: number
}

/** The Subscription resolvers, in Mercurius's { subscribe, resolve } form. */
export function subscriptionResolvers ({
  roomTopic,
  maxCountTarget,
  countIntervalMs = COUNT_INTERVAL_MS
}: SubscriptionResolverOptions) {
  return {
    count: {
      subscribe: (_root: unknown, { target }: { target: number }) =>
        countUpTo(assertCountTarget(target, maxCountTarget), countIntervalMs),
      resolve: (value: number) => value
    },
    messageAdded: {
      // The room's events are delivered by the fan-out hub (fanout.ts), which executes each
      // like a request of its own: a fresh domain context and loaders per event and group, so a
      // long-lived subscription neither serves stale rows nor accumulates a cache.
      subscribe: (_root: unknown, { roomId }: { roomId: string }) =>
        new TopicEvents(roomTopic(normalizeRoomId(roomId))),
      resolve: (event: Extract<DomainEvent, { type: 'messageAdded' }>) => event.message
    }
  }
}
