// Cross-origin access for browser clients on other origins, through @fastify/cors with an allowlist
// (CORS_ORIGINS, comma-separated exact origins such as https://app.example.com). Empty, the default in
// every profile, means closed: the plugin is not registered, so no response carries CORS headers and a
// preflight gets 404. The bundled query UI is same-origin and needs none of this.
// Cookies are never used (tokens travel in Authorization), so credentials are never allowed.
import fp from 'fastify-plugin'
import fastifyCors from '@fastify/cors'
import type { FastifyInstance } from 'fastify'

/** Headers a cross-origin client may send: JSON bodies, bearer tokens and the persisted-query preflight headers. */
export const CORS_ALLOWED_HEADERS = ['content-type', 'authorization', 'apollo-require-preflight', 'x-apollo-operation-name']
/** Response headers a cross-origin client may read besides the CORS-safelisted ones. */
export const CORS_EXPOSED_HEADERS = ['x-request-id', 'retry-after']
export const CORS_MAX_AGE_SEC = 600

/**
 * Checks each configured entry is an origin (scheme://host[:port], nothing else) and returns it in the
 * form browsers send (lower-case host, default port dropped), so a near miss matches or fails the start
 * instead of silently never matching. A path is refused, and so is `*`: the setting is an allowlist.
 */
export function allowedOrigins (entries: string[]): Set<string> {
  const origins = new Set<string>()
  for (const entry of entries) {
    let url: URL | null = null
    try { url = new URL(entry) } catch { /* reported below */ }
    if (!url || !['http:', 'https:'].includes(url.protocol) || url.username || url.password || url.pathname !== '/' || url.search || url.hash) {
      throw new Error(`Configuration: CORS_ORIGINS entry "${entry}" is not an origin (expected scheme://host[:port], e.g. https://app.example.com)`)
    }
    origins.add(url.origin)
  }
  return origins
}

export default fp(async function cors (app: FastifyInstance) {
  const origins = allowedOrigins(app.config.corsOrigins)
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
