// Persisted queries: how a request that names a registered operation (by id, in any of the forms
// clients send: see persistedIdOf; or the APQ `extensions.persistedQuery.sha256Hash`) becomes a document text.
//
// Two registries feed it:
// - the deploy-time manifest (PERSISTED_MANIFEST): trusted, verified hash by hash when loaded, never
//   evicted; the only source in persisted-only mode. Formats: our build output and Apollo's
//   persisted-query manifest ({ format: "apollo-persisted-query-manifest", version: 1, operations }),
//   and a plain id → text map as Relay emits (ids are md5, sha1 or sha256 hex, or sha256:<hex>).
// - automatic registration (APQ), only when persisted-only mode is off: a client-supplied text is
//   registered under its sha256 once the hash is checked and the text parses and validates; bounded
//   (ApqStore below), shared across instances through Redis when configured.
//
// Mercurius's own persistedQueryProvider is wired into its routes only (this service runs
// `routes: false`) and answers misses with the message "undefined", hence this module.
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Kind, parse, type DocumentNode, type OperationTypeNode } from 'graphql'
import type { Redis } from 'ioredis'
import { AppError } from '../../app/errors.ts'
import { LruMap } from '../../app/lru-map.ts'

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
}

export interface PersistedQueries {
  /**
   * The document text to run for a request: the registered text for a persisted request, the
   * request's own `query` otherwise, refused in persisted-only mode unless `allowIntrospection`
   * (then marked `introspectionOnly`).
   */
  resolve (params: GraphQLRequestParams, allowIntrospection?: boolean): Promise<ResolvedDocument>
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
  notFoundApq: 'Persisted query not found: resend the request with the full query to register it',
  notFoundPersistedOnly: 'Persisted query not found: this service accepts only operations registered at deploy time',
  mismatch: 'The query does not match extensions.persistedQuery.sha256Hash (the sha256 hex digest of the query text)',
  missingQuery: 'Missing query: send { "query": "<GraphQL document>" }'
} as const

export function sha256Hex (text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex')
}

// ---------------------------------------------------------------------------------------------
// Documents

/** The single operation of a document, or a reason it cannot be registered. */
function singleOperation (document: DocumentNode): { name: string | null; type: OperationTypeNode } | string {
  const operations = document.definitions.filter((d) => d.kind === Kind.OPERATION_DEFINITION)
  if (operations.length === 0) return 'it contains no operation'
  if (operations.length > 1) return `it contains ${operations.length} operations; register one operation per document`
  const op = operations[0]!
  return { name: op.name?.value ?? null, type: op.operation }
}

/**
 * Parses a registered text: it must hold one operation. Throws a message. (Whether the service can run
 * it, against its schema and limits, is decided when the room (index.ts) pins its plan at start.)
 */
function describeOperation (text: string): { name: string | null; type: OperationTypeNode } {
  let document: DocumentNode
  try {
    document = parse(text)
  } catch (err) {
    throw new Error(`it does not parse: ${(err as Error).message}`)
  }
  const single = singleOperation(document)
  if (typeof single === 'string') throw new Error(single)
  return single
}

// ---------------------------------------------------------------------------------------------
// Deploy-time manifests

/** The format `npm run persisted:build` writes: Apollo's, so one loader reads both. */
export interface ApolloManifest {
  format: 'apollo-persisted-query-manifest'
  version: 1
  operations: { id: string; name: string | null; type: OperationTypeNode; body: string }[]
}

const ID_FORM = /^(sha256:)?([0-9a-fA-F]+)$/
const ALGORITHM_BY_LENGTH: Record<number, string> = { 32: 'md5', 40: 'sha1', 64: 'sha256' }

/** Checks that a manifest id is the hash of its text (md5, sha1 or sha256 by length; `sha256:` prefix allowed). */
function verifyId (id: string, text: string): string | null {
  const match = ID_FORM.exec(id)
  const algorithm = match
    ? match[1]
      ? match[2]!.length === 64
        ? 'sha256'
        : undefined
      : ALGORITHM_BY_LENGTH[match[2]!.length]
    : undefined
  if (!match || !algorithm) return `id "${id}" is not a hash (expected sha256:<hex>, or md5/sha1/sha256 hex)`
  const actual = createHash(algorithm).update(text, 'utf8').digest('hex')
  return actual === match[2]!.toLowerCase()
    ? null
    : `id "${id}" does not match the ${algorithm} of its text (${actual})`
}

/** Manifest entries as (id, text) pairs, whatever the format. */
function entriesOf (json: unknown): { id: string; text: string; name?: string | null; type?: string }[] {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new Error('it is not a JSON object')
  const manifest = json as Partial<ApolloManifest> & Record<string, unknown>
  if (manifest.format !== undefined) {
    if (
      manifest.format !== 'apollo-persisted-query-manifest' ||
      manifest.version !== 1 ||
      !Array.isArray(manifest.operations)
    ) {
      throw new Error(
        `unknown manifest format "${String(manifest.format)}" version ${String(manifest.version)} (expected apollo-persisted-query-manifest version 1)`
      )
    }
    return manifest.operations.map((op, i) => {
      if (typeof op?.id !== 'string' || typeof op.body !== 'string') {
        throw new Error(`operations[${i}] needs string "id" and "body"`)
      }
      return { id: op.id, text: op.body, name: op.name, type: op.type }
    })
  }
  return Object.entries(manifest).map(([id, text]) => {
    if (typeof text !== 'string') {
      throw new Error(`the value of "${id}" is not a document text (expected an id → text map)`)
    }
    return { id, text }
  })
}

export interface Manifest {
  /** Every operation once. */
  operations: PersistedOperation[]
  /** Lookup by `sha256:<hex>` and by the id the manifest gave (e.g. Relay's md5), and by bare sha256 hex. */
  byId: Map<string, PersistedOperation>
}

export function emptyManifest (): Manifest {
  return { operations: [], byId: new Map() }
}

/**
 * Reads manifest files into one lookup, verifying every hash and that every text is a single
 * operation. Any problem is a startup error naming the file and id.
 */
export function loadManifests (files: string[]): Manifest {
  const manifest = emptyManifest()
  for (const file of files) {
    const fail = (why: string): never => { throw new Error(`Persisted query manifest ${file}: ${why}`) }
    let json: unknown
    try {
      json = JSON.parse(readFileSync(file, 'utf8'))
    } catch (err) {
      fail((err as Error).message)
    }
    let entries: ReturnType<typeof entriesOf> = []
    try { entries = entriesOf(json) } catch (err) { fail((err as Error).message) }
    for (const entry of entries) {
      const wrongId = verifyId(entry.id, entry.text)
      if (wrongId) fail(wrongId)
      let described: { name: string | null; type: OperationTypeNode }
      try {
        described = describeOperation(entry.text)
      } catch (err) {
        return fail(`operation "${entry.id}" cannot be registered: ${(err as Error).message}`)
      }
      if (
        (entry.name !== undefined && entry.name !== described.name) ||
        (entry.type !== undefined && entry.type !== described.type)
      ) {
        fail(
          `operation "${entry.id}" is listed as ${entry.type} ${entry.name} but its text holds ${described.type} ${described.name}`
        )
      }
      const hex = sha256Hex(entry.text)
      const id = `sha256:${hex}`
      let operation = manifest.byId.get(id)
      if (!operation) {
        operation = { id, text: entry.text, ...described }
        manifest.operations.push(operation)
        manifest.byId.set(id, operation)
        manifest.byId.set(hex, operation)
      }
      manifest.byId.set(entry.id, operation)
    }
  }
  return manifest
}

// ---------------------------------------------------------------------------------------------
// Automatic registration (APQ)

/** Where automatically registered texts live, by sha256 hex. Implementations bound their size. */
export interface ApqStore {
  get (hash: string): Promise<string | undefined>
  set (hash: string, text: string): Promise<void>
}

/**
 * What a registered text keeps alive in a process: the string at two bytes a character (V8's worst case) and its entry.
 */
export const apqEntryBytes = (text: string) => text.length * 2 + 512

export function memoryApqStore (maxEntries: number, maxBytes = Infinity): ApqStore {
  const lru = new LruMap<string, string>(maxEntries, maxBytes)
  return {
    async get (hash) { return lru.get(hash) },
    async set (hash, text) { lru.set(hash, text, apqEntryBytes(text)) }
  }
}

// Redis layout: a hash (sha256 hex → text) and a sorted set of the same hashes scored by last
// registration or last fetch; registering beyond maxEntries drops the lowest scores. Both steps run
// as one script, so the bound holds with many instances registering at once. (Per-key TTLs would
// bound age, not count: a flood of registrations could still grow the set without limit.)
const REGISTER = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  local dropped = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #dropped, 2 do redis.call('HDEL', KEYS[1], dropped[i]) end
end
return over`
const FETCH = `
local text = redis.call('HGET', KEYS[1], ARGV[1])
if text then redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1]) end
return text`

/**
 * APQ registry shared through Redis. The resolver keeps parsed copies of the texts it has seen in
 * memory (texts never change for a hash, so they are never stale), so only a first sight on this
 * instance costs a round trip. Redis failures degrade to that local copy: APQ is an optimisation,
 * so an outage costs clients a resend, not an error.
 */
export function redisApqStore (
  redis: Redis,
  keyOf: (name: string) => string,
  maxEntries: number,
  log: { warn(o: object, msg: string): void }
): ApqStore {
  const keys = [keyOf('apq:documents'), keyOf('apq:recency')]
  const warn = (err: unknown) =>
    log.warn({ err: (err as Error).message }, "APQ registry: Redis unavailable, using this instance's copy")
  return {
    async get (hash) {
      try {
        return ((await redis.eval(FETCH, 2, ...keys, hash, Date.now())) as string | null) ?? undefined
      } catch (err) {
        warn(err)
        return undefined
      }
    },
    async set (hash, text) {
      try {
        await redis.eval(REGISTER, 2, ...keys, hash, text, Date.now(), maxEntries)
      } catch (err) {
        warn(err)
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The resolver

export interface PersistedQueriesOptions {
  manifest: Manifest
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

interface PersistedQueryExtension { version?: unknown; sha256Hash?: unknown }

function persistedQueryExtension (extensions: unknown): PersistedQueryExtension | undefined {
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

export function createPersistedQueries (options: PersistedQueriesOptions): PersistedQueries {
  const { manifest, persistedOnly, apqMaxDocumentBytes } = options
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

  return {
    async resolve (params, allowIntrospection = false) {
      const { query } = params
      const queryId = persistedIdOf(params)
      if (queryId !== undefined) {
        // The hot path: one Map lookup, no hashing, no parsing.
        const operation = manifest.byId.get(queryId) ??
          (apq && queryId.startsWith('sha256:') ? await apqOperation(queryId.slice(7), undefined) : undefined)
        if (!operation) throw new AppError('PERSISTED_QUERY_NOT_FOUND', PersistedMessages.notFound(queryId))
        return registered(operation.text)
      }

      const pq = persistedQueryExtension(params.extensions)
      if (pq) {
        const hash = pq.sha256Hash as string
        const fromManifest = manifest.byId.get(hash)
        if (fromManifest) return registered(fromManifest.text)
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
