// HTTP caching of persisted GET /graphql responses (mobile clients' hottest path):
// - a successful answer (200, no errors) carries a strong ETag (a 64-bit hash of the exact text and
//   media type: a validator needs no cryptographic hash, and sha256 cost a fortieth of a persisted
//   GET's CPU), Cache-Control `private, max-age=N` when the answer depends on its caller (a field it
//   selects says so in the SDL: answer-scope.ts) or an Authorization header is present (its cost
//   report is that caller's), `public, max-age=N` otherwise, and `Vary: Accept, Authorization`;
//   anything else is `no-store`. A POST query's answer carries the same Cache-Control, without an ETag;
// - If-None-Match is answered 304 *before executing* when this instance answered the same request
//   (URL, Accept, caller) with that ETag less than max-age ago and the persisted registry still serves
//   the operation (the exchange asks it between `remembered` and `notModified`: an id retired with its
//   app deployment is answered PERSISTED_QUERY_NOT_FOUND, never 304); after executing, a matching ETag
//   still turns the answer into a 304 (saving the bytes, e.g. on another instance).
// The remembered ETags are per instance and bounded (CACHE_MAX_ENTRIES, and CACHE_MAX_BYTES: the key
// holds the URL, up to Node's 16 KB header limit): a Redis round trip would
// cost about what the execution it saves costs for the small operations mobile apps send.
//
// `extensions.cost.remaining` (the caller's rate-limit window) is left out of cacheable answers: a
// cached copy is replayed later, to other callers when public, when that number is no longer true;
// without it, unchanged data gives byte-identical answers and so the same ETag.
import type { IncomingHttpHeaders } from 'node:http'
import type { Caller } from '../core/domain/context.ts'
import { ifNoneMatchHits } from '../core/if-none-match.ts'
import { LruMap } from '../core/lru-map.ts'
import { textHash } from '../core/text-hash.ts'

/** Who may keep an answer: every caller's (`public`), or one caller's (`private`): Answered.visibility. */
export type Visibility = 'public' | 'private'

/** What the cache reads of a request (the HTTP exchange's input has it). */
export interface CacheRequest {
  caller: Caller | null
  url: string
  headers: IncomingHttpHeaders
}

/**
 * The headers of an answer, which the cache sets. `vary` is the cache's own part of it: the route adds it
 * to a Vary header set earlier (CORS).
 */
export type CacheHeaders = Record<string, string>

export interface HttpCacheOptions {
  maxAgeSec: number
  maxEntries: number
  /** Estimated bytes of the remembered entries (see entryBytes). */
  maxBytes: number
}

/**
 * What a remembered entry keeps alive: its key (caller, Accept and URL) at two bytes a character (V8
 * stores a string with any character past Latin-1 that way) and 512 for the rest. Measured: one-byte
 * keys of 160 to 16000 characters, 2000 entries kept, retained heap over GC: 1.03 bytes a character
 * plus about 420.
 */
const entryBytes = (key: string) => key.length * 2 + 512

/** An ETag this instance answered a request with (HttpCache.remembered). */
export interface Remembered {
  etag: string
  visibility: Visibility
  expires: number
}

/**
 * Called by the HTTP exchange itself (http-exchange.ts), not as route hooks: persisted GETs are the
 * hottest path, and a hook that merely forwards the payload costs a hook turn on every request.
 */
export interface HttpCache {
  /**
   * Before executing: the ETag this instance answered the same request with, less than max-age ago, when
   * the client's If-None-Match names it; undefined otherwise. Sets nothing: the exchange answers 304 from
   * it (notModified) only once the registry still serves the operation the request names.
   */
  remembered (request: CacheRequest): Remembered | undefined
  /** Sets the ETag and caching headers of a 304 answered from a remembered ETag. */
  notModified (request: CacheRequest, headers: CacheHeaders, remembered: Remembered): void
  /**
   * A successful GET answer, by its ETag (etagOf its bytes): sets the ETag and caching headers and
   * remembers the ETag; returns true when the client's If-None-Match names it (the exchange then
   * answers 304 without a body).
   */
  cacheable (request: CacheRequest, headers: CacheHeaders, etag: string, visibility: Visibility): boolean
  /** A successful POST answer to a query: its caching headers, no ETag (POST answers are not revalidated). */
  visible (request: CacheRequest, headers: CacheHeaders, visibility: Visibility): void
  /** Any other answer (errors, refusals): never stored. */
  uncacheable (headers: CacheHeaders): void
}

/**
 * The strong ETag of an answer sent with the media type `contentType`: its JSON is the text whose digest
 * (textHash) is `digest`, with `extensionsJson` spliced in as its `extensions` (withExtensions). A
 * function of exactly the bytes sent, whether they came from the response cache (which keeps the
 * digest of its text) or from an execution, on any instance; the text is hashed once, not on every hit.
 */
export const etagOf = (contentType: string, digest: string, extensionsJson: string) =>
  `"${textHash(contentType, digest, extensionsJson)}"`

export function createHttpCache (options: HttpCacheOptions): HttpCache {
  const { maxAgeSec } = options
  // Nothing to remember without a max-age, or with no room (the response cache answers If-None-Match instead).
  const remembering = maxAgeSec > 0 && options.maxEntries > 0
  const remembered = new LruMap<string, Remembered>(remembering ? options.maxEntries : 0, options.maxBytes)
  const cacheControl = {
    public: maxAgeSec > 0 ? `public, max-age=${maxAgeSec}` : 'public, no-cache',
    private: maxAgeSec > 0 ? `private, max-age=${maxAgeSec}` : 'private, no-cache'
  }

  const keyOf = (request: CacheRequest) => {
    const caller = request.caller
    return `${caller ? `${caller.role}:${caller.id}` : '-'}\n${request.headers.accept ?? ''}\n${request.url}`
  }

  const setVisibility = (request: CacheRequest, headers: CacheHeaders, visibility: Visibility) => {
    headers['cache-control'] = visibility === 'private' || request.headers.authorization
      ? cacheControl.private
      : cacheControl.public
    headers.vary = 'Accept, Authorization'
  }

  return {
    remembered (request) {
      const ifNoneMatch = request.headers['if-none-match']
      if (!ifNoneMatch || !remembering) return undefined
      const known = remembered.get(keyOf(request))
      if (!known || known.expires <= Date.now() || !ifNoneMatchHits(ifNoneMatch, known.etag)) return undefined
      return known
    },

    notModified (request, headers, known) {
      headers.etag = known.etag
      setVisibility(request, headers, known.visibility)
    },

    cacheable (request, headers, etag, visibility) {
      headers.etag = etag
      setVisibility(request, headers, visibility)
      if (remembering) {
        const key = keyOf(request)
        const expires = Date.now() + maxAgeSec * 1000
        // The same bytes again (the usual case): the entry is extended in place, without reordering the map.
        const known = remembered.peek(key)
        if (known?.etag === etag) known.expires = expires
        else remembered.set(key, { etag, visibility, expires }, entryBytes(key))
      }
      return ifNoneMatchHits(request.headers['if-none-match'], etag)
    },

    visible: setVisibility,

    uncacheable (headers) {
      headers['cache-control'] = 'no-store'
    }
  }
}
