// Cross-origin access for browser clients on other origins, through @fastify/cors with an allowlist
// (CORS_ORIGINS, comma-separated exact origins such as https://app.example.com). Empty, the default in
// every profile, means closed: the plugin is not registered, so no response carries CORS headers and a
// preflight gets 404. The bundled query UI is same-origin and needs none of this.
// Cookies are never used (tokens travel in Authorization), so credentials are never allowed.
import fp from 'fastify-plugin'
import fastifyCors from '@fastify/cors'
import type { FastifyInstance } from 'fastify'

/**
 * Headers a cross-origin client may send: JSON bodies, bearer tokens, the headers Apollo Client sends
 * (its CSRF-prevention headers, and the client name and version it adds for client awareness), and the
 * W3C trace context headers tracing clients add (traceparent, tracestate, baggage).
 */
export const CORS_ALLOWED_HEADERS = [
  'content-type', 'authorization', 'apollo-require-preflight', 'x-apollo-operation-name',
  'apollographql-client-name', 'apollographql-client-version', 'traceparent', 'tracestate', 'baggage'
]
/** Response headers a cross-origin client may read besides the CORS-safelisted ones. */
export const CORS_EXPOSED_HEADERS = ['x-request-id', 'retry-after']
export const CORS_MAX_AGE_SEC = 600

export default fp(async function cors (app: FastifyInstance) {
  // Origins in the form browsers send them, checked by app/core/config/browsers.ts (a bad entry refuses to start).
  const origins = new Set(app.config.cors.origins)
  if (origins.size === 0) return

  await app.register(fastifyCors, {
    // A disallowed (or absent) Origin gets no CORS headers at all, and its preflight falls through to 404.
    origin: (origin, callback) => callback(null, origin !== undefined && origins.has(origin) ? origin : false),
    methods: ['GET', 'POST'],
    allowedHeaders: CORS_ALLOWED_HEADERS,
    exposedHeaders: CORS_EXPOSED_HEADERS,
    credentials: false,
    maxAge: CORS_MAX_AGE_SEC
  })
}, { name: 'cors', dependencies: ['config'] })
