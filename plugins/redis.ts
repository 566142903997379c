// The Redis connections: one for shared state (rate-limit and cost counters, APQ registry, WS-Security
// nonces) when REDIS_URL or REDIS_CLUSTER_NODES is set, and one for cached answers when they have a Redis
// of their own (RESPONSE_CACHE_REDIS_URL or _CLUSTER_NODES: a Redis that may evict). `app.redis.client`
// is null in the embedded default. Keys carry the configured prefix (`app.redis.key`). Commands fail
// fast while Redis is down instead of queueing forever, so callers answer with clear errors and
// readiness reflects the outage. On a Redis Cluster every key of one command or script shares a hash
// slot (the `{…}` part of its name), so each is served by one node.
import fp from 'fastify-plugin'
import { Cluster, Redis, type RedisOptions } from 'ioredis'
import type { FastifyInstance } from 'fastify'
import { SCRIPTS_WITH_KEY_COUNTS } from '../app/core/cache/redis-store.ts'
import { LEASE_SCRIPT } from '../app/core/limits/window-counters.ts'
import { withoutCredentials } from '../app/core/config/index.ts'
import type { RedisAddress } from '../app/core/redis-address.ts'

/** The service's Redis, connected, as the builder of a piece of shared state receives it. */
export interface ConnectedRedis {
  /** The connection to the Redis of shared state. */
  client: Redis | Cluster
  /** Whether it is a Redis Cluster. */
  cluster: boolean
  /** Where it is (pub/sub opens connections of its own there). */
  address: RedisAddress
  /** The configured prefix + name: every key this deployment writes. */
  key (name: string): string
  /**
   * Where cached answers live: a Redis of their own, which may evict keys (RESPONSE_CACHE_REDIS_URL),
   * else the same as `client`.
   */
  cache: { client: Redis | Cluster; cluster: boolean; mayEvict: boolean }
}

/** Where one piece of shared state lives. */
export type Placement = 'redis' | 'redis cluster' | 'in-process'

export interface SharedRedis {
  /** The connection to the Redis of shared state; null without one. */
  client: Redis | Cluster | null
  /** Whether it is a Redis Cluster. */
  cluster: boolean
  /** The configured prefix + name: every key this deployment writes. */
  key (name: string): string
  /**
   * Where cached answers live: a Redis of their own, which may evict keys (RESPONSE_CACHE_REDIS_URL),
   * else the same as `client`; null without Redis.
   */
  cache: ConnectedRedis['cache'] | null
  /**
   * The one place where "in Redis when the service has one, else in this process" is decided, for every
   * piece of state instances share (the budgets' counters, APQ texts, WS-Security nonces, cached answers,
   * events): `onRedis` builds `what` over the connected Redis (every instance sees it), `inProcess` for
   * this instance alone. Each choice is kept in `placements`, which the start-up line reports.
   */
  shared<T> (what: string, onRedis: (redis: ConnectedRedis) => T, inProcess: () => T): T
  /** Where each piece of shared state built so far lives, by what it is. */
  readonly placements: Readonly<Record<string, Placement>>
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
/** How long start-up waits for a Redis to answer. */
const READY_TIMEOUT_MS = 5000

/**
 * Options of every connection to one Redis server (or each node of a cluster). Commands fail fast; the
 * pub/sub connections (plugins/events.ts) keep ioredis's defaults, so subscriptions are made again and
 * held until a connection is back (publishing is bounded there).
 */
function serverOptions (url: URL, pubSub: boolean): RedisOptions {
  return {
    username: decodeURIComponent(url.username) || undefined,
    password: decodeURIComponent(url.password) || undefined,
    ...(url.protocol === 'rediss:' ? { tls: {} } : {}),
    connectTimeout: 2000,
    ...(pubSub ? {} : { maxRetriesPerRequest: 1, commandTimeout: COMMAND_TIMEOUT_MS })
  }
}

/**
 * A connection to `address`, not yet connected (`lazyConnect`): one server, or a Redis Cluster found from
 * the nodes given. Commands issued in the same turn of the event loop go out in one write
 * (and their answers come back in one read): under load, the requests a read of Redis's answers resumes
 * send their next commands together. Measured on the deployed rows, interleaved in one run: a persisted
 * GET executed 306 -> 230 µs of CPU, a cached one 145 -> 130 (bench, docs/benchmarks.md).
 */
export function redisConnection (address: RedisAddress, use: 'commands' | 'pub/sub' = 'commands'): Redis | Cluster {
  const urls = address.urls.map((u) => new URL(u))
  const pubSub = use === 'pub/sub'
  const options = serverOptions(urls[0]!, pubSub)
  if (!address.cluster) {
    const url = urls[0]!
    // With Redis Sentinel the URL's host is the master group's name: ioredis asks the sentinels where its
    // master is, and again after a failover (the connection is closed by the old master's demotion).
    const where = address.sentinels
      ? {
          name: url.hostname,
          sentinels: address.sentinels.map((s) => new URL(s))
            .map((s) => ({ host: s.hostname, port: Number(s.port || 26379) })),
          sentinelPassword: decodeURIComponent(new URL(address.sentinels[0]!).password) || undefined,
          sentinelRetryStrategy: (attempt: number) => Math.min(attempt * 200, 2000)
        }
      : { host: url.hostname, port: Number(url.port || 6379) }
    return new Redis({
      ...options,
      ...where,
      db: Number(url.pathname.slice(1) || 0),
      lazyConnect: true,
      enableAutoPipelining: true,
      enableOfflineQueue: pubSub,
      retryStrategy: (attempt) => Math.min(attempt * 200, 2000)
    })
  }
  return new Cluster(urls.map((url) => ({ host: url.hostname, port: Number(url.port || 6379) })), {
    redisOptions: options,
    lazyConnect: true,
    enableAutoPipelining: true,
    autoPipeliningIgnoredCommands: [...SCRIPTS_WITH_KEY_COUNTS, LEASE_SCRIPT],
    enableOfflineQueue: pubSub,
    clusterRetryStrategy: (attempt) => Math.min(attempt * 200, 2000)
  })
}

/** Connects `client`, or throws saying which Redis did not answer. */
export async function connected (client: Redis | Cluster, address: RedisAddress): Promise<void> {
  const shown = address.urls.map(withoutCredentials).join(',')
  try {
    await Promise.race([
      client.connect(),
      new Promise((_resolve, reject) => setTimeout(() => reject(new Error('no answer')), READY_TIMEOUT_MS).unref())
    ])
  } catch (err) {
    client.disconnect()
    throw new Error(`Redis at ${shown} is not reachable: ${(err as Error).message}`)
  }
}

/** QUIT lets pending replies arrive; bounded, so a Redis that vanishes mid-shutdown cannot hold it up. */
async function close (client: Redis | Cluster): Promise<void> {
  await Promise.race([
    client.quit().catch(() => {}),
    new Promise((resolve) => setTimeout(resolve, CLOSE_WAIT_MS).unref())
  ])
  client.disconnect()
}

export default fp(async function redis (app: FastifyInstance) {
  const { redis: { address, prefix: redisPrefix }, responseCache } = app.config
  const key = (name: string) => `${redisPrefix}${name}`
  const placements: Record<string, Placement> = {}
  /** `shared` over `connected` (null: no Redis, everything in process). */
  const sharing = (connected: ConnectedRedis | null): SharedRedis['shared'] => (what, onRedis, inProcess) => {
    placements[what] = connected ? (connected.cluster ? 'redis cluster' : 'redis') : 'in-process'
    return connected ? onRedis(connected) : inProcess()
  }
  if (!address) {
    app.decorate('redis', { client: null, cluster: false, key, cache: null, shared: sharing(null), placements })
    return
  }
  const opened: Array<Redis | Cluster> = []
  // Connection errors are reported through readiness and per-command failures, not as crashes.
  const open = async (at: RedisAddress, name: string) => {
    const client = redisConnection(at)
    client.on('error', (err: Error) => app.log.warn({ err: err.message }, `${name} connection error`))
    await connected(client, at)
    opened.push(client)
    return client
  }
  try {
    const client = await open(address, 'redis')
    const own = responseCache.redis
    const cache = own
      ? { client: await open(own, 'response cache redis'), cluster: own.cluster, mayEvict: true }
      : { client, cluster: address.cluster, mayEvict: false }
    const connected: ConnectedRedis = { client, cluster: address.cluster, address, key, cache }
    app.decorate('redis', { client, cluster: address.cluster, key, cache, shared: sharing(connected), placements })
    app.readinessChecks.set('redis', async () => { await client.ping() })
    if (own) app.readinessChecks.set('response cache redis', async () => { await cache.client.ping() })
  } catch (err) {
    for (const client of opened) client.disconnect()
    throw err
  }
  app.addHook('onClose', async () => { await Promise.all(opened.map(close)) })
}, { name: 'redis', dependencies: ['config', 'readiness'] })
