// What browsers and developers' tools may reach: cross-origin access (CORS), and the schema's discovery
// (introspection and the query page).
import { area, list } from './area.ts'
import { origin } from './urls.ts'

export const cors = area({
  key: 'cors',
  title: 'Cross-origin access (CORS)',
  about: 'Which browser origins may call the API (WebSockets too: see `WS_ALLOWED_ORIGINS`).',
  settings: {
    CORS_ORIGINS: { type: 'string', default: '', doc: 'comma-separated allowlist; empty = no cross-origin access' }
  },
  read: (e, { problems }) => {
    // An allowlist of exact origins: a near miss (a path, `*`) fails the start instead of never matching.
    const origins = list(e.CORS_ORIGINS).map((entry) => {
      const allowed = origin(entry)
      if (!allowed) problems.push(`CORS_ORIGINS entry "${entry}" is not an origin (expected scheme://host[:port], e.g. https://app.example.com)`)
      return allowed ?? entry
    })
    /** Origins in the form browsers send them (lower-case host, default port dropped), each once. */
    return { origins: [...new Set(origins)] }
  }
})

export const schemaDiscovery = area({
  key: 'schemaDiscovery',
  title: 'Schema discovery',
  about: 'Who may read the schema (introspection) and whether the development query page is served.',
  settings: {
    INTROSPECTION: { type: 'boolean', shownDefault: 'true; false in production', doc: '`__schema`/`__type` open to every caller (ADMIN callers always may)' },
    QUERY_UI: { type: 'boolean', shownDefault: 'true; false in production', doc: 'the development query page at `/graphiql` (refuses to start when true in production)' }
  },
  read: (e, { production, problems }) => {
    // The interface: "The interactive query UI is disabled in production as well." A contradicting
    // setting refuses to start.
    if (production && e.QUERY_UI === true) {
      problems.push('QUERY_UI cannot be turned on in production (the query UI is for development only)')
    }
    return {
      /** `__schema`/`__type` for every caller (ADMIN callers always may). */
      introspection: e.INTROSPECTION ?? !production,
      queryUi: e.QUERY_UI ?? !production
    }
  }
})
