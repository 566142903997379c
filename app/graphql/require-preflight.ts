// CSRF protection for GET /graphql. A browser sends a cross-site GET without asking (an <img>, a
// link), with the victim's cookies; it must first ask (a CORS preflight, which our CORS allowlist
// answers) as soon as the request carries a non-simple header. So a GET must carry one of:
// - a Content-Type that is not one of the three "simple" CORS types (Apollo Client's HttpLink sends
//   `content-type: application/json` on GET too, so its persisted-query GET link passes as is), or
// - `apollo-require-preflight` or `x-apollo-operation-name` (the headers Apollo Server's CSRF
//   prevention accepts; easy to add for mobile apps and curl).
// The same rule as Apollo Server's csrfPrevention, so clients configured for it work here.
// WebSocket handshakes (real upgrades, which a page cannot forge) are checked by their own Origin rule.
import type { FastifyRequest, onRequestHookHandler } from 'fastify'
import { AppError } from '../errors.ts'

const SIMPLE_CONTENT_TYPES = new Set(['application/x-www-form-urlencoded', 'multipart/form-data', 'text/plain'])
const PREFLIGHT_HEADERS = ['apollo-require-preflight', 'x-apollo-operation-name']

export function forcesPreflight (headers: FastifyRequest['headers']): boolean {
  for (const name of PREFLIGHT_HEADERS) if (headers[name]) return true
  const type = headers['content-type']
  if (!type) return false
  const base = type.split(';')[0]!.trim().toLowerCase()
  return base !== '' && !SIMPLE_CONTENT_TYPES.has(base)
}

export const requirePreflightHeader: onRequestHookHandler = (request, _reply, done) => {
  // request.ws: an upgrade that really happened (@fastify/websocket), not merely an Upgrade header on a plain GET.
  if (request.ws || forcesPreflight(request.headers)) return done()
  done(new AppError('BAD_REQUEST', 'GET requests must carry a header that forces a CORS preflight (CSRF protection): Content-Type: application/json, or apollo-require-preflight: true'))
}
