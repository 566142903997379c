// Persisted queries, the vocabulary: what a request names (persistedIdOf, the APQ extension), what a
// registered operation is, and the words of every refusal. The registry that resolves a request to a
// text is persisted-registry.ts; its sources are persisted-manifest.ts and apq-store.ts.
//
// How a request that names a registered operation (by id, in any of the forms
// clients send: see persistedIdOf; or the APQ `extensions.persistedQuery.sha256Hash`) becomes a document text.
//
// Two registries feed it:
// - the deploy-time manifest (PERSISTED_MANIFEST): trusted, verified hash by hash when loaded, never
//   evicted; the only source in persisted-only mode. Formats: our build output and Apollo's
//   persisted-query manifest ({ format: "apollo-persisted-query-manifest", version: 1, operations }),
//   and a plain id → text map as Relay emits (ids are md5, sha1 or sha256 hex, or sha256:<hex>).
// - automatic registration (APQ), only when persisted-only mode is off: a client-supplied text is
//   registered under its sha256 once the hash is checked and the text parses and validates; bounded
//   (apq-store.ts), shared across instances through Redis when configured.
//
// Mercurius's own persistedQueryProvider is wired into its routes only (this service runs
// `routes: false`) and answers misses with the message "undefined", hence these modules.
import { createHash } from 'node:crypto'
import type { OperationTypeNode } from 'graphql'
import { AppError } from '../core/errors.ts'
import type { ApqStore } from './apq-store.ts'

/**
 * The app a request says it comes from (Apollo's apollographql-client-name/-version, or
 * graphql-client-name/-version): its requests are counted for that app deployment (app-deployments.ts).
 */
export interface ClientApp {
  name: string
  version: string
}

/** The app a request's headers say it comes from (ClientApp), or null. */
export function clientAppOf (headers: Record<string, string | string[] | undefined>): ClientApp | null {
  const one = (value: string | string[] | undefined) => (typeof value === 'string' && value.length <= 100 ? value : undefined)
  const name = one(headers['apollographql-client-name']) ?? one(headers['graphql-client-name'])
  const version = one(headers['apollographql-client-version']) ?? one(headers['graphql-client-version'])
  return name && version ? { name, version } : null
}

export interface GraphQLRequestParams {
  query?: unknown
  queryId?: unknown
  documentId?: unknown
  doc_id?: unknown
  id?: unknown
  variables?: unknown
  operationName?: unknown
  extensions?: unknown
}

/** The text a request runs. */
export interface ResolvedDocument {
  text: string
  /** Registered (deploy-time manifest or APQ), as opposed to the request's own ad-hoc `query`. */
  registered: boolean
  /**
   * An ad-hoc text let through persisted-only mode only because the caller may introspect there
   * (`allowIntrospection`): it may run only if it is introspection alone (the pipeline checks its plan).
   */
  introspectionOnly: boolean
  /** The app deployment operation it is, when it is one: counted for its deployment once admitted. */
  deployed?: PersistedOperation
}

export interface PersistedQueries {
  /**
   * The document text to run for a request: the registered text for a persisted request, the
   * request's own `query` otherwise, refused in persisted-only mode unless `allowIntrospection`
   * (then marked `introspectionOnly`).
   */
  resolve (params: GraphQLRequestParams, allowIntrospection?: boolean): Promise<ResolvedDocument>
  /** Counts an admitted request of a deployed operation for its deployment (the one `client` names, if it holds it). */
  countUse (operation: PersistedOperation, client: ClientApp | null): void
  /**
   * Refuses a whole batch at once (PERSISTED_QUERY_REQUIRED, not one refusal per entry) when persisted-only
   * mode would refuse one of its entries: one carrying its own text rather than naming a registered operation.
   */
  checkBatch (batch: readonly unknown[]): void
  /** The automatic registrations' store this registry uses: null when APQ is off (always, in persisted-only mode). */
  readonly apq: ApqStore | null
}

/** One registered operation. The text is the exact string the pipeline plans (its plan cache key). */
export interface PersistedOperation {
  /** `sha256:<hex>` of the text. */
  id: string
  text: string
  /** The operation's name (null when anonymous). Registered documents hold exactly one operation. */
  name: string | null
  type: OperationTypeNode
}

export const PersistedMessages = {
  required:
    'Only persisted queries are accepted: send a registered id (documentId, queryId, doc_id or id; or extensions.persistedQuery.sha256Hash) instead of a query',
  notFound: (id: string) => `Persisted query not found: no operation is registered as "${id.slice(0, 80)}"`,
  retired: (id: string, deployments: readonly string[]) =>
    `Persisted query not found: the operation "${id.slice(0, 80)}" was retired with ${deployments.slice(0, 5).join(', ')}${deployments.length > 5 ? ` and ${deployments.length - 5} more` : ''}`,
  notFoundApq: 'Persisted query not found: resend the request with the full query to register it',
  notFoundPersistedOnly: 'Persisted query not found: this service accepts only operations registered at deploy time',
  mismatch: 'The query does not match extensions.persistedQuery.sha256Hash (the sha256 hex digest of the query text)',
  missingQuery: 'Missing query: send { "query": "<GraphQL document>" }'
} as const

export function sha256Hex (text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex')
}

interface PersistedQueryExtension { version?: unknown; sha256Hash?: unknown }

export function persistedQueryExtension (extensions: unknown): PersistedQueryExtension | undefined {
  if (extensions === undefined || extensions === null) return undefined
  if (typeof extensions !== 'object' || Array.isArray(extensions)) {
    throw new AppError('BAD_REQUEST', 'extensions must be a JSON object')
  }
  const pq = (extensions as { persistedQuery?: unknown }).persistedQuery
  if (pq === undefined) return undefined
  if (pq === null || typeof pq !== 'object') {
    throw new AppError(
      'BAD_REQUEST',
      'extensions.persistedQuery must be an object: { "version": 1, "sha256Hash": "<hex>" }'
    )
  }
  const { version, sha256Hash } = pq as PersistedQueryExtension
  if (version !== 1) {
    throw new AppError('BAD_REQUEST', 'Unsupported extensions.persistedQuery.version: only version 1 is supported')
  }
  if (typeof sha256Hash !== 'string' || !/^[0-9a-f]{64}$/.test(sha256Hash)) {
    throw new AppError(
      'BAD_REQUEST',
      'extensions.persistedQuery.sha256Hash must be the lowercase sha256 hex digest of the query'
    )
  }
  return pq as PersistedQueryExtension
}

/**
 * The fields a request may name a registered operation by, in every form clients send: `queryId`
 * (this service's own), `documentId` (the GraphQL-over-HTTP persisted documents appendix,
 * `sha256:<hex>`: graphql-codegen's client preset, Hive), Relay's `doc_id`, and `id` (Relay's older
 * persisted-query form). The one place these are read.
 */
const ID_FIELDS = ['queryId', 'documentId', 'doc_id', 'id'] as const

/** Whether a request carries an APQ hash (`extensions.persistedQuery`), well formed or not. */
export function hasPersistedQueryExtension (params: GraphQLRequestParams): boolean {
  const extensions = params.extensions
  return (
    typeof extensions === 'object' &&
    extensions !== null &&
    (extensions as { persistedQuery?: unknown }).persistedQuery != null
  )
}

/** The registered id a request names; undefined when none. Two fields naming different ids are refused. */
export function persistedIdOf (params: GraphQLRequestParams): string | undefined {
  let found: { field: string; id: string } | undefined
  for (const field of ID_FIELDS) {
    const id = params[field]
    if (id === undefined || id === null) continue
    if (typeof id !== 'string' || id === '') {
      throw new AppError('BAD_REQUEST', `${field} must be a registered operation's id, a string such as sha256:<hex>`)
    }
    if (found && found.id !== id) {
      throw new AppError('BAD_REQUEST', `${found.field} and ${field} name different operations: send one id`)
    }
    found ??= { field, id }
  }
  return found?.id
}
