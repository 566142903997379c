// Subscriptions, independent of their carrier (WebSocket or server-sent events): the resolvers of
// Subscription.count and Subscription.messageAdded, and the checks every subscription operation passes
// before it starts. Mercurius runs subscriptions through graphql-js `subscribe` without its validation
// rules (only queryDepth), so schema validation, our limits, the cost budget and the variable caps are
// applied here, once, for both carriers.
import {
  parse, specifiedRules, validate,
  type DocumentNode, type GraphQLError, type GraphQLSchema, type ValidationRule
} from 'graphql'
import type { FastifyRequest } from 'fastify'
import type { Caller, DomainDeps, DomainEvent } from '../domain/context.ts'
import { createDomainContext } from '../domain/context.ts'
import { createLoaders } from '../domain/loaders.ts'
import { normalizeRoomId } from '../domain/input.ts'
import { AppError, badInput } from '../errors.ts'
import type { CostReport, GraphQLContext } from './context.ts'
import { selectOperation } from './document.ts'
import { priceOperation, type SpendCostUnits } from './limits.ts'
import type { Config } from '../config.ts'

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
        subscribeTopic(ctx.pubsub as unknown as TopicSubscriber, roomTopic(normalizeRoomId(roomId))),
      resolve: (event: DomainEvent, _args: unknown, ctx: GraphQLContext) => {
        // Each event is resolved like a request of its own: fresh loaders (the author goes through
        // them), so a long-lived subscription neither serves stale rows nor accumulates a cache.
        ctx.domain.loaders = createLoaders(ctx.domain.store)
        return event.message
      }
    }
  }
}

/** What a client sends to start a subscription (a graphql-ws `subscribe` payload or a graphql-sse body). */
export interface SubscriptionRequest {
  source: string
  variables?: unknown
  operationName?: unknown
}

export interface PreparedSubscription {
  document: DocumentNode
  variables: Record<string, unknown> | undefined
  operationName: string | null
  cost: CostReport
}

/** Validation errors, reported together (error-format's formatThrown unpacks `errors`). */
export class ValidationFailed extends Error {
  readonly errors: readonly GraphQLError[]

  constructor (errors: readonly GraphQLError[]) {
    super(errors[0]?.message ?? 'Validation failed')
    this.errors = errors
  }
}

export interface PrepareOptions {
  schema (): GraphQLSchema
  /** Our rules beyond graphql-js's specifiedRules (depth, literal caps), the same ones HTTP operations use. */
  rules: readonly ValidationRule[]
  limits: Config['limits']
  /** The cost-unit rate budget (the rate-limit plugin's). */
  spendCostUnits: SpendCostUnits
}

/**
 * Parse, validate (graphql-js rules plus ours), select the operation (a subscription), cap the
 * variables and price the operation against the caller's budget and cost rate. Throws AppError or
 * ValidationFailed; nothing has started when it throws.
 */
export function subscriptionPreparer (options: PrepareOptions) {
  const rules = [...specifiedRules, ...options.rules]
  return async function prepare (request: SubscriptionRequest, caller: Caller | null, ip: string): Promise<PreparedSubscription> {
    const { variables, operationName } = request
    if (variables != null && (typeof variables !== 'object' || Array.isArray(variables))) throw new AppError('BAD_REQUEST', 'variables must be a JSON object')
    if (operationName != null && typeof operationName !== 'string') throw new AppError('BAD_REQUEST', 'operationName must be a string')
    const schema = options.schema()
    const document = parse(request.source)
    const errors = validate(schema, document, rules)
    if (errors.length > 0) throw new ValidationFailed(errors)

    const { operation, singleOperationDocument } = selectOperation(document, operationName)
    if (operation.operation !== 'subscription') {
      throw new AppError('BAD_REQUEST', `Only subscriptions are served here: send ${operation.operation === 'query' ? 'queries' : 'mutations'} by HTTP POST`)
    }
    const vars = (variables ?? undefined) as Record<string, unknown> | undefined
    const cost = await priceOperation(schema, document, operation, vars, caller, ip, options.limits, options.spendCostUnits)
    return {
      document: singleOperationDocument ?? document,
      variables: vars,
      operationName: (operationName as string | null | undefined) ?? null,
      cost
    }
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
