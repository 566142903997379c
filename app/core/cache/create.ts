// The composition root's one call: the response cache the settings ask for, on Redis when the service
// has it (shared by the instances; a Redis of its own when RESPONSE_CACHE_REDIS_URL is set), else in process.
import type { Cluster, Redis } from 'ioredis'
import type { RedisAddress } from '../redis-address.ts'
import { DEFAULT_MAX_BYTES, MemoryCacheStore } from './memory-store.ts'
import { CLUSTER_SHARDS, RedisCacheStore } from './redis-store.ts'
import { DEFAULT_TTL_MS, ResponseCache } from './response-cache.ts'

export { DEFAULT_MAX_BYTES, DEFAULT_TTL_MS }

/** The response cache's settings (RESPONSE_CACHE, RESPONSE_CACHE_TTL_MS, RESPONSE_CACHE_MAX_BYTES). */
export interface ResponseCacheSettings {
  /** On by default: reads are answered from the cache until a write changes what they read. */
  enabled: boolean
  /** How long an answer may be served after its computation started (ms); default 60 000 (see ResponseCacheOptions). */
  ttlMs: number
  /** The in-process store's bound in estimated bytes; default 64 MiB (see MemoryStoreOptions). Unused with Redis. */
  maxBytes: number
  /**
   * A Redis for cached answers only (RESPONSE_CACHE_REDIS_URL or _CLUSTER_NODES), which may evict keys;
   * null: they share the Redis of the service's state.
   */
  redis: RedisAddress | null
}

/** The service's Redis as plugins/redis.ts decorates it: where cached answers live (null: embedded), its key naming. */
export interface CacheRedis {
  cache: { client: Redis | Cluster; cluster: boolean; mayEvict: boolean } | null
  key (name: string): string
}

/** The cache, or null when turned off. `onError`: a store failure the cache absorbed (log it as a warning). */
export function createResponseCache (
  settings: ResponseCacheSettings,
  redis: CacheRedis,
  onError?: (err: unknown) => void
): ResponseCache | null {
  if (!settings.enabled) return null
  const { ttlMs, maxBytes } = settings
  const store = redis.cache
    ? new RedisCacheStore({
      redis: redis.cache.client,
      redisKey: redis.key,
      ttlMs,
      shards: redis.cache.cluster ? CLUSTER_SHARDS : 1,
      mayEvict: redis.cache.mayEvict
    })
    : new MemoryCacheStore({ ttlMs, maxBytes })
  return new ResponseCache(store, { ttlMs, onError })
}
