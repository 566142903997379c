// Who may share an answer. Field rules (@auth) make an answer depend on its caller; an operation that
// selects no guarded field answers every caller alike. One definition for the two places that share
// answers between callers: the fan-out of subscription events (fanout.ts) and the response cache
// (http-exchange.ts).
import { TypeInfo, visit, visitWithTypeInfo, type GraphQLSchema } from 'graphql'
import type { Caller } from '../../app/domain/context.ts'
import type { OperationPlan } from './plan.ts'

/** Whether an operation's document selects a field guarded by @auth (decided once per plan). */
const guardedByPlan = new WeakMap<OperationPlan, boolean>()

/**
 * The scope an answer (a subscription event's) may be shared in. Field rules (@auth: `email` SELF/ADMIN, `adminNotes`
 * ADMIN) depend on the caller, so a plan that selects a guarded field shares only between callers who
 * may see the same: `anonymous`, `ADMIN` (any administrator sees everything), or `authenticated` (every
 * other caller, USER or SERVICE: it sees a guarded field only where SELF makes it the owner, so all but
 * the owners share one answer; see Bystander). A plan that selects no guarded field gives every caller
 * the same answer: one `public` scope, executed as an anonymous caller. The document is read whole (all
 * its operations and fragments): a guarded field anywhere in it makes the plan per-caller, which errs on
 * the safe side.
 */
export function scopeOf (
  operation: OperationPlan,
  caller: Caller | null,
  schema: GraphQLSchema
): 'public' | 'anonymous' | 'ADMIN' | 'authenticated' {
  let guarded = guardedByPlan.get(operation)
  if (guarded === undefined) {
    guarded = false
    const typeInfo = new TypeInfo(schema)
    visit(operation.document, visitWithTypeInfo(typeInfo, {
      Field () {
        if (typeInfo.getFieldDef()?.astNode?.directives?.some((d) => d.name.value === 'auth')) guarded = true
      }
    }))
    guardedByPlan.set(operation, guarded)
  }
  if (!guarded) return 'public'
  if (!caller) return 'anonymous'
  return caller.role === 'ADMIN' ? 'ADMIN' : 'authenticated'
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
