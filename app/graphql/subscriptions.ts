// Subscriptions, independent of their carrier (WebSocket or server-sent events): the resolvers of
// Subscription.count and Subscription.messageAdded, and the checks every subscription operation passes
// before it starts: the admission pipeline's, for both carriers.
import type { DocumentNode } from 'graphql'
import type { FastifyRequest } from 'fastify'
import type { Caller, DomainDeps, DomainEvent } from '../domain/context.ts'
import { createDomainContext } from '../domain/context.ts'
import { createLoaders } from '../domain/loaders.ts'
import { normalizeRoomId } from '../domain/input.ts'
import { AppError, badInput } from '../errors.ts'
import type { CostReport, GraphQLContext } from './context.ts'
import type { Pipeline } from './pipeline.ts'
import type { GraphQLRequestParams } from './persisted.ts'

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

/** The part of Mercurius's per-subscription SubscriptionContext (`context.pubsub`) used here. */
interface TopicSubscriber {
  closed: boolean
  subscribe (topic: string): Promise<AsyncIterable<unknown>>
  close (): boolean
}

/**
 * Subscribes to a topic and returns its event queue. If the subscription was closed while the emitter
 * was registering the listener (the client left during the Redis SUBSCRIBE round trip), Mercurius's
 * close already ran and would never remove this listener: release it now.
 */
async function subscribeTopic (subscriber: TopicSubscriber, topic: string): Promise<AsyncIterable<unknown>> {
  const queue = await subscriber.subscribe(topic)
  if (subscriber.closed) {
    subscriber.closed = false
    subscriber.close()
  }
  return queue
}

export interface SubscriptionResolverOptions {
  roomTopic (roomId: string): string
  maxCountTarget: number
  countIntervalMs?: number
}

/** The Subscription resolvers, in Mercurius's { subscribe, resolve } form. */
export function subscriptionResolvers ({ roomTopic, maxCountTarget, countIntervalMs = COUNT_INTERVAL_MS }: SubscriptionResolverOptions) {
  return {
    count: {
      subscribe: (_root: unknown, { target }: { target: number }) => countUpTo(assertCountTarget(target, maxCountTarget), countIntervalMs),
      resolve: (value: number) => value
    },
    messageAdded: {
      subscribe: (_root: unknown, { roomId }: { roomId: string }, ctx: GraphQLContext) =>
        subscribeTopic((ctx as unknown as { pubsub: TopicSubscriber }).pubsub, roomTopic(normalizeRoomId(roomId))),
      resolve: (event: DomainEvent, _args: unknown, ctx: GraphQLContext) => {
        // Each event is resolved like a request of its own: fresh loaders (the author goes through
        // them), so a long-lived subscription neither serves stale rows nor accumulates a cache.
        ctx.domain.loaders = createLoaders(ctx.domain.store)
        return event.message
      }
    }
  }
}

export interface PreparedSubscription {
  document: DocumentNode
  variables: Record<string, unknown>
  operationName: string | null
  cost: CostReport
}

/**
 * Admits a subscription through the pipeline (the same plan cache, checks and budgets as every other
 * operation; a WebSocket operation spends a request of the budget there). Queries and mutations are
 * not served on these carriers yet. Throws when refused; nothing has started then.
 */
export function subscriptionAdmitter (pipeline: () => Pipeline) {
  return async function prepare (params: GraphQLRequestParams, caller: Caller | null, ip: string, transport: 'WS' | 'SSE'): Promise<PreparedSubscription> {
    const { operation, variables, cost } = await pipeline().admit({ params, transport, caller, ip })
    if (operation.type !== 'subscription') {
      throw new AppError('BAD_REQUEST', `Only subscriptions are served here: send ${operation.type === 'query' ? 'queries' : 'mutations'} by HTTP POST`)
    }
    return { document: operation.document, variables, operationName: operation.name, cost }
  }
}

/** Our part of a subscription's GraphQL context: a domain context of its own, under the connection's caller. */
export function subscriptionContext (deps: DomainDeps, caller: Caller | null, prepared: PreparedSubscription, request: FastifyRequest) {
  return {
    domain: createDomainContext(deps, caller),
    operationName: prepared.operationName,
    cost: prepared.cost,
    request
  }
}
