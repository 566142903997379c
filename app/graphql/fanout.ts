// Subscription events, priced and shared. One emitter listener per topic per process (not one per
// subscriber) feeds this hub. A topic's subscribers are grouped by (operation plan, variables, caller
// scope): each event is executed once per group (and, for USER and SERVICE callers of a plan with guarded
// fields, once more per owner of the data SELF shows them), formatted, serialised and held to the answer
// cap once, and the same JSON string goes to every subscriber who sees the same. Before anything is executed or sent,
// the event is paid for: each subscriber's price (its operation's cost) is spent from the budget of
// whoever holds it, with one spend per distinct payer per event; a subscriber whose payer can no longer
// pay is ended with RATE_LIMITED instead of receiving the event.
import type { GraphQLSchema } from 'graphql'
import type { MQEmitter, Message } from 'mqemitter'
import { NonOwner } from '../core/domain/authorization.ts'
import type { Caller } from '../core/domain/context.ts'
import { executedAs, scopeOf } from './answer-scope.ts'
import type { Payer } from './event-pricing.ts'
import type { Admission } from './pipeline.ts'
import type { OperationPlan } from './plan.ts'

/**
 * What a subscription's source resolver returns for a pub/sub topic: a marker naming the topic (the
 * hub delivers its events). It is an AsyncIterable only because graphql-js's createSourceEventStream
 * requires one; it is never iterated.
 */
export class TopicEvents implements AsyncIterable<never> {
  readonly topic: string
  constructor (topic: string) { this.topic = topic }
  [Symbol.asyncIterator] (): AsyncIterator<never> {
    throw new Error(`The events of ${this.topic} are delivered by the fan-out hub, not iterated`)
  }
}

/** Where a carrier receives one subscription's events. */
export interface SubscriptionSink {
  /** An event's answer, serialised and capped (the very string every subscriber of its group receives). */
  next (json: string): void
  /** The subscription is over: completed by its source, or ended with these errors (already formatted). */
  end (errors?: unknown[]): void
}

export interface FanoutOptions {
  emitter: MQEmitter
  /** Executes an event for a group: the serialised, capped answer its subscribers receive. */
  answer (run: Admission, event: unknown): Promise<string>
  /** Pays for one event (event-pricing.ts): the subscribers that could not be paid for. */
  charge (subscribers: Member[]): Promise<{ refused: Member[]; resetMs: number }>
  /** The errors that end a subscriber whose payer cannot pay (RATE_LIMITED, formatted). */
  refusal (resetMs: number, cost: number): unknown[]
  /** Events of a topic waiting while the previous one is delivered; beyond it the oldest are dropped. */
  maxQueuedEvents: number
}

/** One subscriber, as small as it can be: its sink, its payer and its group. */
export class Member implements Payer {
  readonly sink: SubscriptionSink
  readonly caller: Caller | null
  readonly ip: string
  readonly cost: number
  /** Gives back what the subscription holds (its per-caller slot) once it leaves. */
  readonly release: () => void
  group: Group | null
  /** The last event of its topic it has paid for (0: none). */
  paid = 0
  constructor (sink: SubscriptionSink, payer: Payer, group: Group, release: () => void) {
    this.sink = sink
    this.release = release
    this.caller = payer.caller
    this.ip = payer.ip
    this.cost = payer.cost
    this.group = group
  }
}

interface Group {
  key: string
  topic: Topic
  /**
   * The admission the group executes events as: its caller is the scope's (null for `public` and
   * `anonymous`, a fresh NonOwner per event for `authenticated`, the subscriber for `ADMIN` and a
   * caller's own scope).
   */
  run: Admission
  /** `authenticated`: the answer of an event is the non-owner's, except for the owners it was refused. */
  perOwner: boolean
  members: Set<Member>
}

interface Topic {
  name: string
  groups: Map<string, Group>
  size: number
  listener (message: Message, done: () => void): void
  registered: Promise<void>
  queue: unknown[]
  draining: boolean
  /** Events delivered so far: numbers each event, for `Member.paid`. */
  events: number
}

/** A running subscription: `stop()` leaves the hub (nothing more is sent to its sink). */
export interface Subscription { stop (): void }

export function createFanout (options: FanoutOptions) {
  const topics = new Map<string, Topic>()
  /** A stable identity per operation plan, for group keys. */
  const planIds = new WeakMap<OperationPlan, number>()
  let nextPlanId = 0

  async function deliver (topic: Topic, event: unknown): Promise<void> {
    const members: Member[] = []
    for (const group of topic.groups.values()) for (const member of group.members) members.push(member)
    if (members.length === 0) return
    // Paid before anything is executed or sent. Those who join meanwhile have not paid: not sent.
    const paid = ++topic.events
    const { refused, resetMs } = await options.charge(members)
    for (const member of members) member.paid = paid
    for (const member of refused) {
      member.paid = 0
      leave(member)
      member.sink.end(options.refusal(resetMs, member.cost))
    }
    await Promise.all([...topic.groups.values()].map(async (group) => {
      const recipients = [...group.members].filter((member) => member.paid === paid)
      if (recipients.length === 0) return
      if (group.perOwner) return deliverPerOwner(group, recipients, event)
      const json = await options.answer(group.run, event)
      // Those who left while it executed are no longer in a group.
      for (const member of recipients) if (member.group === group) member.sink.next(json)
    }))
  }

  /**
   * An `authenticated` group: executed once as a non-owner; the recipients whose data SELF refused it
   * (the owners, usually the event's author alone) are executed as themselves, once per user.
   */
  async function deliverPerOwner (group: Group, recipients: Member[], event: unknown): Promise<void> {
    const nonOwner = new NonOwner()
    const shared = await options.answer({ ...group.run, caller: nonOwner }, event)
    const owners = new Map<string, Member[]>()
    for (const member of recipients) {
      if (member.group !== group) continue
      const id = member.caller!.id
      if (!nonOwner.refusedOwners.has(id)) {
        member.sink.next(shared)
        continue
      }
      const same = owners.get(id)
      if (same) same.push(member)
      else owners.set(id, [member])
    }
    await Promise.all([...owners.values()].map(async (members) => {
      // A user's subscribers of one group differ at most in role (USER or SERVICE), which SELF ignores.
      const own = await options.answer({ ...group.run, caller: members[0]!.caller }, event)
      for (const member of members) if (member.group === group) member.sink.next(own)
    }))
  }

  async function drain (topic: Topic): Promise<void> {
    topic.draining = true
    try {
      while (topic.queue.length > 0) {
        try {
          await deliver(topic, topic.queue.shift())
        } catch {
          // The budget could not be reached (answers never throw): delivery is best-effort, as
          // publishing is (plugins/events.ts); the event is dropped, the next one tried.
        }
      }
    } finally {
      topic.draining = false
    }
  }

  function topicOf (name: string): Topic {
    let topic = topics.get(name)
    if (topic) return topic
    const made: Topic = {
      name,
      groups: new Map(),
      size: 0,
      queue: [],
      draining: false,
      events: 0,
      listener: (message, done) => {
        made.queue.push(message.payload)
        if (made.queue.length > options.maxQueuedEvents) made.queue.shift()
        if (!made.draining) void drain(made)
        done()
      },
      registered: Promise.resolve()
    }
    made.registered = new Promise<void>((resolve) => options.emitter.on(name, made.listener, () => resolve()))
    topics.set(name, topic = made)
    return topic
  }

  function leave (member: Member): void {
    const group = member.group
    if (!group) return
    member.group = null
    member.release()
    group.members.delete(member)
    const topic = group.topic
    topic.size--
    if (group.members.size === 0) topic.groups.delete(group.key)
    if (topic.size === 0 && topics.get(topic.name) === topic) {
      topics.delete(topic.name)
      // Removing before the registration completed would leave the listener behind.
      void topic.registered.then(() => options.emitter.removeListener(topic.name, topic.listener, () => {}))
    }
  }

  return {
    /**
     * Adds a subscriber to a topic; resolves once the topic's listener is registered (with Redis,
     * after the SUBSCRIBE round trip), so an event published after this resolves reaches it.
     */
    async add (
      topicName: string,
      run: Admission,
      payer: Payer,
      sink: SubscriptionSink,
      release: () => void,
      schema: GraphQLSchema
    ): Promise<Subscription> {
      const topic = topicOf(topicName)
      let planId = planIds.get(run.operation)
      if (planId === undefined) planIds.set(run.operation, (planId = nextPlanId++))
      const scope = scopeOf(run.operation, payer.caller, schema)
      const key = `${planId}\n${scope}\n${JSON.stringify(run.variables)}`
      let group = topic.groups.get(key)
      if (!group) {
        // `authenticated` runs as a NonOwner per event (perOwner), the others as executedAs says.
        const caller = executedAs(scope, payer.caller)
        const perOwner = scope === 'authenticated'
        topic.groups.set(key, (group = { key, topic, run: { ...run, caller }, perOwner, members: new Set() }))
      }
      const member = new Member(sink, payer, group, release)
      group.members.add(member)
      topic.size++
      await topic.registered
      return { stop: () => leave(member) }
    },
    /** Topics listened to, and subscribers in all. */
    get stats () {
      let subscribers = 0
      for (const topic of topics.values()) subscribers += topic.size
      return { topics: topics.size, subscribers }
    }
  }
}

export type Fanout = ReturnType<typeof createFanout>
