// A field whose value depends on who asks says so in the SDL (@auth, or @cacheControl(scope: PRIVATE)):
// answers are shared between callers by that declaration alone (routes/graphql/answer-scope.ts: the
// response cache, its Cache-Control, the subscription fan-out). This test runs every resolver that can
// be part of a shared answer (Query fields, type fields, Subscription `resolve`s; not mutations, never
// shared) with a domain context whose `caller` records being read, and fails on a field that read it
// without a declaration. A throwaway `me` field shows the check failing.
//
// What it catches: a resolver, or any domain function or loader it calls, reading `ctx.caller` on the
// path that sample arguments and sample rows take. What it cannot see: a read only on another branch
// (arguments or rows of another shape), or a caller that reaches a resolver by another road than the
// domain context. Those still cannot leak through a shared answer: every answer shared by all callers
// is executed as nobody (cached-answers.ts, fanout.ts), so such a field answers as for an anonymous
// caller; this test is there so that it is declared instead of answering wrongly.
import { test } from 'tap'
import {
  buildSchema,
  getNamedType,
  isListType,
  isNonNullType,
  isObjectType,
  type GraphQLArgument,
  type GraphQLInputType
} from 'graphql'
import { createDomainContext, type Caller, type DomainContext } from '../app/domain/context.ts'
import { getUser } from '../app/domain/users.ts'
import { openSqliteStore } from '../app/store/sqlite.ts'
import type { Store } from '../app/store/types.ts'
import { callerDependenceOf } from '../routes/graphql/answer-scope.ts'
import { resolvers } from '../routes/graphql/resolvers.ts'
import { schemaSDL } from '../routes/graphql/schema.ts'
import { subscriptionResolvers } from '../routes/graphql/subscriptions.ts'

type Resolver = (parent: unknown, args: Record<string, unknown>, context: unknown, info: unknown) => unknown
type ResolverMap = Record<string, Record<string, Resolver | { resolve?: Resolver }>>

/** A value of an argument's type that passes the domain's input rules, so the resolver runs its course. */
function sampleArgument (arg: GraphQLArgument, ids: { user: string }): unknown {
  const type: GraphQLInputType = isNonNullType(arg.type) ? arg.type.ofType : arg.type
  const named = getNamedType(type).name
  const one = named === 'Int' ? 1 : named === 'ID' ? ids.user : named === 'Boolean' ? true : 'general'
  return isListType(type) ? [one] : one
}

async function fixture () {
  const store = openSqliteStore(':memory:')
  const user = await store.createUser({ name: 'Ann', email: 'ann@example.com' })
  const message = await store.createMessage({ roomId: 'general', content: 'hi', authorId: user.id })
  return { store, user, message }
}

/**
 * The fields of `sdl` whose resolver in `map` read the caller while the SDL declares no dependence on it
 * (`flagged`), and every field whose resolver was run (`checked`), as `Type.field`.
 */
async function undeclaredCallerReads (
  store: Store, sdl: string, map: ResolverMap, samples: { user: string; parent: unknown }
): Promise<{ flagged: string[]; checked: string[] }> {
  const schema = buildSchema(sdl)
  const flagged: string[] = []
  const checked: string[] = []
  for (const [typeName, fields] of Object.entries(map)) {
    if (typeName === 'Mutation') continue
    const type = schema.getType(typeName)
    if (!isObjectType(type)) continue
    for (const [fieldName, entry] of Object.entries(fields)) {
      const resolve = typeof entry === 'function' ? entry : entry.resolve
      const field = type.getFields()[fieldName]
      if (!resolve || !field || callerDependenceOf(field) !== 'none') continue
      let read = false
      const caller: Caller = { id: samples.user, role: 'USER' }
      const domain: DomainContext = createDomainContext({
        store,
        events: { publish: async () => {} },
        caps: { maxStringLength: 1000, maxListLength: 100, maxPageSize: 100 },
        cursorKey: Buffer.alloc(32, 1)
      }, caller)
      Object.defineProperty(domain, 'caller', { get () { read = true; return caller } })
      const args = Object.fromEntries(field.args.map((arg) => [arg.name, sampleArgument(arg, samples)]))
      try {
        const context = { domain, operationName: null, cost: { requested: 1, budget: 1, remaining: 1 } }
        await resolve(samples.parent, args, context, {})
      } catch { /* refused or failed: whether it read the caller first is what counts */ }
      checked.push(`${typeName}.${fieldName}`)
      if (read) flagged.push(`${typeName}.${fieldName}`)
    }
  }
  return { flagged, checked }
}

/** The service's own resolvers: the root and type fields, and what a subscription's events resolve with. */
function serviceResolvers (): ResolverMap {
  const subscription = subscriptionResolvers({ roomTopic: (room) => room, maxCountTarget: 10 })
  return { ...(resolvers as unknown as ResolverMap), Subscription: subscription as unknown as ResolverMap[string] }
}

test('every resolver that reads the caller is declared in the SDL', async (t) => {
  const { store, user, message } = await fixture()
  t.teardown(() => store.close())
  // A message is the parent of Message fields and the event of messageAdded; the rest take it as they can.
  const parent = { ...message, type: 'messageAdded', message }
  const samples = { user: user.id, parent }
  const { flagged, checked } = await undeclaredCallerReads(store, schemaSDL, serviceResolvers(), samples)
  t.same(flagged, [])
  t.same(checked.sort(), [
    'Message.author', 'Query.messages', 'Query.messagesConnection', 'Query.user', 'Query.users', 'Query.usersByIds',
    'Query.usersConnection', 'Subscription.count', 'Subscription.messageAdded'
  ], 'every resolver but the mutations\' was run')
})

test('a throwaway field that reads the caller without a declaration fails the check; declared, it passes', async (t) => {
  const { store, user, message } = await fixture()
  t.teardown(() => store.close())
  const me: Resolver = (_parent, _args, context) => {
    const { domain } = context as { domain: DomainContext }
    return domain.caller ? getUser(domain, domain.caller.id) : null
  }
  const map = { ...serviceResolvers(), Query: { ...serviceResolvers().Query, me } }
  const samples = { user: user.id, parent: message }
  const undeclared = `${schemaSDL}\nextend type Query { me: User }\n`
  t.same((await undeclaredCallerReads(store, undeclared, map, samples)).flagged, ['Query.me'], 'flagged')
  const declared = `${schemaSDL}\nextend type Query { me: User @cacheControl(scope: PRIVATE) }\n`
  t.same((await undeclaredCallerReads(store, declared, map, samples)).flagged, [], 'declared PRIVATE: passes')
  const guarded = `${schemaSDL}\nextend type Query { me: User @auth(requires: [SELF]) }\n`
  t.same((await undeclaredCallerReads(store, guarded, map, samples)).flagged, [], 'guarded by a rule: passes')
})
