// One declaration, one reader: whether a field depends on its caller is said in the SDL (@auth, or
// @cacheControl(scope: PRIVATE)) and read by answer-scope.ts alone, for the response cache's key
// (cacheScopeOf), the fan-out's groups of subscribers (scopeOf) and Cache-Control (public only when the
// scope is). The fan-out is driven here directly, with an answer that says whom it was executed as.
import { test } from 'tap'
import { buildSchema, parse } from 'graphql'
import MQEmitter from 'mqemitter'
import type { Caller } from '../app/core/domain/context.ts'
import { cacheScopeOf, callerDependence, executedAs, scopeOf } from '../app/graphql/answer-scope.ts'
import { createFanout, type SubscriptionSink } from '../app/graphql/fanout.ts'
import type { Admission } from '../app/graphql/pipeline.ts'
import type { OperationPlan } from '../app/graphql/plan.ts'
import { schemaSDL } from '../app/graphql/schema.ts'

/** The service's schema with a throwaway viewer flag, declared as depending on who asks. */
const schema = buildSchema(`${schemaSDL}
extend type Message { viewerIsAuthor: Boolean @cacheControl(scope: PRIVATE) }
`)

/** One plan per text, as the pipeline keeps them; all answer-scope.ts reads of a plan is its document. */
const plans = new Map<string, OperationPlan>()
function planOf (text: string): OperationPlan {
  let plan = plans.get(text)
  if (!plan) plans.set(text, plan = { document: parse(text) } as OperationPlan)
  return plan
}

const PUBLIC = 'subscription { messageAdded(roomId: "r") { content author { name } } }'
const RULES = 'subscription { messageAdded(roomId: "r") { content author { email } } }'
const PRIVATE = 'subscription { messageAdded(roomId: "r") { content viewerIsAuthor } }'
/** A private field beside a rule's, in a fragment: the stronger declaration wins. */
const BOTH = 'subscription { messageAdded(roomId: "r") { ...M } } fragment M on Message { author { email } viewerIsAuthor }'

const ann: Caller = { id: 'ann', role: 'USER' }
const bob: Caller = { id: 'bob', role: 'USER' }
const root: Caller = { id: 'root', role: 'ADMIN' }
const callers = [null, ann, bob, root]

test('the fan-out\'s scope and the response cache\'s come from the one declaration', async (t) => {
  const scopes = (text: string) => {
    const plan = planOf(text)
    return {
      dependence: callerDependence(plan, schema),
      fanout: callers.map((caller) => scopeOf(plan, caller, schema)),
      cache: callers.map((caller) => cacheScopeOf(plan, caller, schema))
    }
  }
  t.same(scopes(PUBLIC), {
    dependence: 'none',
    fanout: ['public', 'public', 'public', 'public'],
    cache: ['public', 'public', 'public', 'public']
  }, 'nothing declared: every caller shares one answer (and Cache-Control may say public)')
  t.same(scopes(RULES), {
    dependence: 'rules',
    fanout: ['anonymous', 'authenticated', 'authenticated', 'ADMIN'],
    cache: ['anonymous', 'user:ann', 'user:bob', 'ADMIN']
  }, '@auth: shared by those the rules treat alike (the cache, unable to tell owners apart later, per user)')
  const ownScopes = {
    dependence: 'private',
    fanout: ['anonymous', 'caller:USER:ann', 'caller:USER:bob', 'caller:ADMIN:root'],
    cache: ['anonymous', 'caller:USER:ann', 'caller:USER:bob', 'caller:ADMIN:root']
  }
  t.same(scopes(PRIVATE), ownScopes, 'PRIVATE: each caller their own, administrators included, in both')
  t.same(scopes(BOTH), ownScopes, 'PRIVATE beside @auth, through a fragment: each caller their own')
})

/** A fan-out whose answers say whom they were executed as; `executions` lists them per event. */
function recordingFanout () {
  const emitter = MQEmitter()
  const executions: (string | null)[] = []
  const fanout = createFanout({
    emitter,
    answer: async (run) => {
      const as = run.caller?.id ?? null
      executions.push(as)
      return JSON.stringify({ as })
    },
    charge: async () => ({ refused: [], resetMs: 0 }),
    refusal: () => [],
    maxQueuedEvents: 10
  })
  const received: (string | null)[][] = []
  let arrived = 0
  let waiting: (() => void) | undefined
  const subscribe = async (text: string, caller: Caller | null) => {
    const mine: (string | null)[] = []
    received.push(mine)
    const sink: SubscriptionSink = {
      next (json) {
        mine.push((JSON.parse(json) as { as: string | null }).as)
        arrived++
        waiting?.()
      },
      end () {}
    }
    const run = { operation: planOf(text), variables: {}, caller } as unknown as Admission
    return fanout.add('room/r', run, { caller, ip: '192.0.2.1', cost: 1 }, sink, () => {}, schema)
  }
  /** Publishes one event and waits until every subscriber received it. */
  const publish = async () => {
    const expected = arrived + received.length
    const all = new Promise<void>((resolve) => { waiting = () => { if (arrived === expected) resolve() } })
    emitter.emit({ topic: 'room/r', payload: { type: 'messageAdded' } })
    await all
  }
  const close = () => new Promise<void>((resolve) => emitter.close(resolve))
  return { subscribe, publish, executions, received, close }
}

test('who a shared answer is executed as, for the fan-out and the cache alike: nobody unless it is one caller\'s', async (t) => {
  for (const caller of callers) {
    t.equal(executedAs(scopeOf(planOf(PUBLIC), caller, schema), caller), null, `a public answer, asked by ${caller?.id ?? 'nobody'}`)
    t.equal(executedAs(scopeOf(planOf(RULES), caller, schema), caller), caller?.role === 'ADMIN' ? caller : null,
      `rules only, asked by ${caller?.id ?? 'nobody'}: the administrators' as the administrator, others' as nobody (per event)`)
    t.equal(executedAs(cacheScopeOf(planOf(RULES), caller, schema), caller), caller,
      `rules only, cached for ${caller?.id ?? 'nobody'}: as that caller (a cached answer is never told apart again)`)
    t.equal(executedAs(scopeOf(planOf(PRIVATE), caller, schema), caller), caller, `a private field: as ${caller?.id ?? 'nobody'}`)
  }
})

test('the fan-out: a PRIVATE field\'s event is executed once per caller, as that caller; a public one once, as nobody', async (t) => {
  const own = recordingFanout()
  t.teardown(own.close)
  const subscriptions = [ann, ann, bob, root, null].map((caller) => own.subscribe(PRIVATE, caller))
  await Promise.all(subscriptions)
  await own.publish()
  t.same([...own.executions].sort(), ['ann', 'bob', null, 'root'].sort(), 'once per caller (Ann\'s two subscriptions share hers)')
  t.same(own.received, [['ann'], ['ann'], ['bob'], ['root'], [null]], 'each subscriber receives their own answer')

  const shared = recordingFanout()
  t.teardown(shared.close)
  await Promise.all([ann, bob, root, null].map((caller) => shared.subscribe(PUBLIC, caller)))
  await shared.publish()
  t.same(shared.executions, [null], 'one execution, as nobody')
  t.same(shared.received, [[null], [null], [null], [null]])
})
