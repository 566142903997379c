// Persisted queries: loads the deploy-time manifests (PERSISTED_MANIFEST, comma-separated files),
// sets up automatic registration (APQ: in memory, or in Redis when REDIS_URL is set; off in
// persisted-only mode), decorates `app.persistedQueries` for routes/graphql.ts, and warms every
// manifest operation's plan (parsed, validated, analysed, compiled) before the server takes requests.
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import {
  createPersistedQueries, emptyManifest, loadManifests, memoryApqStore, redisApqStore,
  type Manifest
} from '../app/graphql/persisted.ts'

export interface WarmUpReport {
  /** Operations planned (parsed, validated, analysed) and compiled at start. */
  compiled: number
  ms: number
}

declare module 'fastify' {
  interface FastifyInstance {
    persistedManifest: Manifest
    persistedWarmUp: WarmUpReport | null
  }
}

export default fp(async function persistedQueries (app: FastifyInstance) {
  const { config } = app
  const files = (config.persistedManifest ?? '').split(',').map((f) => f.trim()).filter(Boolean)
  // Hashes and single operations are checked here; validity for this service when the plans are pinned.
  const manifest = files.length > 0 ? loadManifests(files) : emptyManifest()
  if (config.persistedOnly && manifest.operations.length === 0) {
    app.log.warn('persisted-only mode without a manifest (PERSISTED_MANIFEST): every GraphQL operation will be refused')
  }

  const apqOn = !config.persistedOnly && config.apqMaxEntries > 0
  const apq = !apqOn ? null : app.redis
    ? redisApqStore(app.redis, app.redisKey, config.apqMaxEntries, app.log)
    : memoryApqStore(config.apqMaxEntries, config.apqMaxBytes)

  app.decorate('persistedManifest', manifest)
  app.decorate('persistedWarmUp', null)
  app.decorate('persistedQueries', createPersistedQueries({
    manifest,
    persistedOnly: config.persistedOnly,
    apq,
    apqMaxEntries: config.apqMaxEntries,
    apqMaxBytes: config.apqMaxBytes,
    apqMaxDocumentBytes: config.apqMaxDocumentBytes,
    plan: (text) => app.graphqlPipeline.plan(text)
  }))

  // onReady: every resolver is in place (and wrapped by @auth), and nothing listens yet. Each manifest
  // operation gets its plan and compilation now, kept for the life of the process; a text the service
  // cannot run (schema drift, a limit such as MAX_DEPTH) is a broken deploy, refused at start.
  app.addHook('onReady', async () => {
    const started = performance.now()
    for (const operation of manifest.operations) {
      try {
        app.graphqlPipeline.pin(operation.text)
      } catch (err) {
        const nested = (err as { errors?: { message: string }[] }).errors
        const reason = nested?.length ? nested.map((e) => e.message).join('; ') : (err as Error).message
        throw new Error(`Persisted operation ${operation.name ?? '(anonymous)'} ${operation.id} is not valid for this service: ${reason}`)
      }
    }
    const report = { compiled: manifest.operations.length, ms: Math.round((performance.now() - started) * 10) / 10 }
    app.persistedWarmUp = report
    app.log.info({ operations: manifest.operations.length, ms: report.ms, apq: apq ? (app.redis ? 'redis' : 'memory') : 'off', persistedOnly: config.persistedOnly }, 'persisted queries ready')
  })
}, { name: 'persisted-queries', dependencies: ['config', 'redis', 'graphql'] })
