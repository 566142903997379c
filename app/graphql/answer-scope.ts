// Who may share an answer. A field whose value depends on who asks says so in the SDL: a rule (@auth) or
// @cacheControl(scope: PRIVATE). An operation that selects no such field answers every caller alike.
// One declaration, read here for the two places that share answers between callers: the fan-out of
// subscription events (fanout.ts) and the response cache with its Cache-Control (cached-answers.ts).
import { TypeInfo, visit, visitWithTypeInfo, type GraphQLField, type GraphQLSchema } from 'graphql'
import type { Caller } from '../core/domain/context.ts'
import type { OperationPlan } from './plan.ts'

/**
 * How a field's value depends on who asks, as its SDL declares: `rules` for an @auth rule (the value
 * or its refusal follows from the caller's role and ownership), `private` for @cacheControl(scope:
 * PRIVATE) (anything about the caller), `none` otherwise.
 */
export function callerDependenceOf (field: Pick<GraphQLField<unknown, unknown>, 'astNode'>): CallerDependence {
  let dependence: CallerDependence = 'none'
  for (const directive of field.astNode?.directives ?? []) {
    if (directive.name.value === 'auth') dependence = dependence === 'none' ? 'rules' : dependence
    const scope = directive.name.value === 'cacheControl'
      ? directive.arguments?.find((a) => a.name.value === 'scope')?.value
      : undefined
    if (scope?.kind === 'EnumValue' && scope.value === 'PRIVATE') dependence = 'private'
  }
  return dependence
}

export type CallerDependence = 'none' | 'rules' | 'private'

/** How an operation's answer depends on its caller (decided once per plan). */
const dependenceByPlan = new WeakMap<OperationPlan, CallerDependence>()

/**
 * How an operation's answer depends on its caller: the strongest dependence of the fields its document
 * selects (all its operations and fragments, which errs on the safe side).
 */
export function callerDependence (operation: OperationPlan, schema: GraphQLSchema): CallerDependence {
  let dependence = dependenceByPlan.get(operation)
  if (dependence === undefined) {
    let found: CallerDependence = 'none'
    const typeInfo = new TypeInfo(schema)
    visit(operation.document, visitWithTypeInfo(typeInfo, {
      Field () {
        const field = typeInfo.getFieldDef()
        const own = field ? callerDependenceOf(field) : 'none'
        if (own === 'private' || (own === 'rules' && found === 'none')) found = own
      }
    }))
    dependenceByPlan.set(operation, dependence = found)
  }
  return dependence
}

/**
 * The scope an answer (a subscription event's) may be shared in. A plan that selects no caller-dependent
 * field gives every caller the same answer: one `public` scope, executed as an anonymous caller.
 * Anonymous callers share `anonymous`. A private field makes each caller's answer their own
 * (`caller:<role>:<id>`). Rules alone (`email` SELF/ADMIN, `adminNotes` ADMIN) share between callers who
 * may see the same: `ADMIN` (any administrator sees everything), or `authenticated` (every other caller,
 * USER or SERVICE: it sees a guarded field only where SELF makes it the owner, so all but the owners
 * share one answer; see NonOwner).
 */
export function scopeOf (operation: OperationPlan, caller: Caller | null, schema: GraphQLSchema): string {
  const dependence = callerDependence(operation, schema)
  if (dependence === 'none') return 'public'
  if (!caller) return 'anonymous'
  if (dependence === 'private') return `caller:${caller.role}:${caller.id}`
  return caller.role === 'ADMIN' ? 'ADMIN' : 'authenticated'
}

/**
 * The caller a shared answer of `scope` (scopeOf's, or cacheScopeOf's) is executed as: nobody for
 * everyone's and the anonymous answers, so a resolver that reads the caller without saying so in the SDL
 * cannot put one caller's value in an answer others are served; nobody for `authenticated` too (the
 * fan-out runs it as a NonOwner per event); the caller for an administrators' answer or a caller's own.
 */
export function executedAs (scope: string, caller: Caller | null): Caller | null {
  return scope === 'public' || scope === 'anonymous' || scope === 'authenticated' ? null : caller
}

/**
 * The response cache's scope of an answer: `scopeOf`, with `authenticated` narrowed to the one caller
 * (`user:<id>`): a cached answer is not executed again, so the owners SELF lets see a guarded field
 * cannot be told apart afterwards, as the fan-out tells them apart per event.
 */
export function cacheScopeOf (operation: OperationPlan, caller: Caller | null, schema: GraphQLSchema): string {
  const scope = scopeOf(operation, caller, schema)
  return scope === 'authenticated' ? `user:${caller!.id}` : scope
}
