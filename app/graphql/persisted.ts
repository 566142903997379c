// Persisted queries: how a request that names a registered operation (`queryId`, or the APQ
// `extensions.persistedQuery.sha256Hash`) becomes a document text. The deploy-time registry and
// automatic registration plug in here.
import { AppError } from '../errors.ts'

export interface GraphQLRequestParams {
  query?: unknown
  queryId?: unknown
  variables?: unknown
  operationName?: unknown
  extensions?: unknown
}

export interface PersistedQueries {
  /**
   * The document text to run for a request: the registered text for a persisted request, the
   * request's own `query` otherwise (refused when only persisted queries are allowed).
   */
  resolve (params: GraphQLRequestParams): Promise<string>
}

/** Without a registry: ad-hoc queries only (or none, in persisted-only mode). */
export function noPersistedQueries (persistedOnly: boolean): PersistedQueries {
  return {
    async resolve (params) {
      if (params.queryId !== undefined || params.extensions !== undefined) {
        throw new AppError('PERSISTED_QUERY_NOT_FOUND', 'Persisted query not found')
      }
      if (persistedOnly) throw new AppError('PERSISTED_QUERY_REQUIRED', 'Only persisted queries are accepted: send a registered queryId')
      if (typeof params.query !== 'string' || params.query.trim() === '') {
        throw new AppError('BAD_REQUEST', 'Missing query: send { "query": "<GraphQL document>" }')
      }
      return params.query
    }
  }
}
