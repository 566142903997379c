// A plan: everything about a GraphQL document that does not depend on the request, made once per
// document text and cached (pipeline.ts). Parsing (token-capped), validation
// (graphql-js's rules plus the literal input caps), and one analysis pass per operation:
// - depth, counted through fragments (introspection fields count as one level: their shape is the
//   schema's, bounded, and the standard introspection query is deeper than any sensible limit);
// - whether it reaches __schema/__type;
// - its cost as a function of the variables: constant when no page argument is a variable, otherwise
//   a small function evaluated per request;
// - the graphql-jit compilation, made on the first execution that passes every check (so only
//   documents some caller may run are compiled, and compiling never exceeds what a budget allows).
//
// Every fragment is analysed once and its result reused wherever it is spread, so the work is linear
// in the document even when fragments spread each other many times over (a chain of fragments that
// each spread the next twice prices 2^n fields in n steps; such a document is then refused on its cost).
import {
  GraphQLError,
  Kind,
  getNamedType,
  getNullableType,
  isInterfaceType,
  isListType,
  isObjectType,
  parse,
  specifiedRules,
  validate,
  type DirectiveNode,
  type DocumentNode,
  type FragmentDefinitionNode,
  type GraphQLField,
  type GraphQLObjectType,
  type GraphQLSchema,
  type OperationDefinitionNode,
  type OperationTypeNode,
  type SelectionSetNode,
  type ValidationContext,
  type ValidationRule,
  type ValueNode,
  type VariableDefinitionNode
} from 'graphql'
import { AppError } from '../../app/errors.ts'
import { DEFAULT_PAGE_SIZE, assertPageSize, type InputCaps } from '../../app/domain/input.ts'

export interface PlanLimits extends InputCaps {
  maxDepth: number
  /** What each mutation field costs on top of its selection: a write is dearer than a read. */
  mutationCost: number
  /** Most mutation fields one operation may hold (aliases count): bounds what one request can write or probe. */
  maxMutationsPerOperation: number
  /** Most tokens a document may have (graphql-js's parse option): bounds parsing, validation and the AST kept. */
  maxQueryTokens: number
  /** Most aliases in one operation, through its fragments (graphql-armor's maxAliases). */
  maxAliases: number
  /** Most directives on one field, fragment spread or inline fragment, and in one operation through its fragments. */
  maxDirectivesPerField: number
  maxDirectives: number
  /** Most validation errors answered; each validation rule reports its first error only. */
  maxValidationErrors: number
}

/** Cost of a selection: a number when it does not depend on the variables. */
type Cost = number | CostFunction
interface CostFunction {
  (variables: Record<string, unknown>, memo: Map<CostFunction, number>): number
}

export interface OperationPlan {
  name: string | null
  type: OperationTypeNode
  /** The document the operation runs in (shared by the operations of one text). */
  document: DocumentNode
  variableDefinitions: readonly VariableDefinitionNode[]
  depth: number
  introspects: boolean
  /**
   * A query whose root selection holds only introspection fields (`__schema`, `__type`, `__typename`,
   * written directly, as graphql-js's getIntrospectionQuery() does): nothing of the service's data.
   */
  onlyIntrospects: boolean
  /** The operation's cost for these variables; throws BAD_USER_INPUT for a page size over the cap. */
  cost (variables: Record<string, unknown>): number
  /** Estimated bytes its graphql-jit compilation keeps alive, added to the plan's weight once it is compiled. */
  compiledBytes: number
}

export interface DocumentPlan {
  operations: OperationPlan[]
  /**
   * Rough bytes this plan keeps alive before any compilation
   * (AST with locations, analysis), for the cache's byte bound.
   */
  bytes: number
}

/** Arguments whose value multiplies the cost of a list field's selection (and is capped as a page size). */
const PAGE_ARGUMENTS = new Set(['limit', 'first', 'last'])
const INTROSPECTION_FIELDS = new Set(['__schema', '__type'])

// What a plan keeps alive, measured (Node 24, graphql-jit 0.8.9): documents of about 7.8 KB in six
// shapes (aliased root list fields with one or three leaves, aliased leaves under one list, the same
// with 60-character aliases, `__typename` repeated), 100 of each kept, heap used after forced GCs
// compared with the heap before: plans alone 13-92 bytes per character of source (dense aliases cost
// most: the AST is per token); compiled through the service, per field as graphql-jit expands it
// (fragments inlined at each spread): about 1.1 KiB per leaf and 11.2 KiB per field with a selection
// (its resolver call, type checks and sub-selection code). The constants are the upper ends, rounded up.
const PLAN_BYTES_PER_CHAR = 96
const COMPILED_BYTES_PER_LEAF = 1280
const COMPILED_BYTES_PER_SELECTION = 12288

/**
 * Errors reported together (error-format's formatThrown unpacks `errors`), each carrying `code`
 * unless it has a code of its own: graphql-js's validation and variable errors come without one.
 */
export class ValidationFailed extends Error {
  readonly errors: readonly GraphQLError[]

  constructor (errors: readonly GraphQLError[], code: 'GRAPHQL_VALIDATION_FAILED' | 'BAD_USER_INPUT' = 'GRAPHQL_VALIDATION_FAILED') {
    super(errors[0]?.message ?? 'Validation failed')
    this.errors = errors.map((e) =>
      e.extensions?.code !== undefined
        ? e
        : new GraphQLError(e.message, {
          nodes: e.nodes,
          source: e.source,
          positions: e.positions,
          path: e.path,
          extensions: { ...e.extensions, code }
        })
    )
  }
}

/** Literal strings and lists in the document obey the input caps, as variables do. */
function literalCapsRule (caps: InputCaps): ValidationRule {
  return (context) => {
    const check = (node: ValueNode) => {
      const problem = literalProblem(node, caps)
      if (problem) {
        context.reportError(
          new GraphQLError(problem.message, { nodes: [node], extensions: { code: problem.code, ...problem.details } })
        )
      }
    }
    return {
      Argument (node) { check(node.value); return false },
      VariableDefinition (node) { if (node.defaultValue) check(node.defaultValue); return false }
    }
  }
}

function literalProblem (node: ValueNode, caps: InputCaps): AppError | null {
  switch (node.kind) {
    case Kind.STRING:
      return node.value.length > caps.maxStringLength
        ? new AppError('BAD_USER_INPUT', 'Too long', { maxLength: caps.maxStringLength })
        : null
    case Kind.LIST:
      if (node.values.length > caps.maxListLength) {
        return new AppError('BAD_USER_INPUT', `Too many entries: at most ${caps.maxListLength}`, {
          maxEntries: caps.maxListLength
        })
      }
      for (const value of node.values) { const p = literalProblem(value, caps); if (p) return p }
      return null
    case Kind.OBJECT:
      for (const field of node.fields) { const p = literalProblem(field.value, caps); if (p) return p }
      return null
    default:
      return null
  }
}

/** Parses a document text within the token cap; graphql-js's syntax errors keep their own words. */
export function parseDocument (source: string, maxTokens: number): DocumentNode {
  try {
    return parse(source, { maxTokens })
  } catch (err) {
    if (err instanceof GraphQLError && /Document contains more th\w+ \d+ tokens/.test(err.message)) {
      throw new AppError('QUERY_TOO_LARGE', `The document has more than ${maxTokens} tokens`, { maxTokens })
    }
    throw err
  }
}

/**
 * Makes the plan of a document text. Throws (nothing cached) when it does not parse, does not
 * validate, or an operation breaks a request-independent limit (depth, a literal page size).
 */
export function makePlan (schema: GraphQLSchema, source: string, limits: PlanLimits): DocumentPlan {
  const document = parseDocument(source, limits.maxQueryTokens)
  assertShape(document, limits)
  const errors = validate(schema, document, VALIDATION_RULES.concat(firstErrorOnly(literalCapsRule(limits))), {
    maxErrors: limits.maxValidationErrors
  })
  if (errors.length > 0) throw new ValidationFailed(errors)

  const fragments = new Map<string, FragmentDefinitionNode>()
  for (const d of document.definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d)
  const analysis = new SelectionAnalysis(schema, fragments, limits)
  const fieldCounts = new Map<string, FieldCount>()
  const operations: OperationPlan[] = []
  const depthErrors: GraphQLError[] = []
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION) continue
    const root = rootType(schema, definition.operation)
    const facts = analysis.of(root, definition.selectionSet)
    // Lists without a page size of their own directly under the root count once.
    facts.cost = sum([facts.cost, facts.itemsCost])
    if (definition.operation === 'mutation') {
      const writes = rootFieldCount(definition.selectionSet, fragments, new Set())
      if (writes > limits.maxMutationsPerOperation) {
        throw new AppError(
          'MUTATION_LIMIT_EXCEEDED',
          `The operation holds ${writes} mutations: at most ${limits.maxMutationsPerOperation} per operation`,
          { mutations: writes, max: limits.maxMutationsPerOperation }
        )
      }
      facts.cost = sum([facts.cost, writes * (limits.mutationCost - 1)])
    }
    if (facts.depth > limits.maxDepth) {
      depthErrors.push(new GraphQLError(`Query depth ${facts.depth} exceeds the maximum depth of ${limits.maxDepth}`, {
        nodes: [definition], extensions: { code: 'DEPTH_LIMIT_EXCEEDED', depth: facts.depth, maxDepth: limits.maxDepth }
      }))
    }
    operations.push({
      name: definition.name?.value ?? null,
      type: definition.operation,
      document,
      variableDefinitions: definition.variableDefinitions ?? [],
      depth: facts.depth,
      introspects: facts.introspects,
      onlyIntrospects: definition.operation === 'query' && facts.introspects &&
        definition.selectionSet.selections.every((s) => s.kind === Kind.FIELD && (INTROSPECTION_FIELDS.has(s.name.value) || s.name.value === '__typename')),
      cost: costWithDefaults(facts.cost, definition),
      compiledBytes: compiledBytes(expandedFields(definition.selectionSet, fragments, fieldCounts, new Set()))
    })
  }
  if (depthErrors.length > 0) throw new ValidationFailed(depthErrors)
  return { operations, bytes: source.length * PLAN_BYTES_PER_CHAR + 1024 }
}

interface FieldCount { leaves: number; selections: number }

const compiledBytes = ({ leaves, selections }: FieldCount) =>
  leaves * COMPILED_BYTES_PER_LEAF + selections * COMPILED_BYTES_PER_SELECTION

/**
 * Fields of a selection as graphql-jit compiles them: fragments expanded at every spread (each
 * fragment counted once and reused, so this stays linear in the document; validation has refused cycles).
 */
function expandedFields (
  selectionSet: SelectionSetNode,
  fragments: Map<string, FragmentDefinitionNode>,
  memo: Map<string, FieldCount>,
  visiting: Set<string>
): FieldCount {
  const count: FieldCount = { leaves: 0, selections: 0 }
  const add = (more: FieldCount) => {
    count.leaves += more.leaves
    count.selections += more.selections
  }
  for (const selection of selectionSet.selections) {
    if (selection.kind === Kind.FIELD) {
      if (!selection.selectionSet) count.leaves++
      else {
        count.selections++
        add(expandedFields(selection.selectionSet, fragments, memo, visiting))
      }
    } else if (selection.kind === Kind.INLINE_FRAGMENT) {
      add(expandedFields(selection.selectionSet, fragments, memo, visiting))
    } else {
      const name = selection.name.value
      const fragment = fragments.get(name)
      if (!fragment || visiting.has(name)) continue
      let counted = memo.get(name)
      if (!counted) {
        visiting.add(name)
        memo.set(name, (counted = expandedFields(fragment.selectionSet, fragments, memo, visiting)))
        visiting.delete(name)
      }
      add(counted)
    }
  }
  return count
}

/**
 * Each rule reports its first error only: one error per kind tells a client what is wrong, and a
 * document repeating one mistake (graphql-cop's `__typename @aa @aa ...`) does not get an answer of
 * one error per repeat. (A context that inherits everything from graphql-js's but its reportError.)
 */
function firstErrorOnly (rule: ValidationRule): ValidationRule {
  return (context) => {
    let reported = false
    const once: ValidationContext = Object.create(context, {
      reportError: {
        value: (error: GraphQLError) => {
          if (!reported) context.reportError(error)
          reported = true
        }
      }
    })
    return rule(once)
  }
}

const VALIDATION_RULES = specifiedRules.map(firstErrorOnly)

/** Aliases and directives of a selection, through the fragments it spreads. */
interface Shape { aliases: number, directives: number }

/**
 * Aliases and directives per operation (through fragments) and directives per field, counted before
 * validation (graphql-js's overlapping-fields rule compares same-named fields pairwise, so a thousand
 * aliases cost a million comparisons). One pass: each fragment is counted once and its counts reused
 * wherever it is spread; a cycle counts nothing here (validation refuses it).
 */
function assertShape (document: DocumentNode, limits: PlanLimits): void {
  const fragments = new Map<string, FragmentDefinitionNode>()
  for (const d of document.definitions) if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d)
  const counted = new Map<string, Shape>()
  const visiting = new Set<string>()

  const directivesOn = (node: { readonly directives?: readonly DirectiveNode[] }): number => {
    const n = node.directives?.length ?? 0
    if (n > limits.maxDirectivesPerField) {
      throw new AppError(
        'DIRECTIVE_LIMIT_EXCEEDED',
        `A field holds ${n} directives: at most ${limits.maxDirectivesPerField} per field`,
        { directives: n, maxDirectivesPerField: limits.maxDirectivesPerField }
      )
    }
    return n
  }
  const ofSelectionSet = (selectionSet: SelectionSetNode): Shape => {
    const shape = { aliases: 0, directives: 0 }
    const add = (part: Shape) => { shape.aliases += part.aliases; shape.directives += part.directives }
    for (const selection of selectionSet.selections) {
      shape.directives += directivesOn(selection)
      if (selection.kind === Kind.FIELD) {
        if (selection.alias) shape.aliases++
        if (selection.selectionSet) add(ofSelectionSet(selection.selectionSet))
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        add(ofSelectionSet(selection.selectionSet))
      } else {
        add(ofFragment(selection.name.value))
      }
    }
    return shape
  }
  const ofFragment = (name: string): Shape => {
    const fragment = fragments.get(name)
    if (!fragment || visiting.has(name)) return { aliases: 0, directives: 0 }
    let shape = counted.get(name)
    if (!shape) {
      visiting.add(name)
      shape = ofSelectionSet(fragment.selectionSet)
      shape.directives += directivesOn(fragment)
      visiting.delete(name)
      counted.set(name, shape)
    }
    return shape
  }

  for (const name of fragments.keys()) ofFragment(name)
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION) continue
    const shape = ofSelectionSet(definition.selectionSet)
    shape.directives += directivesOn(definition)
    for (const v of definition.variableDefinitions ?? []) shape.directives += directivesOn(v)
    if (shape.aliases > limits.maxAliases) {
      throw new AppError(
        'ALIAS_LIMIT_EXCEEDED',
        `The operation holds ${shape.aliases} aliases: at most ${limits.maxAliases} per operation`,
        { aliases: shape.aliases, maxAliases: limits.maxAliases }
      )
    }
    if (shape.directives > limits.maxDirectives) {
      throw new AppError(
        'DIRECTIVE_LIMIT_EXCEEDED',
        `The operation holds ${shape.directives} directives: at most ${limits.maxDirectives} per operation`,
        { directives: shape.directives, maxDirectives: limits.maxDirectives }
      )
    }
  }
}

/** Fields at the root of an operation, through fragments (each spread counted; validation has refused cycles). */
function rootFieldCount (
  selectionSet: SelectionSetNode,
  fragments: Map<string, FragmentDefinitionNode>,
  visiting: Set<string>
): number {
  let count = 0
  for (const selection of selectionSet.selections) {
    if (selection.kind === Kind.FIELD) {
      if (selection.name.value !== '__typename') count++
    } else if (selection.kind === Kind.INLINE_FRAGMENT) {
      count += rootFieldCount(selection.selectionSet, fragments, visiting)
    } else {
      const fragment = fragments.get(selection.name.value)
      if (!fragment || visiting.has(fragment.name.value)) continue
      visiting.add(fragment.name.value)
      count += rootFieldCount(fragment.selectionSet, fragments, visiting)
      visiting.delete(fragment.name.value)
    }
  }
  return count
}

function rootType (schema: GraphQLSchema, type: OperationTypeNode): GraphQLObjectType {
  const root =
    type === 'query'
      ? schema.getQueryType()
      : type === 'mutation'
        ? schema.getMutationType()
        : schema.getSubscriptionType()
  // Validation has refused an operation whose root type the schema lacks.
  return root!
}

/** Evaluates a cost with the operation's variable defaults under the sent variables. */
function costWithDefaults (
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
function sum (parts: Cost[]): Cost {
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
class SelectionAnalysis {
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
