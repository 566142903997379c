// One Redis connection for shared state (rate-limit and cost counters, APQ registry, WS-Security
// nonces) when REDIS_URL is set; `app.redis.client` is null in the embedded default. Keys carry the
// configured prefix (`app.redis.key`). Commands fail fast while Redis is down instead of queueing
// forever, so callers answer with clear errors and readiness reflects the outage.
import fp from 'fastify-plugin'
import { Redis } from 'ioredis'
import type { FastifyInstance } from 'fastify'
import { withoutCredentials } from '../app/config.ts'

export interface SharedRedis {
  /** The connection; null without REDIS_URL. */
  client: Redis | null
  /** The configured prefix + name: every key this deployment writes. */
  key (name: string): string
}

declare module 'fastify' {
  interface FastifyInstance {
    redis: SharedRedis
  }
}

/** How long a graceful shutdown waits for Redis connections to close politely. */
export const CLOSE_WAIT_MS = 1000
/**
 * The longest a command may wait for Redis's answer (it normally takes well under a millisecond). Past
 * it the command fails, and the caller degrades as it does when Redis is down: a Redis that stops
 * answering while its connection stays open (a network partition) would otherwise hold requests forever.
 */
export const COMMAND_TIMEOUT_MS = 500

export default fp(async function redis (app: FastifyInstance) {
  const { redisUrl, redisPrefix } = app.config
  const key = (name: string) => `${redisPrefix}${name}`
  if (!redisUrl) {
    app.decorate('redis', { client: null, key })
    return
  }
  const client = new Redis(redisUrl, {
    maxRetriesPerRequest: 1,
    // Commands that requests issue in the same turn of the event loop go out in one write (and their
    // answers come back in one read): under load, the requests a read of Redis's answers resumes send
    // their next commands together. Measured on the deployed rows, interleaved in one run: a persisted
    // GET executed 306 -> 230 µs of CPU, a cached one 145 -> 130 (bench, docs/benchmarks.md).
    enableAutoPipelining: true,
    enableOfflineQueue: false,
    connectTimeout: 2000,
    commandTimeout: COMMAND_TIMEOUT_MS,
    retryStrategy: (attempt) => Math.min(attempt * 200, 2000)
  })
  // Connection errors are reported through readiness and per-command failures, not as crashes.
  client.on('error', (err) => app.log.warn({ err: err.message }, 'redis connection error'))
  try {
    const shown = withoutCredentials(redisUrl)
    await new Promise<void>((resolve, reject) => {
      client.once('ready', resolve)
      client.once('end', () => reject(new Error(`Redis at ${shown} is not reachable`)))
      setTimeout(() => reject(new Error(`Redis at ${shown} did not answer within 5 s`)), 5000).unref()
    })
  } catch (err) {
    client.disconnect()
    throw err
  }
  app.decorate('redis', { client, key })
  app.addHook('onReady', async () => {
    app.readinessChecks?.set('redis', async () => { await client.ping() })
  })
  // QUIT lets pending replies arrive; bounded, so a Redis that vanishes mid-shutdown cannot hold it up.
  app.addHook('onClose', async () => {
    await Promise.race([
      client.quit().catch(() => {}),
      new Promise((resolve) => setTimeout(resolve, CLOSE_WAIT_MS).unref())
    ])
    client.disconnect()
  })
}, { name: 'redis', dependencies: ['config'] })
