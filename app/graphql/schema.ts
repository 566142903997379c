// The executable schema's own rules, apart from who builds it: the SDL, the @auth directive's policy
// (hosted by mercurius-auth, which wraps the protected fields' resolvers in the schema itself) and the
// deadline check every resolver makes first. Mercurius builds the schema from these (index.ts).
import { readFileSync } from 'node:fs'
import { isObjectType, type ArgumentNode, type DirectiveNode, type GraphQLSchema, type ListValueNode } from 'graphql'
import { meets, type AccessRequirement } from '../core/domain/authorization.ts'
import { assertBeforeDeadline } from '../core/domain/context.ts'
import { forbidden, unauthenticated } from '../core/errors.ts'
import type { GraphQLContext } from './context.ts'

export const schemaSDL = readFileSync(new URL('./schema.graphql', import.meta.url), 'utf8')

function requirementsOf (directive: DirectiveNode): AccessRequirement[] {
  const requires = directive.arguments?.find((a: ArgumentNode) => a.name.value === 'requires')?.value as
    ListValueNode | undefined
  return (requires?.values ?? []).map((v) => (v as { value: string }).value as AccessRequirement)
}

/** mercurius-auth's applyPolicy for @auth: true when the caller meets the field's requirements, else its error. */
export function authPolicy () {
  // Directive requirements are parsed once per directive node, not per resolved field.
  const parsedRequirements = new WeakMap<DirectiveNode, AccessRequirement[]>()
  return async (policy: DirectiveNode, parent: { id?: string }, _args: unknown, context: GraphQLContext) => {
    let requirements = parsedRequirements.get(policy)
    if (!requirements) parsedRequirements.set(policy, requirements = requirementsOf(policy))
    const caller = context.domain.caller
    if (meets(caller, requirements, parent.id ?? null)) return true
    return caller ? forbidden('Not allowed to read this field') : unauthenticated()
  }
}

/**
 * Every field that has a resolver (root fields, Message.author, the @auth-wrapped fields) first checks
 * the operation's deadline: once "Query timeout" has been answered, the rest of the execution reads
 * and writes nothing more. (The deadline timer cannot interrupt synchronous work; that work is bounded
 * by the cost budget and the answer cap instead.) Plain property fields have no resolver, so graphql-jit
 * keeps inlining them.
 */
export function stopResolversAtDeadline (schema: GraphQLSchema): void {
  for (const type of Object.values(schema.getTypeMap())) {
    if (!isObjectType(type) || type.name.startsWith('__') || type === schema.getSubscriptionType()) continue
    for (const field of Object.values(type.getFields())) {
      const resolve = field.resolve
      if (!resolve) continue
      field.resolve = (parent, args, context: GraphQLContext, info) => {
        assertBeforeDeadline(context.domain)
        return resolve(parent, args, context, info)
      }
    }
  }
}
