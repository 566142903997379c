// Operations compiled with graphql-jit, by query text, run without Mercurius's per-request path.
//
// Why not Mercurius's own JIT cache: on every request Mercurius grows the context by a dozen
// properties, copies its hook lists, builds a loader factory and re-checks the variables with
// graphql-js before the compiled query checks them again. Measured with the benchmark (old and new
// code alternated, two runs each, `npm run bench -- --only user-by-id --only persisted-get`):
// user-by-id 140-144 → 131 µs of CPU per request (0.40-0.41 → 0.44 × rest), persisted-get
// 140-150 → 134-136 µs (0.38-0.40 → 0.42-0.43).
//
// Mercurius still does everything else: it parses and validates a text (with our rules, cached)
// on its first uses and runs it there, through the same preExecution checks; a text is compiled
// here on its second use (as Mercurius's `jit: 1` would), so a stream of one-off queries never
// pays for a compilation. Documents with several operations never come here (see selectOperation),
// nor does a GET of a non-query (Mercurius refuses it first, in its own words). Mercurius hooks do
// not run on this path: the service registers one (plugins/graphql.ts), and runs it here itself.
// test/execution.test.ts checks that both paths give the same answers, failures included.
import { createRequire } from 'node:module'
import type { CompiledQuery } from 'graphql-jit'
import { getVariableValues, type DocumentNode, type GraphQLError, type GraphQLSchema, type OperationDefinitionNode, type OperationTypeNode } from 'graphql'
import { LruMap } from './persisted.ts'

// graphql-jit's CommonJS build, the one Mercurius loads (one copy in memory), with its variable
// parser (the one compiled queries run; not in the index). Its ESM build of that module imports a
// sibling without its extension and fails to load.
const require = createRequire(import.meta.url)
const { compileQuery, isCompiledQuery } = require('graphql-jit') as typeof import('graphql-jit')
const { compileVariableParsing, failToParseVariables } = require('graphql-jit/dist/variables.js') as typeof import('graphql-jit/dist/variables.js')

export interface CompiledOperation {
  document: DocumentNode
  type: OperationTypeNode
  /** The variables' errors, or null when they are acceptable (checked before anything else, as Mercurius does). */
  variableErrors (variables: Record<string, unknown>): readonly GraphQLError[] | null
  query: CompiledQuery
}

interface Seen {
  document: DocumentNode
  compiled: CompiledOperation | null
}

export interface CompiledQueries {
  /** The compiled operation of a text used (parsed and validated) twice before, if any. */
  get (source: string): CompiledOperation | undefined
  /** Records a use of `source`, a single-operation document that passed parsing and validation. */
  passed (source: string, document: DocumentNode, operation: OperationDefinitionNode): void
}

export function createCompiledQueries (schema: () => GraphQLSchema, maxEntries: number): CompiledQueries {
  const seen = new LruMap<string, Seen>(maxEntries)
  return {
    get (source) {
      return seen.get(source)?.compiled ?? undefined
    },
    passed (source, document, operation) {
      const entry = seen.get(source)
      if (!entry || entry.document !== document) {
        seen.set(source, { document, compiled: null })
        return
      }
      if (entry.compiled) return
      const current = schema()
      const query = compileQuery(current, document)
      // compileQuery answers a document it cannot compile with errors instead of throwing: such a
      // text simply keeps going through Mercurius.
      if (!isCompiledQuery(query)) return
      const definitions = operation.variableDefinitions ?? []
      // The compiled query parses the variables again when it runs: checked here first so that refused
      // ones cost nothing (no cost units spent), as on Mercurius's path. Its parser is generated code.
      const parseVariables = compileVariableParsing(current, definitions)
      const variableErrors = (variables: Record<string, unknown>) => {
        const parsed = parseVariables(variables)
        if (!failToParseVariables(parsed)) return null
        // Refused: in graphql-js's words (graphql-jit's differ slightly), as Mercurius answers them.
        return getVariableValues(current, definitions, variables).errors ?? parsed.errors
      }
      entry.compiled = { document, type: operation.operation, variableErrors, query }
    }
  }
}
