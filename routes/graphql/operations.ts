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
import type { ExecutionResult, GraphQLSchema } from 'graphql'
import type { MQEmitter } from 'mqemitter'
import { AppError } from '../../app/errors.ts'
import type { Caller } from '../../app/domain/context.ts'
import { withinAnswerCap } from './answer-size.ts'
import { formatError, formatResult, formatThrown, type FormatOptions } from './error-format.ts'
import { TopicEvents, callerKey, createFanout, type Fanout, type Subscription, type SubscriptionSink } from './fanout.ts'
import type { Admission, OperationRequest, Pipeline } from './pipeline.ts'
import type { OperationPlan } from './plan.ts'

export type { Subscription, SubscriptionSink }

export type StartedOperation =
  /** A query or mutation: its answer, serialised. */
  | { operation: OperationPlan; answer: string; subscription?: undefined }
  /** A subscription, delivering to the sink until it ends or `stop()` is called. */
  | { operation: OperationPlan; answer?: undefined; subscription: Subscription }

export type StartOperation = (request: OperationRequest, sink: SubscriptionSink) => Promise<StartedOperation>

export interface OperationStarterOptions {
  pipeline (): Pipeline
  schema (): GraphQLSchema
  format (): FormatOptions
  emitter: MQEmitter
  /** Events of a topic waiting while the previous one is delivered; beyond it the oldest are dropped. */
  maxQueuedEvents: number
  maxResponseBytes: number
  /** Subscriptions one caller (user, or IP when anonymous) may hold at once on this instance. */
  maxSubscriptionsPerCaller: number
}

export function operationStarter (options: OperationStarterOptions): { start: StartOperation; fanout: Fanout } {
  const { maxResponseBytes, maxSubscriptionsPerCaller: maxPerCaller } = options
  /** An answer as sent, or the refusal that replaces one over the cap: serialised once, here. */
  const serialised = (result: ExecutionResult): string => {
    const json = JSON.stringify(formatResult(result, options.format()))
    if (withinAnswerCap(json, maxResponseBytes)) return json
    const error = new AppError(
      'RESPONSE_TOO_LARGE',
      `The answer is larger than ${maxResponseBytes} bytes: ask for fewer fields or smaller pages`,
      { maxResponseBytes }
    )
    return JSON.stringify({ errors: [formatError(error, options.format())] })
  }
  const answerOf = async (admission: Admission, root?: unknown): Promise<string> => {
    try {
      return serialised(await options.pipeline().execute(admission, root))
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
    charge: (subscribers) => options.pipeline().chargeEvent(subscribers),
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
          const { refused, resetMs } = await options.pipeline().chargeEvent([payer])
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
    const admission = await options.pipeline().admit(request)
    const { operation } = admission
    if (operation.type !== 'subscription') return { operation, answer: await answerOf(admission) }
    const release = takeSlot(request.caller, request.ip)
    try {
      const source = await options.pipeline().subscribe(admission)
      // graphql-js answers a source stream that failed to start with its errors.
      if (!(Symbol.asyncIterator in source)) {
        throw Object.assign(new Error('The subscription could not start'), { errors: source.errors ?? [] })
      }
      const payer = { caller: request.caller, ip: request.ip, cost: admission.cost.requested }
      if (source instanceof TopicEvents) {
        return {
          operation,
          subscription: await fanout.add(source.topic, admission, payer, sink, release, options.schema())
        }
      }
      return { operation, subscription: pump(admission, payer, source, sink, release) }
    } catch (err) {
      release()
      throw err
    }
  }
  return { start, fanout }
}
