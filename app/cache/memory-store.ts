// The in-process store of the response cache (the embedded default): entries in an LRU bounded in bytes,
// and the same sequence scheme as Redis (response-cache.ts) with a counter and marks in this process.
// It serves one instance: instances that share a database must share a Redis store instead.
import { LruMap } from '../lru-map.ts'
import type { CacheStore, CachedAnswer } from './response-cache.ts'

export interface MemoryStoreOptions {
  /**
   * The bound on what entries keep alive, in estimated bytes (entryBytes). Default 64 MiB: thousands of
   * typical answers (a user is a few hundred bytes, a page of 100 a few tens of KB) for a bounded share
   * of a small container's memory.
   */
  maxBytes?: number
  /** How long an entry may live (the cache's TTL): marks older than this concern no entry and are dropped. */
  ttlMs: number
  /**
   * The most marks kept (tags invalidated within the TTL). Default 100 000. Past it every mark is
   * dropped at once and every older entry counts as invalidated (a rare flush instead of unbounded marks).
   */
  maxMarks?: number
  /** Epoch-ms clock (tests). */
  now?: () => number
}

export const DEFAULT_MAX_BYTES = 64 * 1024 * 1024
const DEFAULT_MAX_MARKS = 100_000

/**
 * What an entry keeps alive besides its strings' characters: the entry, record and array objects, the
 * LRU's Map slot, string headers (512), and the ETag the HTTP exchange remembers beside an entry a GET
 * hit (routes/graphql/http-exchange.ts: 213 bytes measured, counted as 224). Measured with
 * bench/response-cache-memory.ts (which sends no GET, so keeps no ETag): 566-767 bytes of heap per entry
 * for a 200-byte answer with one tag (estimate 1025), 1377-1612 for a 1000-byte one (estimate 1825).
 */
const ENTRY_OVERHEAD = 512 + 224

/** V8 stores a string in one byte a character when every character is Latin-1, else in two. */
const charBytes = (text: string) => (/[^\u0000-\u00ff]/.test(text) ? 2 : 1) * text.length // eslint-disable-line no-control-regex

export function entryBytes (key: string, entry: CachedAnswer): number {
  let bytes = ENTRY_OVERHEAD + key.length + charBytes(entry.body)
  for (const tag of entry.tags) bytes += 24 + charBytes(tag)
  return bytes
}

interface Stored {
  entry: CachedAnswer
  since: number
  expires: number
}

interface Mark {
  seq: number
  at: number
}

export class MemoryCacheStore implements CacheStore {
  readonly #entries: LruMap<string, Stored>
  readonly #ttlMs: number
  readonly #maxMarks: number
  readonly #now: () => number
  #seq = 0
  /** Marks by tag, oldest first (a tag invalidated again moves to the end). */
  readonly #marks = new Map<string, Mark>()
  /** Entries that began before this sequence count as invalidated (the marks were dropped to stay bounded). */
  #floor = 0

  constructor (options: MemoryStoreOptions) {
    this.#entries = new LruMap(Number.MAX_SAFE_INTEGER, options.maxBytes ?? DEFAULT_MAX_BYTES)
    this.#ttlMs = options.ttlMs
    this.#maxMarks = options.maxMarks ?? DEFAULT_MAX_MARKS
    this.#now = options.now ?? Date.now
  }

  async begin (): Promise<number> {
    return this.#seq
  }

  async get (key: string): Promise<CachedAnswer | null> {
    const stored = this.#entries.get(key)
    if (!stored) return null
    if (stored.expires <= this.#now() || this.#invalidatedSince(stored.entry.tags, stored.since)) {
      this.#entries.delete(key)
      return null
    }
    return stored.entry
  }

  async set (key: string, entry: CachedAnswer, since: number, ttlMs: number): Promise<boolean> {
    if (this.#invalidatedSince(entry.tags, since)) return false
    this.#entries.set(key, { entry, since, expires: this.#now() + ttlMs }, entryBytes(key, entry))
    return true
  }

  async invalidate (tags: readonly string[]): Promise<void> {
    const at = this.#now()
    const seq = ++this.#seq
    for (const tag of tags) {
      this.#marks.delete(tag)
      this.#marks.set(tag, { seq, at })
    }
    // Drop the marks older than any live entry, oldest first; past the bound, all of them (see #floor).
    for (const [tag, mark] of this.#marks) {
      if (mark.at > at - this.#ttlMs) break
      this.#marks.delete(tag)
    }
    if (this.#marks.size > this.#maxMarks) {
      this.#marks.clear()
      this.#floor = seq
    }
  }

  async invalidateAll (): Promise<void> {
    this.#floor = ++this.#seq
    this.#marks.clear()
    this.#entries.clear()
  }

  get bytes (): number {
    return this.#entries.weight
  }

  /** Entries held (tests, measurements). */
  get size (): number {
    return this.#entries.size
  }

  /** Marks held (tests: they stay bounded). */
  get markCount (): number {
    return this.#marks.size
  }

  #invalidatedSince (tags: readonly string[], since: number): boolean {
    if (since < this.#floor) return true
    if (this.#marks.size === 0) return false
    for (const tag of tags) if ((this.#marks.get(tag)?.seq ?? 0) > since) return true
    return false
  }
}
