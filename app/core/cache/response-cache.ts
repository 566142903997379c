// A shared cache of query answers, transport-free: the caller (the GraphQL HTTP path) authenticates and
// charges the request first, then asks `lookup`, and on a miss `fill`s the entry with the execution.
//
// An entry is one answer as sent, less its per-request part (`extensions`: the caller splices its own in
// at send time with `withExtensions`), with the time its computation started (`Age`) and the read tags
// (app/core/domain/read-tags.ts) of everything it read. It keeps no ETag, since the bytes a request receives
// include its own extensions; it keeps the digest of its text, from which the carrier makes the
// validator of what it sends without hashing the text again. A write drops, through `invalidate`,
// every entry that read one of the tags it changed.
//
// Staleness is closed by sequence numbers instead of messages between instances. The store keeps a
// write sequence, and per tag the sequence of its last invalidation (a "mark"). A fill notes the sequence
// before computing (`begin`), and is stored only if none of its tags was invalidated since; a lookup
// serves an entry only if none of its tags was invalidated after the entry's sequence. So a read that
// began before a write and finishes after its invalidation is never stored, and once `invalidate`
// returns, no lookup on any instance sharing the store returns what the write changed: there is no
// window. (Marks are kept as long as an entry can live: entries expire `ttlMs` after their computation
// started, so an older mark can no longer concern any entry.)
import { textHash } from '../text-hash.ts'

/** An answer kept by the cache. */
export interface CachedAnswer {
  /** The answer's JSON as sent, without `extensions` (see withExtensions). */
  body: string
  /** textHash of `body`, taken once when it was computed: ETags are made from it (no hash of the body per hit). */
  digest: string
  /** When its computation started (epoch ms): the HTTP `Age` is now less this. */
  createdAt: number
  /** What it read (read tags). */
  tags: readonly string[]
}

/** Where entries and marks live: in process (memory-store.ts) or in Redis (redis-store.ts). */
export interface CacheStore {
  /** The write sequence now (where `key` lives): a fill begun now is kept unless its tags are invalidated after. */
  begin (key: string): Promise<number>
  /**
   * The entry, unless it has expired or one of its tags was invalidated after it began. On a miss, the
   * store may answer the write sequence now (what `begin` would), read in the same step: a fill that
   * follows the lookup begins from it without a step of its own (with Redis, a round trip less).
   */
  get (key: string): Promise<CachedAnswer | number | null>
  /** Stores the entry for `ttlMs` unless one of its tags was invalidated after `since`; true when stored. */
  set (key: string, entry: CachedAnswer, since: number, ttlMs: number): Promise<boolean>
  /** Marks the tags invalidated: no lookup returns an entry that read them before. */
  invalidate (tags: readonly string[]): Promise<void>
  /** Marks everything invalidated: no lookup returns an entry that began before. */
  invalidateAll (): Promise<void>
  /** Bytes of answers held in this process (null: held elsewhere, e.g. in Redis). */
  readonly bytes: number | null
  /**
   * Where the store's change feed has been applied up to, by any instance sharing this cache
   * (store-changes.ts); a store that serves one instance keeps none.
   */
  changesApplied? (): Promise<string | null>
  /** Records `position` as applied, unless a later one is recorded already. */
  recordChangesApplied? (position: string): Promise<void>
}

/** What a computation returns. */
export interface Computed {
  /** The answer's JSON without `extensions`. */
  body: string
  /** What it read (the request's read set). */
  tags: Iterable<string>
  /** False for an answer that must not be kept (one with errors): it is returned to its caller only. */
  store: boolean
}

/** The store's answer to a read begun before its request was admitted (ResponseCache.readEarly). */
export type EarlyRead = Promise<CachedAnswer | number | null>

/** A lookup: the entry (a hit), or a miss with the sequence a fill of the key may begin from (null: ask). */
export type Lookup = { entry: CachedAnswer; since?: undefined } | { entry: null; since: number | null }

export interface Filled {
  entry: CachedAnswer
  /** Whether this call ran the computation (false: it waited for a concurrent one with the same key). */
  executed: boolean
  /** False when the computation said not to keep it: the caller sends it as uncached (no ETag, no-store). */
  storable: boolean
}

export interface ResponseCacheOptions {
  /**
   * How long an entry may be served after its computation started, in ms. Default 60 000. Every write
   * through the domain invalidates exactly, so the TTL bounds what the cache holds and how long a change
   * made outside the service (a manual SQL update) may go unseen, not the staleness of ordinary writes.
   */
  ttlMs?: number
  /** Told of a store failure that the cache absorbed (a lookup or fill that degraded to executing). */
  onError?: (err: unknown) => void
  /** Epoch-ms clock (tests). */
  now?: () => number
}

export const DEFAULT_TTL_MS = 60_000

export interface CacheStats {
  hits: number
  misses: number
  /** Misses that waited for a concurrent computation of the same key instead of executing. */
  coalesced: number
  /** Entries stored, and fills refused because a tag they read was invalidated while they computed. */
  stored: number
  refused: number
  /** Calls to `invalidate` (two per write: before storing and before answering) and to `invalidateAll`. */
  invalidations: number
  /** Whether lookups are answered now (false while changes made elsewhere cannot be seen: see `serving`). */
  serving: boolean
  /** Store failures absorbed (the request executed uncached). */
  errors: number
  /** Bytes of answers held in this process (null with Redis: Redis's own memory). */
  bytes: number | null
}

/**
 * The cache key of an operation's answer: its plan (the persisted or parsed document and operation),
 * its variables and the caller's scope (one shared entry when the operation selects no field rule, else
 * one per anonymous, administrator, or user id), as one JSON array: unambiguous whatever the parts
 * contain. `variables` are the operation's coerced ones: the pipeline builds them in the order of their
 * definitions, and input objects in their type's field order, whatever order the client wrote, so equal
 * values give equal texts with a plain JSON.stringify (sorting keys cost 2% of a hit's CPU). Not hashed
 * here (a SHA-256 would cost more than an in-process lookup): the in-process store counts the key in an
 * entry's bytes, and the Redis store hashes it into a key name.
 */
export function cacheKey (planId: string, variables: Record<string, unknown>, scope: string): string {
  return JSON.stringify([scope, planId, variables])
}

/**
 * The answer as sent to one request: a body without extensions with that request's `extensions` (its
 * cost report) as JSON, spliced in last, as JSON.stringify puts a key added last.
 */
export function withExtensions (body: string, extensionsJson: string | undefined): string {
  if (extensionsJson === undefined) return body
  return `${body.slice(0, body.lastIndexOf('}'))},"extensions":${extensionsJson}}`
}

/** The HTTP `Age` of an entry at `now`, in whole seconds (RFC 9111). */
export function ageOf (entry: CachedAnswer, now: number): number {
  return Math.max(0, Math.floor((now - entry.createdAt) / 1000))
}

interface Flight {
  entry: CachedAnswer
  storable: boolean
}

export class ResponseCache {
  readonly ttlMs: number
  readonly #store: CacheStore
  readonly #onError: (err: unknown) => void
  readonly #now: () => number
  /** Computations running, by key: concurrent misses of one key wait for the first (bounded by requests in flight). */
  readonly #flights = new Map<string, Promise<Flight>>()
  readonly #stats = { hits: 0, misses: 0, coalesced: 0, stored: 0, refused: 0, invalidations: 0, errors: 0 }
  #serving = true

  constructor (store: CacheStore, options: ResponseCacheOptions = {}) {
    this.#store = store
    this.ttlMs = options.ttlMs ?? DEFAULT_TTL_MS
    this.#onError = options.onError ?? (() => {})
    this.#now = options.now ?? Date.now
  }

  /**
   * Whether entries are served and kept. Turned off while changes made beside the service cannot be
   * seen (store-changes.ts: the store's change feed is down, or what it reported could not be applied):
   * every request then executes and nothing is kept, so nothing those changes replaced is served.
   */
  serve (serving: boolean): void {
    this.#serving = serving
  }

  /** The entry for `key`, or null (a miss; a store that fails counts as one: the request executes). */
  async lookup (key: string): Promise<CachedAnswer | null> {
    return (await this.find(key)).entry
  }

  /**
   * Begins `find`'s read of the store now, for a request whose payment is still on its way (with Redis,
   * both go out in one write): `find(key, early)` then uses it, and only then counts it. A read begun
   * early that is never used (the request was refused) counts nowhere and is served to nobody.
   */
  readEarly (key: string): EarlyRead {
    return this.#serving ? this.#get(key) : Promise.resolve(null)
  }

  /** `lookup`, with a miss's sequence: what its fill may begin from (`fill`'s `since`). */
  async find (key: string, early?: EarlyRead): Promise<Lookup> {
    // Whether to serve is asked at use: a read begun before the cache stopped serving is not served.
    const found = this.#serving ? await (early ?? this.#get(key)) : null
    if (found !== null && typeof found === 'object') {
      this.#stats.hits++
      return { entry: found }
    }
    this.#stats.misses++
    return { entry: null, since: found }
  }

  /**
   * Computes the answer for `key` and keeps it, unless `compute` says not to or a tag it read was
   * invalidated meanwhile. Concurrent calls for one key run `compute` once: the others wait for it, then
   * look the key up again, which serves them only what is still valid (a computation that began before
   * a write they saw acknowledged is not); on a miss they run their own (`executed: true`).
   */
  async fill (key: string, compute: () => Promise<Computed>, since: number | null = null): Promise<Filled> {
    const running = this.#flights.get(key)
    if (running) {
      await running.catch(() => {})
      const found = await this.#get(key)
      if (found !== null && typeof found === 'object') {
        this.#stats.coalesced++
        return { entry: found, executed: false, storable: true }
      }
      return { ...(await this.#compute(key, compute, found)), executed: true }
    }
    const flight = this.#compute(key, compute, since)
    this.#flights.set(key, flight)
    try {
      return { ...(await flight), executed: true }
    } finally {
      this.#flights.delete(key)
    }
  }

  /** Drops every entry that read one of `tags`, on every instance sharing the store; rejects if the store fails. */
  async invalidate (tags: readonly string[]): Promise<void> {
    if (tags.length === 0) return
    this.#stats.invalidations++
    await this.#store.invalidate(tags)
  }

  /**
   * Drops every entry, on every instance sharing the store (a change whose tags are unknown); rejects if
   * the store fails.
   */
  async invalidateAll (): Promise<void> {
    this.#stats.invalidations++
    await this.#store.invalidateAll()
  }

  /** Where the change feed was applied up to by any instance sharing the cache (null: not known). */
  async changesApplied (): Promise<string | null> {
    return (await this.#store.changesApplied?.()) ?? null
  }

  /** Records that the change feed is applied up to `position` (kept by a store shared by instances). */
  async recordChangesApplied (position: string): Promise<void> {
    await this.#store.recordChangesApplied?.(position)
  }

  /** The HTTP `Age` of an entry now, on the cache's clock. */
  ageOf (entry: CachedAnswer): number {
    return ageOf(entry, this.#now())
  }

  stats (): CacheStats {
    return { ...this.#stats, serving: this.#serving, bytes: this.#store.bytes }
  }

  async #compute (key: string, compute: () => Promise<Computed>, known: number | null): Promise<Flight> {
    const createdAt = this.#now()
    let since: number | null = null
    try {
      // Not serving: computed for its caller only (what it read may already have changed elsewhere).
      // A sequence read by the lookup just before is as good as a new one (earlier: it refuses more).
      if (this.#serving) since = known ?? await this.#store.begin(key)
    } catch (err) {
      this.#failed(err)
      since = null
    }
    const computed = await compute()
    const entry: CachedAnswer = {
      body: computed.body,
      digest: textHash(computed.body),
      createdAt,
      tags: [...computed.tags]
    }
    if (!computed.store) return { entry, storable: false }
    // Entries live `ttlMs` from when their computation started: a slow one is kept for less.
    const ttlMs = this.ttlMs - (this.#now() - createdAt)
    if (since !== null && ttlMs > 0) {
      try {
        if (await this.#store.set(key, entry, since, ttlMs)) this.#stats.stored++
        else this.#stats.refused++
      } catch (err) {
        this.#failed(err)
      }
    }
    return { entry, storable: true }
  }

  async #get (key: string): Promise<CachedAnswer | number | null> {
    try {
      return await this.#store.get(key)
    } catch (err) {
      this.#failed(err)
      return null
    }
  }

  #failed (err: unknown): void {
    this.#stats.errors++
    this.#onError(err)
  }
}
