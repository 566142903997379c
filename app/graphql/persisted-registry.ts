// The persisted registry: resolves a request to the document text it runs, from the active app
// deployments (app-deployments.ts: published by release pipelines, PERSISTED_MANIFEST files among them)
// or automatic registration (apq-store.ts), or refuses it.
import type { OperationTypeNode } from 'graphql'
import { AppError } from '../core/errors.ts'
import { LruMap } from '../core/lru-map.ts'
import { apqEntryBytes, type ApqStore } from './apq-store.ts'
import {
  PersistedMessages,
  hasPersistedQueryExtension,
  persistedIdOf,
  persistedQueryExtension,
  sha256Hex,
  type PersistedOperation,
  type PersistedQueries,
  type ResolvedDocument
} from './persisted.ts'
import type { RegisteredOperations } from './deployment-catalog.ts'

// ---------------------------------------------------------------------------------------------
// The resolver

export interface PersistedQueriesOptions {
  /** The operations of the active app deployments (the catalog, reloaded as deployments change). */
  registered: RegisteredOperations
  persistedOnly: boolean
  /** Automatic registration; null when off (always off in persisted-only mode). */
  apq: ApqStore | null
  /** How many registered texts this instance keeps parsed in memory (APQ_MAX_ENTRIES). */
  apqMaxEntries: number
  /** Estimated bytes of the registered texts this process keeps (the in-process registry and the parsed copies). */
  apqMaxBytes: number
  /** Texts longer than this are run but not registered (bounds the registry's memory). */
  apqMaxDocumentBytes: number
  /** A registered text's plan (the pipeline's: parsed and validated once); throws when it cannot run. */
  plan (text: string): { operations: readonly { name: string | null; type: OperationTypeNode }[] }
}

export function createPersistedQueries (options: PersistedQueriesOptions): PersistedQueries {
  const { registered: deployed, persistedOnly, apqMaxDocumentBytes } = options
  const apq = persistedOnly ? null : options.apq
  // Registered texts this instance has seen, parsed, by hash: a hit costs no parse and no round trip.
  const apqFacts = new LruMap<string, PersistedOperation>(options.apqMaxEntries, options.apqMaxBytes)

  const registered = (text: string): ResolvedDocument => ({ text, registered: true, introspectionOnly: false })

  async function apqOperation (hash: string, text: string | undefined): Promise<PersistedOperation | undefined> {
    const known = apqFacts.get(hash)
    if (known) return known
    const registered = text ?? (apq ? await apq.get(hash) : undefined)
    if (registered === undefined) return undefined
    let operations
    try {
      operations = options.plan(registered).operations
    } catch {
      return undefined
    }
    // One operation per registered document, as at deploy time.
    if (operations.length !== 1) return undefined
    const operation = { id: `sha256:${hash}`, text: registered, name: operations[0]!.name, type: operations[0]!.type }
    apqFacts.set(hash, operation, apqEntryBytes(registered))
    return operation
  }

  /** A deployed operation a request named (counted for its app deployment once the request is admitted). */
  const deployedText = (operation: PersistedOperation): ResolvedDocument =>
    ({ text: operation.text, registered: true, introspectionOnly: false, deployed: operation })
  const notFound = (id: string) => {
    const retired = deployed.retiredWith(id)
    return new AppError('PERSISTED_QUERY_NOT_FOUND', retired ? PersistedMessages.retired(id, retired) : PersistedMessages.notFound(id))
  }

  return {
    apq,
    countUse: (operation, client) => deployed.count(operation, client),
    checkBatch (batch) {
      if (persistedOnly && batch.some((params) => !namesPersistedQuery(params))) {
        throw new AppError('PERSISTED_QUERY_REQUIRED', PersistedMessages.required)
      }
    },
    async resolve (params, allowIntrospection = false) {
      const { query } = params
      const queryId = persistedIdOf(params)
      if (queryId !== undefined) {
        // The hot path: one Map lookup, no hashing, no parsing.
        const operation = deployed.find(queryId)
        if (operation) return deployedText(operation)
        const automatic = apq && queryId.startsWith('sha256:') ? await apqOperation(queryId.slice(7), undefined) : undefined
        if (!automatic) throw notFound(queryId)
        return registered(automatic.text)
      }

      const pq = persistedQueryExtension(params.extensions)
      if (pq) {
        const hash = pq.sha256Hash as string
        const fromDeployment = deployed.find(hash)
        if (fromDeployment) return deployedText(fromDeployment)
        if (persistedOnly && deployed.retiredWith(hash)) throw notFound(hash)
        if (persistedOnly) throw new AppError('PERSISTED_QUERY_NOT_FOUND', PersistedMessages.notFoundPersistedOnly)
        if (query === undefined || query === null) {
          const operation = apq ? await apqOperation(hash, undefined) : undefined
          if (!operation) throw new AppError('PERSISTED_QUERY_NOT_FOUND', PersistedMessages.notFoundApq)
          return registered(operation.text)
        }
        if (typeof query !== 'string') throw new AppError('BAD_REQUEST', 'query must be a string')
        if (sha256Hex(query) !== hash) throw new AppError('PERSISTED_QUERY_HASH_MISMATCH', PersistedMessages.mismatch)
        // Register only texts that are one valid operation and not oversized; others still run
        // (and fail) as ad-hoc queries, so their errors are the usual ones.
        if (apq && Buffer.byteLength(query, 'utf8') <= apqMaxDocumentBytes) {
          const operation = await apqOperation(hash, query)
          if (operation) {
            await apq.set(hash, query)
            return registered(operation.text)
          }
        }
        // Not kept (over APQ_MAX_DOCUMENT_BYTES or not a single valid operation): it runs as an ad-hoc text.
        return { text: query, registered: false, introspectionOnly: false }
      }

      if (persistedOnly && !allowIntrospection) {
        throw new AppError('PERSISTED_QUERY_REQUIRED', PersistedMessages.required)
      }
      if (typeof query !== 'string' || query.trim() === '') {
        throw new AppError('BAD_REQUEST', PersistedMessages.missingQuery)
      }
      return { text: query, registered: false, introspectionOnly: persistedOnly }
    }
  }
}

/** Whether a batch entry names a registered operation (an id, or an APQ hash) rather than carrying its text only. */
function namesPersistedQuery (params: unknown): boolean {
  if (params === null || typeof params !== 'object' || Array.isArray(params)) return false
  try {
    return persistedIdOf(params) !== undefined || hasPersistedQueryExtension(params)
  } catch {
    return true // a malformed id: refused on its own, with its own words
  }
}
