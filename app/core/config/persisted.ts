// Persisted operations: persisted-only mode and the manifests published at start, the app deployments'
// bounds, automatic registration (APQ), and the HTTP caching of persisted GET requests.
import { fileURLToPath } from 'node:url'
import { area, optional } from './area.ts'
import { store } from './store.ts'

/** The example operations' manifest the development profile serves: found from any working directory. */
const EXAMPLE_MANIFEST = fileURLToPath(new URL('../../../persisted/manifest.json', import.meta.url))

export const persisted = area({
  key: 'persisted',
  title: 'Persisted operations',
  about: 'Operations registered ahead (app deployments, published by `npm run app` or from manifest files at start), and whether only they run.',
  uses: [store],
  settings: {
    PERSISTED_ONLY: { type: 'boolean', shownDefault: 'false; true in production', doc: 'only persisted operations run (`PERSISTED_QUERY_REQUIRED`); APQ is off in this mode' },
    PERSISTED_MANIFEST: { type: 'string', shownDefault: 'unset; `persisted/manifest.json` in development with `DEMO_DATA`', doc: 'manifest files published at start as app deployments named after them (written by npm run persisted:build; comma-separated for several; Apollo and Relay manifests too); empty: none' }
  },
  read: (e, { production, store }) => ({
    only: e.PERSISTED_ONLY ?? production,
    // The development profile serves the example operations from its first start (with its demo data),
    // published as the app deployment `manifest`; PERSISTED_MANIFEST= (empty) turns that off.
    manifest: e.PERSISTED_MANIFEST !== undefined
      ? optional(e.PERSISTED_MANIFEST)
      : !production && store.demoData ? EXAMPLE_MANIFEST : null
  })
})

export const deployments = area({
  key: 'deployments',
  title: 'App deployments',
  about: 'What the active app deployments (app/graphql/app-deployments.ts) may weigh, and how their use is counted.',
  settings: {
    DEPLOYMENTS_MAX_BYTES: { type: 'integer', minimum: 0, default: 268435456, doc: 'what the active app deployments\' operations may weigh in an instance\'s memory, plans and compiled code as the service estimates them (256 MiB; about 100 to 200 times their text); a publish past it is refused in its transaction, and an instance holds at most a quarter of its heap, whichever is less' },
    DEPLOYMENT_USAGE_FLUSH_MS: { type: 'integer', minimum: 100, maximum: 600000, default: 1000, doc: 'how often an instance adds its app deployment usage counts to the store (100 to 600000): also the most counting an instance killed without a shutdown loses' }
  },
  read: (e) => ({
    /** The active operations an instance holds in memory, at most: a publish past it is refused. */
    maxBytes: e.DEPLOYMENTS_MAX_BYTES,
    /** How often an instance writes the requests it counted per deployment to the store. */
    usageFlushMs: e.DEPLOYMENT_USAGE_FLUSH_MS
  })
})

export const apq = area({
  key: 'apq',
  title: 'Automatic persisted queries (APQ)',
  about: 'Texts clients register by their hash on first use (Apollo\'s protocol), kept in Redis with `REDIS_URL`, else in this process; off in persisted-only mode.',
  settings: {
    APQ_MAX_ENTRIES: { type: 'integer', minimum: 0, default: 10000, doc: 'automatic registration (APQ) bound; 0 turns APQ off (always off when PERSISTED_ONLY)' },
    APQ_MAX_BYTES: { type: 'integer', minimum: 0, default: 33554432, doc: 'estimated bytes of registered texts kept in this process (entries alone allow 10000 x 16 KB)' },
    APQ_MAX_DOCUMENT_BYTES: { type: 'integer', minimum: 0, default: 16384, doc: 'longer APQ texts run but are not registered' }
  },
  read: (e) => ({
    /** 0 turns APQ off. */
    maxEntries: e.APQ_MAX_ENTRIES,
    /** Estimated bytes of registered texts kept in this process (Redis bounds its registry by maxEntries). */
    maxBytes: e.APQ_MAX_BYTES,
    /** Longer texts run but are not registered (bounds the registry's memory). */
    maxDocumentBytes: e.APQ_MAX_DOCUMENT_BYTES
  })
})

export const httpCaching = area({
  key: 'httpCaching',
  title: 'HTTP caching of persisted GET requests',
  about: 'What browsers and proxies may keep of a persisted query sent as GET (`Cache-Control`), and the ETags an instance remembers to answer `If-None-Match` with 304.',
  settings: {
    CACHE_MAX_AGE_SEC: { type: 'integer', minimum: 0, default: 60, doc: 'Cache-Control max-age of persisted GET responses (public when anonymous, private with Authorization)' },
    CACHE_MAX_ENTRIES: { type: 'integer', minimum: 0, default: 10000, doc: 'without the response cache: ETags remembered per instance, so If-None-Match gets 304 without executing (with it, its shared entries answer If-None-Match)' },
    CACHE_MAX_BYTES: { type: 'integer', minimum: 0, default: 16777216, doc: 'and their estimated bytes (each entry\'s key holds the URL, up to 16 KB)' }
  },
  read: (e) => ({
    maxAgeSec: e.CACHE_MAX_AGE_SEC,
    /** How many responses' ETags are remembered for If-None-Match (304 without executing). */
    etagMaxEntries: e.CACHE_MAX_ENTRIES,
    /** Estimated bytes of those ETags' entries (their keys hold the URL). */
    etagMaxBytes: e.CACHE_MAX_BYTES
  })
})
