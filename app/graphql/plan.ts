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
// The cost and the walk that finds it are plan-cost.ts's.
//
// Every fragment is analysed once and its result reused wherever it is spread, so the work is linear
// in the document even when fragments spread each other many times over (a chain of fragments that
// each spread the next twice prices 2^n fields in n steps; such a document is then refused on its cost).
import { createHash } from 'node:crypto'
import {
  GraphQLError,
  Kind,
  parse,
  specifiedRules,
  validate,
  type DirectiveNode,
  type DocumentNode,
  type FragmentDefinitionNode,
  type GraphQLObjectType,
  type GraphQLSchema,
  type OperationTypeNode,
  type SelectionSetNode,
  type ValidationContext,
  type ValidationRule,
  type ValueNode,
  type VariableDefinitionNode
} from 'graphql'
import { AppError } from '../core/errors.ts'
import type { InputCaps } from '../core/domain/input.ts'
import { INTROSPECTION_FIELDS, SelectionAnalysis, costWithDefaults, sum } from './plan-cost.ts'

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

export interface OperationPlan {
  name: string | null
  /**
   * The operation's identity on every instance: its document text's SHA-256 and its name (the response
   * cache's key names the operation by it).
   */
  key: string
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
  const textHash = createHash('sha256').update(source).digest('base64url')
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
      key: definition.name ? `${textHash}:${definition.name.value}` : textHash,
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
