// Facts about a parsed document that do not depend on the request, computed once per document
// (Mercurius caches parsed documents, so the WeakMap hits on every repeat of a query).
import { Kind, type DocumentNode, type FragmentDefinitionNode, type OperationDefinitionNode, type SelectionSetNode } from 'graphql'
import { AppError } from '../errors.ts'

export interface DocumentFacts {
  operations: OperationDefinitionNode[]
  fragments: Map<string, FragmentDefinitionNode>
  /** Per operation (by index): whether it reaches __schema or __type, through fragments too. */
  introspects: boolean[]
  /** Single-operation documents derived from a multi-operation one, by operation name. */
  derived: Map<string, DocumentNode>
}

const factsCache = new WeakMap<DocumentNode, DocumentFacts>()

export function factsOf (document: DocumentNode): DocumentFacts {
  let facts = factsCache.get(document)
  if (!facts) {
    const operations: OperationDefinitionNode[] = []
    const fragments = new Map<string, FragmentDefinitionNode>()
    for (const definition of document.definitions) {
      if (definition.kind === Kind.OPERATION_DEFINITION) operations.push(definition)
      else if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition)
    }
    const introspects = operations.map((op) => reachesIntrospection(op.selectionSet, fragments, new Set()))
    facts = { operations, fragments, introspects, derived: new Map() }
    factsCache.set(document, facts)
  }
  return facts
}

function reachesIntrospection (selectionSet: SelectionSetNode, fragments: Map<string, FragmentDefinitionNode>, seen: Set<string>): boolean {
  for (const selection of selectionSet.selections) {
    if (selection.kind === Kind.FIELD) {
      const name = selection.name.value
      if (name === '__schema' || name === '__type') return true
      if (selection.selectionSet && reachesIntrospection(selection.selectionSet, fragments, seen)) return true
    } else if (selection.kind === Kind.INLINE_FRAGMENT) {
      if (reachesIntrospection(selection.selectionSet, fragments, seen)) return true
    } else {
      const name = selection.name.value
      const fragment = fragments.get(name)
      if (fragment && !seen.has(name)) {
        seen.add(name)
        if (reachesIntrospection(fragment.selectionSet, fragments, seen)) return true
      }
    }
  }
  return false
}

export interface SelectedOperation {
  operation: OperationDefinitionNode
  introspects: boolean
  /** Set when the request's document had several operations: the document holding only the selected one. */
  singleOperationDocument: DocumentNode | null
}

/**
 * Picks the operation a request runs. graphql-jit caches compiled queries by text alone, so a
 * multi-operation document would answer every operationName with the first one compiled: such
 * documents run as a derived single-operation document (which Mercurius never JIT-compiles into
 * the shared cache), and an operationName that names nothing in the document is refused.
 */
export function selectOperation (document: DocumentNode, operationName: string | null | undefined): SelectedOperation {
  const facts = factsOf(document)
  const { operations } = facts
  if (operations.length === 0) throw new AppError('GRAPHQL_VALIDATION_FAILED', 'The document contains no operation')
  let index: number
  if (operationName) {
    index = operations.findIndex((op) => op.name?.value === operationName)
    if (index === -1) throw new AppError('OPERATION_NOT_FOUND', `Unknown operation named "${operationName}"`)
  } else {
    if (operations.length > 1) throw new AppError('OPERATION_NOT_FOUND', 'Must provide operationName when the document contains several operations')
    index = 0
  }
  const operation = operations[index]!
  let singleOperationDocument: DocumentNode | null = null
  if (operations.length > 1) {
    singleOperationDocument = facts.derived.get(operationName!) ?? null
    if (!singleOperationDocument) {
      singleOperationDocument = { ...document, definitions: [operation, ...facts.fragments.values()] }
      facts.derived.set(operationName!, singleOperationDocument)
    }
  }
  return { operation, introspects: facts.introspects[index]!, singleOperationDocument }
}
