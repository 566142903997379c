import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { openStore, type Store } from '../app/core/store/index.ts'
import { loadDemoData } from '../app/core/store/sample-data.ts'

declare module 'fastify' {
  interface FastifyInstance {
    store: Store
  }
}

/** Opens the configured store (or takes one given by a test), loads the demo data set into a new embedded store. */
export default fp(async function store (app: FastifyInstance, opts: { store?: Store }) {
  // The service's own store: the embedded file's instance lock, and PostgreSQL writes that announce nothing
  // (the service tells the caches itself; app/core/domain/store-tags.ts).
  const store = opts.store ?? await openStore(app.config, { service: true })
  if (!opts.store && store.kind === 'sqlite' && app.config.store.demoData) await loadDemoData(store)
  // With tracing on, every store call is a database span (one wrapper, not one edit per method).
  app.decorate('store', app.tracing ? app.tracing.store(store) : store)
  app.readinessChecks.set('store', () => app.store.ping())
  // A store handed in by a test belongs to the test.
  if (!opts.store) app.addHook('onClose', () => store.close())
}, { name: 'store', dependencies: ['config', 'tracing', 'readiness'] })
