// HTTP caching of persisted GET /graphql responses (mobile clients' hottest path), as route hooks:
// - a successful answer (200, no errors) carries a strong ETag (sha256 of the exact bytes and media
//   type), Cache-Control `public, max-age=N` for anonymous callers or `private, max-age=N` when an
//   Authorization header is present, and `Vary: Accept, Authorization`; anything else is `no-store`;
// - If-None-Match is answered 304 *before executing* when this instance answered the same request
//   (URL, Accept, caller) with that ETag less than max-age ago; after executing, a matching ETag
//   still turns the answer into a 304 (saving the bytes, e.g. on another instance).
// The remembered ETags are per instance and bounded (CACHE_MAX_ENTRIES): a Redis round trip would
// cost about what the execution it saves costs for the small operations mobile apps send.
//
// `extensions.cost.remaining` (the caller's rate-limit window) is left out of cacheable answers: a
// cached copy is replayed later, to other callers when public, when that number is no longer true;
// without it, unchanged data gives byte-identical answers and so the same ETag.
import { hash } from 'node:crypto'
import type { FastifyReply, FastifyRequest, RouteShorthandOptions } from 'fastify'
import { LruMap } from '../lru-map.ts'
import type { CostReport } from './context.ts'

export interface HttpCacheOptions {
  maxAgeSec: number
  maxEntries: number
}

interface Remembered {
  etag: string
  expires: number
}

type Hooks = Pick<RouteShorthandOptions, 'preHandler' | 'preSerialization' | 'onSend'>

/** Whether an If-None-Match value names `etag` (weak comparison, as RFC 9110 requires for it). */
export function ifNoneMatchHits (header: string | undefined, etag: string): boolean {
  if (!header) return false
  if (header.trim() === '*') return true
  return header.split(',').some((tag) => {
    const t = tag.trim()
    return (t.startsWith('W/') ? t.slice(2) : t) === etag
  })
}

/** A WebSocket upgrade that happened (not merely a GET carrying an Upgrade header, which is answered like any GET). */
function isUpgrade (request: FastifyRequest): boolean {
  return request.ws
}

export function createHttpCache (options: HttpCacheOptions): Hooks {
  const { maxAgeSec } = options
  const remembered = new LruMap<string, Remembered>(maxAgeSec > 0 ? options.maxEntries : 0)
  const cacheable = new WeakSet<FastifyRequest>()

  const keyOf = (request: FastifyRequest) => {
    const caller = request.caller
    return `${caller ? `${caller.role}:${caller.id}` : '-'}\n${request.headers.accept ?? ''}\n${request.url}`
  }

  const setCacheHeaders = (request: FastifyRequest, reply: FastifyReply, etag: string) => {
    const scope = request.headers.authorization ? 'private' : 'public'
    const vary = reply.getHeader('vary')
    reply.header('etag', etag)
    reply.header('cache-control', maxAgeSec > 0 ? `${scope}, max-age=${maxAgeSec}` : `${scope}, no-cache`)
    reply.header('vary', vary ? `${String(vary)}, Accept, Authorization` : 'Accept, Authorization')
  }

  // Callback-style hooks: persisted GETs are the hottest path, and none of these steps waits for anything.
  return {
    // After identification (the caller is part of the key), before anything executes.
    preHandler (request, reply, done) {
      const ifNoneMatch = request.headers['if-none-match']
      if (!ifNoneMatch || isUpgrade(request)) return done()
      const known = remembered.get(keyOf(request))
      if (!known || known.expires <= Date.now() || !ifNoneMatchHits(ifNoneMatch, known.etag)) return done()
      setCacheHeaders(request, reply, known.etag)
      reply.code(304).send() // answered here: the handler does not run
    },

    preSerialization (request, reply, payload: unknown, done) {
      const body = payload as { errors?: unknown[]; extensions?: { cost?: CostReport | Omit<CostReport, 'remaining'> } } | null
      if (reply.statusCode !== 200 || body === null || typeof body !== 'object' || body.errors !== undefined) return done(null, payload)
      cacheable.add(request)
      // The body is this request's own object (routes/graphql.ts builds it per response): replaced in place.
      const cost = body.extensions?.cost
      if (cost !== undefined && 'remaining' in cost) body.extensions!.cost = { requested: cost.requested, budget: cost.budget }
      done(null, body)
    },

    onSend (request, reply, payload, done) {
      if (reply.statusCode === 304 || isUpgrade(request)) return done(null, payload)
      if (!cacheable.has(request) || typeof payload !== 'string') {
        reply.header('cache-control', 'no-store')
        return done(null, payload)
      }
      const etag = `"${hash('sha256', `${String(reply.getHeader('content-type'))}\n${payload}`, 'base64url')}"`
      setCacheHeaders(request, reply, etag)
      if (maxAgeSec > 0) remembered.set(keyOf(request), { etag, expires: Date.now() + maxAgeSec * 1000 })
      if (ifNoneMatchHits(request.headers['if-none-match'], etag)) {
        reply.code(304)
        return done(null, '')
      }
      done(null, payload)
    }
  }
}
