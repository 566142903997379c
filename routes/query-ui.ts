// The interactive query UI, for development only: GET /graphiql and its two assets from routes/ui/.
// Registered only when config.schemaDiscovery.queryUi is on (QUERY_UI, on by default in development); in
// production the routes never exist and answer 404, and QUERY_UI=true there refuses to start.
// Mercurius's own GraphiQL stays off (routes: false): it loads its scripts from a public CDN, which
// fails offline and would need a CSP open to that CDN. Our page is three small files with no
// dependencies, served under a 'self'-only Content-Security-Policy.
import { readFileSync } from 'node:fs'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'

export const QUERY_UI_PATH = '/graphiql'

/** Nothing but this origin: no inline script or style, no CDN, no framing, no form posts elsewhere. */
export const QUERY_UI_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'"
].join('; ')

const assets = [
  { path: QUERY_UI_PATH, file: 'index.html', type: 'text/html; charset=utf-8' },
  { path: `${QUERY_UI_PATH}/query-ui.js`, file: 'query-ui.js', type: 'text/javascript; charset=utf-8' },
  { path: `${QUERY_UI_PATH}/query-ui.css`, file: 'query-ui.css', type: 'text/css; charset=utf-8' }
]

export default fp(async function queryUi (app: FastifyInstance) {
  // (app/core/config/browsers.ts refuses QUERY_UI=true in production.)
  if (!app.config.schemaDiscovery.queryUi) return

  for (const asset of assets) {
    // Read once at start-up: three small files, and a missing one fails the start, not a request.
    const content = readFileSync(new URL(`./ui/${asset.file}`, import.meta.url))
    app.get(asset.path, async (_request, reply) => {
      return reply
        .header('content-security-policy', QUERY_UI_CSP)
        .header('x-content-type-options', 'nosniff')
        .header('referrer-policy', 'no-referrer')
        .header('cache-control', 'no-cache')
        .type(asset.type)
        .send(content)
    })
  }
}, { name: 'query-ui', dependencies: ['config'] })
