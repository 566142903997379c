// A field whose value depends on who asks says so in the SDL (@auth, or @cacheControl(scope: PRIVATE)):
// answers are shared between callers by that declaration alone (app/graphql/answer-scope.ts: the
// response cache, its Cache-Control, the subscription fan-out). This test runs every resolver that can
// be part of a shared answer (Query fields, type fields, Subscription `resolve`s; not mutations, never
// shared) with a context whose caller-specific parts record being read (the domain context's `caller`,
// and the request's cost report, which is the caller's budget), and fails on a field that read one
// without a declaration. Throwaway fields show the check failing.
//
// What it catches: a read of the caller by the resolver, or by any domain function it calls, on the
// path that sample arguments and sample rows take, until the resolver's promise settles (loaders
// included: their batches run before it settles, and they are built from the store alone, without the
// caller); and a read made later by the value it returned, through a getter (the value is serialised,
// as the answer would be). What it cannot see: a read only on another branch (arguments or rows of
// another shape than the samples', a refusal thrown before the read), a read in a function the value
// carries for a default resolver to call, or a caller that reaches a resolver by another road than its
// context (a module-level variable). Those still cannot leak through an answer every caller shares:
// that answer is executed as nobody (cached-answers.ts, fanout.ts), so such a field answers every caller
// as it would an anonymous one; this test is there so that it is declared instead of answering wrongly.
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
import { createDomainContext, type Caller, type DomainContext } from '../app/core/domain/context.ts'
import { getUser } from '../app/core/domain/users.ts'
import type { CostReport } from '../app/core/limits/cost-report.ts'
import { openSqliteStore } from '../app/core/store/sqlite.ts'
import type { MessageRow, Store } from '../app/core/store/types.ts'
import { callerDependenceOf } from '../app/graphql/answer-scope.ts'
import type { GraphQLContext } from '../app/graphql/context.ts'
import { resolvers } from '../app/graphql/resolvers.ts'
import { schemaSDL } from '../app/graphql/schema.ts'
import { subscriptionResolvers } from '../app/graphql/subscriptions.ts'

type Resolver = (parent: any, args: Record<string, unknown>, context: GraphQLContext, info: unknown) => unknown
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
 * A resolver's context whose caller-specific parts (the domain's `caller`, the cost report) call
 * `onRead` when read.
 */
function recordingContext (store: Store, caller: Caller, onRead: () => void): GraphQLContext {
  const domain: DomainContext = createDomainContext({
    store,
    events: { publish: async () => {} },
    caps: { maxStringLength: 1000, maxListLength: 100, maxPageSize: 100 },
    cursorKey: Buffer.alloc(32, 1)
  }, caller)
  Object.defineProperty(domain, 'caller', { get () { onRead(); return caller } })
  const cost: CostReport = { requested: 1, budget: 1000, remaining: 999 }
  return {
    domain,
    operationName: null,
    get cost () { onRead(); return cost }
  }
}

/**
 * The fields of `sdl` whose resolver in `map` read the caller while the SDL declares no dependence on it
 * (`flagged`), and every field whose resolver was run (`checked`), as `Type.field`, sorted.
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
      const context = recordingContext(store, { id: samples.user, role: 'USER' }, () => { read = true })
      const args = Object.fromEntries(field.args.map((arg) => [arg.name, sampleArgument(arg, samples)]))
      try {
        // Serialised as an answer would be: a getter of the value that reads the caller runs now.
        JSON.stringify(await resolve(samples.parent, args, context, {}))
      } catch { /* refused or failed: whether it read the caller first is what counts */ }
      checked.push(`${typeName}.${fieldName}`)
      if (read) flagged.push(`${typeName}.${fieldName}`)
    }
  }
  return { flagged: flagged.sort(), checked: checked.sort() }
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
  t.same(checked, [
    'Message.author', 'Query.messages', 'Query.messagesConnection', 'Query.user', 'Query.users', 'Query.usersByIds',
    'Query.usersConnection', 'Subscription.count', 'Subscription.messageAdded'
  ], 'every resolver but the mutations\' was run')
})

test('throwaway fields that read the caller without a declaration fail the check; declared, they pass', async (t) => {
  const { store, user, message } = await fixture()
  t.teardown(() => store.close())
  const service = serviceResolvers()
  const map: ResolverMap = {
    ...service,
    Query: {
      ...service.Query,
      // The caller's own record.
      me: (_parent, _args, { domain }) => domain.caller ? getUser(domain, domain.caller.id) : null,
      // The caller's budget (the cost report is the caller's).
      budgetLeft: (_parent, _args, context) => context.cost.remaining,
      // A value that reads the caller only once serialised.
      viewer: (_parent, _args, { domain }) => ({ get id () { return domain.caller?.id ?? null } })
    },
    // A viewer flag on a type field.
    Message: {
      ...service.Message,
      viewerIsAuthor: (row: MessageRow, _args, { domain }) => domain.caller?.id === row.authorId
    }
  }
  const samples = { user: user.id, parent: message }
  const sdlWith = (declaration: string) => `${schemaSDL}
type Viewer { id: ID }
extend type Query { me: User ${declaration} budgetLeft: Int ${declaration} viewer: Viewer ${declaration} }
extend type Message { viewerIsAuthor: Boolean ${declaration} }
`
  t.same((await undeclaredCallerReads(store, sdlWith(''), map, samples)).flagged,
    ['Message.viewerIsAuthor', 'Query.budgetLeft', 'Query.me', 'Query.viewer'], 'all flagged')
  t.same((await undeclaredCallerReads(store, sdlWith('@cacheControl(scope: PRIVATE)'), map, samples)).flagged, [],
    'declared PRIVATE: they pass')
  t.same((await undeclaredCallerReads(store, sdlWith('@auth(requires: [SELF])'), map, samples)).flagged, [],
    'guarded by a rule: they pass')
  t.same((await undeclaredCallerReads(store, sdlWith('@cacheControl(scope: PUBLIC)'), map, samples)).flagged,
    ['Message.viewerIsAuthor', 'Query.budgetLeft', 'Query.me', 'Query.viewer'], 'declared PUBLIC: flagged still')
})
