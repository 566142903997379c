// Content negotiation for /graphql and the headers every refusal carries, used by the route and by the
// app's error handler (errors raised before the route: 401, 415, 429, malformed JSON) alike.
//
// Clients send long Accept lists: urql sends `application/graphql-response+json, application/graphql+json,
// application/json, text/event-stream, multipart/mixed` with every POST. An event stream is answered
// only when text/event-stream is strictly preferred (by q-value) over every JSON type, or when the
// operation is a subscription and the client accepts a stream at all; anything else is JSON.
import type { ErrorCode } from './errors.ts'

export const GRAPHQL_RESPONSE = 'application/graphql-response+json'
const JSON_TYPES = [GRAPHQL_RESPONSE, 'application/graphql+json', 'application/json', 'application/*', '*/*']
/** Only an explicit text/event-stream asks for a stream: a wildcard is answered with JSON. */
const EVENT_STREAM = ['text/event-stream']

/** The q-value the Accept header gives the first of `types` it names (most specific first); 0 when none. */
function qualityOf (accept: string | undefined, types: readonly string[]): number {
  if (!accept) return 0
  let best: { rank: number; q: number } | undefined
  // One pass over the header, bounded by its length (Node caps header sizes).
  for (const range of accept.split(',')) {
    const [type = '', ...params] = range.split(';')
    const rank = types.indexOf(type.trim().toLowerCase())
    if (rank === -1 || (best && best.rank <= rank)) continue
    const qParam = params.map((p) => p.trim().toLowerCase()).find((p) => p.startsWith('q='))
    const q = qParam === undefined ? 1 : Number(qParam.slice(2))
    best = { rank, q: Number.isFinite(q) ? Math.min(Math.max(q, 0), 1) : 0 }
  }
  return best?.q ?? 0
}

/** text/event-stream is accepted and strictly preferred over every JSON type. */
export function prefersEventStream (accept: string | undefined): boolean {
  const stream = qualityOf(accept, EVENT_STREAM)
  return stream > 0 && stream > Math.max(...JSON_TYPES.map((type) => qualityOf(accept, [type])))
}

/** text/event-stream is acceptable at all (then a subscription is answered as a stream). */
export function acceptsEventStream (accept: string | undefined): boolean {
  return qualityOf(accept, EVENT_STREAM) > 0
}

/** The GraphQL-over-HTTP media type is asked for, at least as much as plain application/json. */
export function wantsGraphQLResponse (accept: string | undefined): boolean {
  const q = qualityOf(accept, [GRAPHQL_RESPONSE])
  return q > 0 && q >= qualityOf(accept, ['application/json'])
}

/** The Content-Type of a JSON answer for this Accept header. */
export function jsonAnswerType (accept: string | undefined): string {
  return wantsGraphQLResponse(accept) ? `${GRAPHQL_RESPONSE}; charset=utf-8` : 'application/json; charset=utf-8'
}

/** The methods /graphql serves (its Allow header). */
const GRAPHQL_METHODS = 'GET, POST'

/**
 * Headers HTTP defines for a refusal's status: WWW-Authenticate on 401 (RFC 6750), Allow on 405, Retry-After on 429.
 */
/** What a refusal's headers are set on (the HTTP carrier's reply has it). */
export interface HeaderSink {
  header (name: string, value: string): unknown
  hasHeader (name: string): boolean
}

export function setRefusalHeaders (reply: HeaderSink, code: ErrorCode, retryAfter?: unknown): void {
  if (code === 'UNAUTHENTICATED') reply.header('www-authenticate', 'Bearer error="invalid_token"')
  else if (code === 'METHOD_NOT_ALLOWED') reply.header('allow', GRAPHQL_METHODS)
  else if (code === 'RATE_LIMITED' && !reply.hasHeader('retry-after')) {
    reply.header('retry-after', String(retryAfter ?? 60))
  }
}
