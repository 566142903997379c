// What the streaming carriers (WebSocket in both subprotocols, server-sent events) run: an operation
// admitted by the pipeline, then either one answer (a query or mutation) or a subscription whose events
// go to the carrier's sink, every answer in the interface's shape, serialised once and held to the answer
// cap (UTF-8 bytes). A refusal throws, before anything has started; a subscription whose source stream
// cannot start (a bad room id, a count target over the cap) is a refusal too.
//
// Every event a subscriber receives is paid for, before it is sent, from the cost budget of whoever
// holds the subscription (the operation's cost per event): pub/sub topics through the fan-out hub
// (fanout.ts, one execution per group of alike subscribers), `count` tick by tick (its
// timers are per subscriber, nothing to share). Subscriptions are also capped per caller (the user, or
// the IP when anonymous) across connections and carriers on this instance.
//
// A subscription outlives the request that started it, so its caller's token is held against the store:
// a user whose role in the store is not the token's, or who no longer exists, starts none, and a
// `userChanged` event (a role written or a user deleted, on any instance: plugins/events.ts) ends that
// user's running subscriptions whose token the store now contradicts (app/core/domain/authorization.ts).
import type { ExecutionResult, GraphQLSchema } from 'graphql'
import type { MQEmitter } from 'mqemitter'
import { AppError } from '../core/errors.ts'
import { callerKey, type Caller, type DomainEvent } from '../core/domain/context.ts'
import { staleIdentity } from '../core/domain/authorization.ts'
import type { Role } from '../core/store/types.ts'
import { answerTooLarge, withinAnswerCap } from './answer-size.ts'
import { formatError, formatResult, formatThrown, type FormatOptions } from '../core/error-format.ts'
import { TopicEvents, createFanout, type Fanout, type Subscription, type SubscriptionSink } from './fanout.ts'
import type { ChargeEvent } from './event-pricing.ts'
import type { Admission, OperationAdmission, OperationExecution, OperationRequest } from './pipeline.ts'
import type { OperationPlan } from './plan.ts'

export type { Subscription, SubscriptionSink }

export type StartedOperation =
  /** A query or mutation: its answer, serialised. */
  | { operation: OperationPlan; answer: string; subscription?: undefined }
  /** A subscription, delivering to the sink until it ends or `stop()` is called. */
  | { operation: OperationPlan; answer?: undefined; subscription: Subscription }

export type StartOperation = (request: OperationRequest, sink: SubscriptionSink) => Promise<StartedOperation>

export interface OperationStarterOptions {
  admission: Pick<OperationAdmission, 'admit'>
  /** Looked up at each call (a test may wrap `execute`). */
  execution: OperationExecution
  /** Pays for one event of running subscriptions (event-pricing.ts): the subscribers that could not be paid for. */
  chargeEvent: ChargeEvent
  schema (): GraphQLSchema
  format (): FormatOptions
  emitter: MQEmitter
  /** Events of a topic waiting while the previous one is delivered; beyond it the oldest are dropped. */
  maxQueuedEvents: number
  maxResponseBytes: number
  /** Subscriptions one caller (user, or IP when anonymous) may hold at once on this instance. */
  maxSubscriptionsPerCaller: number
  /** The topic `userChanged` events arrive on (plugins/events.ts). */
  userChangesTopic: string
  /** A user's role in the store now; null when there is no such user. */
  storedRole (userId: string): Promise<Role | null>
}

/** A running subscription of an authenticated caller, as user changes find it. */
interface HeldIdentity {
  caller: Caller
  /** Ends the subscription with these errors (already formatted). */
  end (errors: unknown[]): void
}

export function operationStarter (options: OperationStarterOptions): { start: StartOperation; fanout: Fanout } {
  const { maxResponseBytes, maxSubscriptionsPerCaller: maxPerCaller } = options
  /** An answer as sent, or the refusal that replaces one over the cap: serialised once, here. */
  const serialised = (result: ExecutionResult): string => {
    const json = JSON.stringify(formatResult(result, options.format()))
    if (withinAnswerCap(json, maxResponseBytes)) return json
    return JSON.stringify({ errors: [formatError(answerTooLarge(maxResponseBytes), options.format())] })
  }
  const answerOf = async (admission: Admission, root?: unknown): Promise<string> => {
    try {
      return serialised(await options.execution.execute(admission, root))
    } catch (err) {
      return JSON.stringify({ errors: formatThrown(err, options.format()) })
    }
  }
  const refusal = (resetMs: number, cost: number) => {
    const retryAfter = Math.ceil(resetMs / 1000)
    const error = new AppError(
      'RATE_LIMITED',
      `Cost rate limit exceeded: each event of this subscription costs ${cost} cost units; retry in ${retryAfter} s`,
      { cost, retryAfter }
    )
    return formatThrown(error, options.format())
  }

  const fanout = createFanout({
    emitter: options.emitter,
    answer: answerOf,
    charge: options.chargeEvent,
    refusal,
    maxQueuedEvents: options.maxQueuedEvents
  })

  const held = new Map<string, number>()
  /** Takes one of the caller's subscription slots (refused when all are held); returns its release. */
  function takeSlot (caller: Caller | null, ip: string): () => void {
    const key = callerKey(caller, ip)
    const count = held.get(key) ?? 0
    if (count >= maxPerCaller) {
      throw new AppError(
        'RATE_LIMITED',
        `Too many active subscriptions for this client: at most ${maxPerCaller} across its connections`,
        { maxSubscriptions: maxPerCaller }
      )
    }
    held.set(key, count + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      const left = (held.get(key) ?? 1) - 1
      if (left > 0) held.set(key, left)
      else held.delete(key)
    }
  }

  /** Running subscriptions of authenticated callers, by user id. */
  const heldBy = new Map<string, Set<HeldIdentity>>()
  /** `userChanged` events seen: a start that overlapped one reads the store again. */
  let userChanges = 0
  const endStale = (held: HeldIdentity, storedRole: Role | null) => {
    const stale = staleIdentity(held.caller, storedRole)
    if (stale) held.end(formatThrown(stale, options.format()))
  }
  const userChangesHeard = new Promise<void>((resolve) => {
    options.emitter.on(options.userChangesTopic, (message, done) => {
      const event = message.payload as DomainEvent
      if (event?.type === 'userChanged') {
        userChanges++
        for (const held of heldBy.get(event.userId) ?? []) endStale(held, event.role)
      }
      done()
    }, () => resolve())
  })
  /** Refuses a caller whose token the store contradicts (the user's role changed, or the user is gone). */
  async function assertIdentityHolds (caller: Caller): Promise<void> {
    const stale = staleIdentity(caller, await options.storedRole(caller.id))
    if (stale) throw stale
  }
  /**
   * Keeps a caller's subscription where user changes find it, until it stops; a change that came while
   * it started (after the store was read) is checked against the store again.
   */
  function holdIdentity (
    caller: Caller,
    subscription: Subscription,
    sink: SubscriptionSink,
    seen: number
  ): Subscription {
    const held: HeldIdentity = {
      caller,
      end (errors) {
        subscription.stop()
        sink.end(errors)
      }
    }
    let set = heldBy.get(caller.id)
    if (!set) heldBy.set(caller.id, (set = new Set()))
    set.add(held)
    if (userChanges !== seen) {
      void options.storedRole(caller.id).then((role) => endStale(held, role), () => {})
    }
    return {
      stop () {
        const set = heldBy.get(caller.id)
        if (set?.delete(held) && set.size === 0) heldBy.delete(caller.id)
        subscription.stop()
      }
    }
  }

  /** `count`'s ticks: its own timer per subscriber, each tick charged like a shared event. */
  function pump (
    admission: Admission,
    payer: { caller: Caller | null; ip: string; cost: number },
    source: AsyncIterable<unknown>,
    sink: SubscriptionSink,
    release: () => void
  ): Subscription {
    const events = source[Symbol.asyncIterator]()
    let stopped = false
    void (async () => {
      try {
        for (;;) {
          const step = await events.next()
          if (stopped) return
          if (step.done) return sink.end()
          const { refused, resetMs } = await options.chargeEvent([payer])
          if (stopped) return
          if (refused.length > 0) {
            stopped = true
            await events.return?.()
            return sink.end(refusal(resetMs, payer.cost))
          }
          const json = await answerOf(admission, step.value)
          if (!stopped) sink.next(json)
        }
      } catch (err) {
        if (!stopped) sink.end(formatThrown(err, options.format()))
      } finally {
        release()
      }
    })()
    return {
      stop () {
        if (stopped) return
        stopped = true
        release()
        void events.return?.()
      }
    }
  }

  const start: StartOperation = async (request, sink) => {
    const admission = await options.admission.admit(request)
    const { operation } = admission
    if (operation.type !== 'subscription') return { operation, answer: await answerOf(admission) }
    const { caller } = request
    await userChangesHeard
    const seen = userChanges
    if (caller) await assertIdentityHolds(caller)
    const release = takeSlot(caller, request.ip)
    try {
      const source = await options.execution.subscribe(admission)
      // graphql-js answers a source stream that failed to start with its errors.
      if (!(Symbol.asyncIterator in source)) {
        throw Object.assign(new Error('The subscription could not start'), { errors: source.errors ?? [] })
      }
      const payer = { caller, ip: request.ip, cost: admission.cost.requested }
      const subscription = source instanceof TopicEvents
        ? await fanout.add(source.topic, admission, payer, sink, release, options.schema())
        : pump(admission, payer, source, sink, release)
      return { operation, subscription: caller ? holdIdentity(caller, subscription, sink, seen) : subscription }
    } catch (err) {
      release()
      throw err
    }
  }
  return { start, fanout }
}
