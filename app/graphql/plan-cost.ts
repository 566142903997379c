// What an operation costs, found in the one walk over its selections that plan.ts makes per operation:
// a leaf costs 1, an object field 1 plus its selection, a list its page size times its selection, a
// connection 1 plus its selection with its edges multiplied by its page size. A cost is a number when
// it does not depend on the variables, otherwise a small function evaluated per request. The same
// walk finds the depth and whether the operation reaches introspection.
import {
  Kind,
  getNamedType,
  getNullableType,
  isInterfaceType,
  isListType,
  isObjectType,
  type FragmentDefinitionNode,
  type GraphQLField,
  type GraphQLObjectType,
  type GraphQLSchema,
  type OperationDefinitionNode,
  type SelectionSetNode,
  type ValueNode
} from 'graphql'
import { DEFAULT_PAGE_SIZE, assertPageSize, type InputCaps } from '../core/domain/input.ts'

/** Cost of a selection: a number when it does not depend on the variables. */
export type Cost = number | CostFunction
export interface CostFunction {
  (variables: Record<string, unknown>, memo: Map<CostFunction, number>): number
}

/** Arguments whose value multiplies the cost of a list field's selection (and is capped as a page size). */
export const PAGE_ARGUMENTS = new Set(['limit', 'first', 'last'])
export const INTROSPECTION_FIELDS = new Set(['__schema', '__type'])

/** Evaluates a cost with the operation's variable defaults under the sent variables. */
export function costWithDefaults (
  cost: Cost,
  operation: OperationDefinitionNode
): (variables: Record<string, unknown>) => number {
  if (typeof cost === 'number') return () => cost
  const defaults: Record<string, unknown> = {}
  for (const v of operation.variableDefinitions ?? []) {
    if (v.defaultValue?.kind === Kind.INT) defaults[v.variable.name.value] = Number(v.defaultValue.value)
  }
  const hasDefaults = Object.keys(defaults).length > 0
  return (variables) => cost(hasDefaults ? { ...defaults, ...withoutNulls(variables) } : variables, new Map())
}

function withoutNulls (variables: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const key in variables) if (variables[key] != null) out[key] = variables[key]
  return out
}

interface SelectionFacts {
  depth: number
  introspects: boolean
  cost: Cost
  /**
   * The cost of the lists in this selection that have no page argument of their own (a connection's
   * edges): the connection field holding the selection multiplies it by its page size; anywhere else
   * it counts once.
   */
  itemsCost: Cost
}

/** What multiplies a list's or a connection's items: a number, or a function of the variables. */
type Multiplier = number | ((variables: Record<string, unknown>) => number)

function scale (multiplier: Multiplier, cost: Cost): Cost {
  if (typeof multiplier === 'number' && typeof cost === 'number') return multiplier * cost
  if (cost === 0) return 0
  return (variables, memo) => (typeof multiplier === 'number' ? multiplier : multiplier(variables)) *
    (typeof cost === 'number' ? cost : evaluate(cost, variables, memo))
}

/** A list item costs at least 1, even with an empty-priced selection. */
function atLeastOne (cost: Cost): Cost {
  if (typeof cost === 'number') return Math.max(1, cost)
  return (variables, memo) => Math.max(1, evaluate(cost, variables, memo))
}

/** Sums costs; a function only when one of the parts is. */
export function sum (parts: Cost[]): Cost {
  let constant = 0
  const functions: CostFunction[] = []
  for (const part of parts) {
    if (typeof part === 'number') constant += part
    else functions.push(part)
  }
  if (functions.length === 0) return constant
  return (variables, memo) => {
    let total = constant
    for (const f of functions) total += evaluate(f, variables, memo)
    return total
  }
}

/** Evaluates a shared cost function once per request (fragments spread many times are shared). */
function evaluate (f: CostFunction, variables: Record<string, unknown>, memo: Map<CostFunction, number>): number {
  let value = memo.get(f)
  if (value === undefined) memo.set(f, value = f(variables, memo))
  return value
}

/**
 * The one walk over selections: a leaf costs 1 (`__typename` too), an object field 1 plus its
 * selection, a list field its page argument (literal, variable or default) times its selection (at
 * least 1), a list of keys one item per key, a connection (an object field with `first`/`last`) 1 plus
 * its selection with its edges multiplied by its page size. Aliases and repeats are each priced (alias bombs).
 */
export class SelectionAnalysis {
  readonly #schema: GraphQLSchema
  readonly #fragments: Map<string, FragmentDefinitionNode>
  readonly #caps: InputCaps
  /** Per fragment and the type it is read as. */
  readonly #fragmentFacts = new Map<string, SelectionFacts>()
  readonly #visiting = new Set<string>()

  constructor (schema: GraphQLSchema, fragments: Map<string, FragmentDefinitionNode>, caps: InputCaps) {
    this.#schema = schema
    this.#fragments = fragments
    this.#caps = caps
  }

  of (parent: GraphQLObjectType, selectionSet: SelectionSetNode): SelectionFacts {
    let depth = 0
    let introspects = false
    const costs: Cost[] = []
    const itemsCosts: Cost[] = []
    const take = (facts: SelectionFacts, levels: number) => {
      if (facts.depth + levels > depth) depth = facts.depth + levels
      introspects ||= facts.introspects
      costs.push(facts.cost)
      itemsCosts.push(facts.itemsCost)
    }
    for (const selection of selectionSet.selections) {
      if (selection.kind === Kind.FIELD) {
        take(this.#field(parent, selection.name.value, selection), 0)
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        take(this.of(this.#typeOr(selection.typeCondition?.name.value, parent), selection.selectionSet), 0)
      } else {
        const facts = this.#fragment(parent, selection.name.value)
        if (facts) take(facts, 0)
      }
    }
    return { depth, introspects, cost: sum(costs), itemsCost: sum(itemsCosts) }
  }

  #field (parent: GraphQLObjectType, name: string, node: import('graphql').FieldNode): SelectionFacts {
    if (INTROSPECTION_FIELDS.has(name)) {
      // The schema's own description: one level, priced by its number of fields.
      return {
        depth: 1,
        introspects: true,
        cost: 1 + (node.selectionSet ? this.#fieldCount(node.selectionSet) : 0),
        itemsCost: 0
      }
    }
    const field: GraphQLField<unknown, unknown> | undefined = parent.getFields()[name]
    if (!field || !node.selectionSet) return { depth: 1, introspects: false, cost: 1, itemsCost: 0 }
    const named = getNamedType(field.type)
    const child = isObjectType(named) || isInterfaceType(named)
      ? this.of(named as GraphQLObjectType, node.selectionSet)
      : { depth: 0, introspects: false, cost: 0, itemsCost: 0 }
    const facts = { depth: child.depth + 1, introspects: child.introspects }
    if (isListType(getNullableType(field.type))) {
      // A list: its multiplier times its selection (at least 1). Without a page or key argument of its
      // own it is the items of the connection it lies in (edges), which that connection multiplies.
      const multiplier = this.#multiplier(field, node, 1)
      const cost = scale(multiplier ?? 1, atLeastOne(sum([child.cost, child.itemsCost])))
      return multiplier === null ? { ...facts, cost: 0, itemsCost: cost } : { ...facts, cost, itemsCost: 0 }
    }
    // An object: 1 plus its selection. A connection (an object field with a page argument) multiplies
    // the lists it holds (edges, and the node under each) by its page size; pageInfo is priced once.
    // Without a page size given it reads the default page, and is priced so.
    const multiplier = this.#multiplier(field, node, DEFAULT_PAGE_SIZE)
    return { ...facts, cost: sum([1, child.cost, scale(multiplier ?? 1, child.itemsCost)]), itemsCost: 0 }
  }

  /**
   * A field's multiplier: the largest of its page arguments (literal, variable or default; capped as a
   * page size) and the lengths of its list arguments; `absent` when none is given; null when the field
   * has no such argument.
   */
  #multiplier (field: GraphQLField<unknown, unknown>, node: import('graphql').FieldNode, absent: number): Multiplier | null {
    const variable: ((variables: Record<string, unknown>) => number)[] = []
    let constant = 0
    let any = false
    for (const arg of field.args) {
      const given = node.arguments?.find((a) => a.name.value === arg.name)?.value
      const page = PAGE_ARGUMENTS.has(arg.name)
      const keys = isListType(getNullableType(arg.type))
      if (!page && !keys) continue
      any = true
      const caps = this.#caps
      const measure = (value: unknown): number => {
        if (page && typeof value === 'number') return assertPageSize(value, caps, arg.name)
        if (keys && Array.isArray(value)) return Math.max(1, value.length)
        return 0
      }
      if (given?.kind === Kind.VARIABLE) {
        const name = given.name.value
        const fallback = arg.defaultValue
        variable.push((variables) => measure(variables[name] ?? fallback))
      } else {
        constant = Math.max(constant, measure(given === undefined ? arg.defaultValue : literalNumberOrList(given)))
      }
    }
    if (!any) return null
    if (variable.length === 0) return constant || absent
    return (variables) => {
      let multiplier = constant
      for (const m of variable) multiplier = Math.max(multiplier, m(variables))
      return multiplier || absent
    }
  }

  #fragment (parent: GraphQLObjectType, name: string): SelectionFacts | undefined {
    const fragment = this.#fragments.get(name)
    // Unknown fragments and cycles are validation errors; here they only must not loop.
    if (!fragment || this.#visiting.has(name)) return undefined
    const type = this.#typeOr(fragment.typeCondition.name.value, parent)
    const key = `${name}\u0000${type.name}`
    let facts = this.#fragmentFacts.get(key)
    if (!facts) {
      this.#visiting.add(name)
      facts = this.of(type, fragment.selectionSet)
      this.#visiting.delete(name)
      // A shared function is evaluated once per request (see evaluate), wherever it is spread.
      this.#fragmentFacts.set(key, facts)
    }
    return facts
  }

  /** Fields under an introspection field, through fragments (each fragment counted once per spread, memoised). */
  #fieldCount (selectionSet: SelectionSetNode): number {
    let count = 0
    for (const selection of selectionSet.selections) {
      if (selection.kind === Kind.FIELD) {
        count += 1 + (selection.selectionSet ? this.#fieldCount(selection.selectionSet) : 0)
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        count += this.#fieldCount(selection.selectionSet)
      } else {
        count += this.#fragmentFieldCount(selection.name.value)
      }
    }
    return count
  }

  readonly #fragmentCounts = new Map<string, number>()
  #fragmentFieldCount (name: string): number {
    const fragment = this.#fragments.get(name)
    if (!fragment || this.#visiting.has(name)) return 0
    let count = this.#fragmentCounts.get(name)
    if (count === undefined) {
      this.#visiting.add(name)
      count = this.#fieldCount(fragment.selectionSet)
      this.#visiting.delete(name)
      this.#fragmentCounts.set(name, count)
    }
    return count
  }

  #typeOr (name: string | undefined, fallback: GraphQLObjectType): GraphQLObjectType {
    const type = name ? this.#schema.getType(name) : undefined
    return isObjectType(type) ? type : fallback
  }
}

function literalNumberOrList (node: ValueNode): unknown {
  if (node.kind === Kind.INT) return Number(node.value)
  if (node.kind === Kind.LIST) return node.values
  return undefined
}
