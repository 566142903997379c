// Query limits that run before execution: depth (a validation rule, cached with the document),
// cost (per request: it depends on variables and on the caller's budget) and literal input caps.
import {
  GraphQLError, Kind, getNamedType, getNullableType, isListType, isObjectType, isInterfaceType,
  type ASTVisitor, type FragmentDefinitionNode, type GraphQLField, type GraphQLObjectType, type GraphQLSchema,
  type OperationDefinitionNode, type SelectionSetNode, type ValidationContext, type ValueNode
} from 'graphql'
import { AppError } from '../errors.ts'
import { assertPageSize, assertWithinCaps, type InputCaps } from '../domain/input.ts'
import type { Caller } from '../domain/context.ts'
import type { Config } from '../config.ts'
import type { CostReport } from './context.ts'
import { factsOf } from './document.ts'
import type { DocumentNode } from 'graphql'

/** Depth of an operation: nested field levels, counting through named and inline fragments. */
export function operationDepth (selectionSet: SelectionSetNode, fragments: Map<string, FragmentDefinitionNode>, visiting = new Set<string>()): number {
  let max = 0
  for (const selection of selectionSet.selections) {
    let depth = 0
    if (selection.kind === Kind.FIELD) {
      depth = 1 + (selection.selectionSet ? operationDepth(selection.selectionSet, fragments, visiting) : 0)
    } else if (selection.kind === Kind.INLINE_FRAGMENT) {
      depth = operationDepth(selection.selectionSet, fragments, visiting)
    } else {
      const name = selection.name.value
      const fragment = fragments.get(name)
      // A cycle is reported by graphql-js's NoFragmentCyclesRule; here it only must not loop.
      if (fragment && !visiting.has(name)) {
        visiting.add(name)
        depth = operationDepth(fragment.selectionSet, fragments, visiting)
        visiting.delete(name)
      }
    }
    if (depth > max) max = depth
  }
  return max
}

export function depthLimitRule (maxDepth: number) {
  return function DepthLimit (context: ValidationContext): ASTVisitor {
    return {
      OperationDefinition (node: OperationDefinitionNode) {
        const fragments = new Map<string, FragmentDefinitionNode>()
        for (const d of context.getDocument().definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d)
        const depth = operationDepth(node.selectionSet, fragments)
        if (depth > maxDepth) {
          context.reportError(new GraphQLError(
            `Query depth ${depth} exceeds the maximum depth of ${maxDepth}`,
            { nodes: [node], extensions: { code: 'DEPTH_LIMIT_EXCEEDED', depth, maxDepth } }
          ))
        }
        return false
      }
    }
  }
}

/** Literal strings and lists in the document obey the same caps as variables (cached with the document). */
export function literalCapsRule (caps: InputCaps) {
  return function LiteralCaps (context: ValidationContext): ASTVisitor {
    const check = (node: ValueNode) => {
      try {
        assertWithinCaps(literalValue(node), caps, 'argument')
      } catch (err) {
        const e = err as AppError
        context.reportError(new GraphQLError(e.message, { nodes: [node], extensions: { code: e.code, ...e.details } }))
      }
    }
    return {
      Argument (node) { check(node.value); return false },
      VariableDefinition (node) { if (node.defaultValue) check(node.defaultValue); return false }
    }
  }
}

function literalValue (node: ValueNode): unknown {
  switch (node.kind) {
    case Kind.STRING: return node.value
    case Kind.LIST: return node.values.map(literalValue)
    case Kind.OBJECT: return Object.fromEntries(node.fields.map((f) => [f.name.value, literalValue(f.value)]))
    default: return null
  }
}

/** Arguments whose value multiplies the cost of a list field's selection (and is capped as a page size). */
const PAGE_ARGUMENTS = ['limit', 'first', 'last']

/**
 * Cost of an operation: a leaf costs 1, an object field 1 plus its selection, a list field its
 * page argument (literal, variable or default) times the cost of its selection. Aliases and
 * repeated fields are each priced, so alias bombs are covered by the budget.
 */
export function operationCost (
  schema: GraphQLSchema,
  operation: OperationDefinitionNode,
  fragments: Map<string, FragmentDefinitionNode>,
  variables: Record<string, unknown>,
  caps: Pick<InputCaps, 'maxPageSize'>
): number {
  const root = operation.operation === 'query' ? schema.getQueryType() : operation.operation === 'mutation' ? schema.getMutationType() : schema.getSubscriptionType()
  if (!root) return 0
  const defaults = new Map<string, unknown>()
  for (const v of operation.variableDefinitions ?? []) {
    if (v.defaultValue?.kind === Kind.INT) defaults.set(v.variable.name.value, Number(v.defaultValue.value))
  }
  const argumentValue = (node: ValueNode): unknown => {
    if (node.kind === Kind.VARIABLE) return variables[node.name.value] ?? defaults.get(node.name.value)
    if (node.kind === Kind.INT) return Number(node.value)
    if (node.kind === Kind.LIST) return node.values
    return undefined
  }

  const selectionCost = (parent: GraphQLObjectType, selectionSet: SelectionSetNode, visiting: Set<string>): number => {
    let total = 0
    for (const selection of selectionSet.selections) {
      if (selection.kind === Kind.FIELD) {
        const name = selection.name.value
        if (name === '__typename') continue
        const field: GraphQLField<unknown, unknown> | undefined = name === '__schema' || name === '__type' ? undefined : parent.getFields()[name]
        if (!field) { total += 1; continue }
        const named = getNamedType(field.type)
        const childCost = selection.selectionSet && (isObjectType(named) || isInterfaceType(named))
          ? selectionCost(named as GraphQLObjectType, selection.selectionSet, visiting)
          : 0
        if (isListType(getNullableType(field.type))) {
          let multiplier = 1
          for (const arg of field.args) {
            const node = selection.arguments?.find((a) => a.name.value === arg.name)
            const value = (node ? argumentValue(node.value) : undefined) ?? arg.defaultValue
            if (PAGE_ARGUMENTS.includes(arg.name) && typeof value === 'number') {
              multiplier = assertPageSize(value, caps, arg.name)
            } else if (isListType(getNullableType(arg.type)) && Array.isArray(value)) {
              // A list of keys (e.g. ids) returns one item per key.
              multiplier = Math.max(multiplier, value.length)
            }
          }
          total += multiplier * Math.max(1, childCost)
        } else {
          total += 1 + childCost
        }
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        const typeName = selection.typeCondition?.name.value
        const type = typeName ? schema.getType(typeName) : parent
        total += selectionCost(isObjectType(type) ? type : parent, selection.selectionSet, visiting)
      } else {
        const name = selection.name.value
        const fragment = fragments.get(name)
        if (!fragment || visiting.has(name)) continue
        visiting.add(name)
        const type = schema.getType(fragment.typeCondition.name.value)
        total += selectionCost(isObjectType(type) ? type : parent, fragment.selectionSet, visiting)
        visiting.delete(name)
      }
    }
    return total
  }
  return selectionCost(root, operation.selectionSet, new Set())
}

export function budgetFor (caller: Caller | null, budgets: Config['limits']['budgets']): number {
  return caller ? budgets[caller.role] : budgets.anonymous
}

/** Spends cost units from the caller's rate window: what is left (negative when over) and when the window resets. */
export type SpendCostUnits = (caller: Caller | null, ip: string, cost: number) => Promise<{ remaining: number; resetMs: number }>

/**
 * The checks every operation passes before it runs, whatever carries it (HTTP, WebSocket, SSE): the
 * variables obey the input caps, the cost fits the caller's budget, and the caller's cost-rate window
 * can pay for it (whichever budget is exhausted first blocks). Throws before anything has run.
 */
export async function priceOperation (
  schema: GraphQLSchema,
  document: DocumentNode,
  operation: OperationDefinitionNode,
  variables: Record<string, unknown> | undefined,
  caller: Caller | null,
  ip: string,
  limits: Config['limits'],
  spend: SpendCostUnits
): Promise<CostReport> {
  if (variables) assertWithinCaps(variables, limits, 'variables')
  const requested = operationCost(schema, operation, factsOf(document).fragments, variables ?? {}, limits)
  const budget = budgetFor(caller, limits.budgets)
  if (requested > budget) {
    throw new AppError('COST_LIMIT_EXCEEDED', `Query cost ${requested} exceeds the budget of ${budget} for this caller`, { cost: requested, budget })
  }
  const { remaining, resetMs } = await spend(caller, ip, requested)
  if (remaining < 0) {
    const retryAfter = Math.ceil(resetMs / 1000)
    throw new AppError('RATE_LIMITED', `Cost rate limit exceeded: at most ${limits.rateCostUnits} cost units per ${Math.round(limits.rateWindowMs / 1000)} s; retry in ${retryAfter} s`, { cost: requested, retryAfter })
  }
  return { requested, budget, remaining }
}
