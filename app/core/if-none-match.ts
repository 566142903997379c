// Conditional GETs (RFC 9110 13.1.2), for every route that answers with an ETag: the persisted GraphQL
// GETs (app/graphql/http-cache.ts) and the SOAP contracts (routes/soap/index.ts).

/** Whether an If-None-Match value names `etag` (weak comparison, as RFC 9110 requires for it), or is `*`. */
export function ifNoneMatchHits (header: string | undefined, etag: string): boolean {
  if (!header) return false
  if (header.trim() === '*') return true
  return header.split(',').some((tag) => {
    const t = tag.trim()
    return (t.startsWith('W/') ? t.slice(2) : t) === etag
  })
}
