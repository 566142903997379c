// The response cache the settings ask for, over the store the composition root chooses: on Redis when
// the service has it (shared by the instances; a Redis of its own when RESPONSE_CACHE_REDIS_URL is set),
// else in process.
import type { Cluster, Redis } from 'ioredis'
import type { RedisAddress } from '../redis-address.ts'
import { DEFAULT_MAX_BYTES, MemoryCacheStore } from './memory-store.ts'
import { CLUSTER_SHARDS, RedisCacheStore } from './redis-store.ts'
import { DEFAULT_TTL_MS, ResponseCache, type CacheStore } from './response-cache.ts'

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

/** The service's Redis as plugins/redis.ts hands it over: where cached answers live, its key naming. */
export interface CacheRedis {
  cache: { client: Redis | Cluster; cluster: boolean; mayEvict: boolean }
  key (name: string): string
}

/** Where cached answers live on a Redis: shared by every instance (plugins/redis.ts decides when). */
export function redisCacheStore ({ ttlMs }: ResponseCacheSettings, redis: CacheRedis): CacheStore {
  return new RedisCacheStore({
    redis: redis.cache.client,
    redisKey: redis.key,
    ttlMs,
    shards: redis.cache.cluster ? CLUSTER_SHARDS : 1,
    mayEvict: redis.cache.mayEvict
  })
}

/** Where cached answers live without Redis: in this process, bounded in bytes. */
export function memoryCacheStore ({ ttlMs, maxBytes }: ResponseCacheSettings): CacheStore {
  return new MemoryCacheStore({ ttlMs, maxBytes })
}

/** The cache over `store`. `onError`: a store failure the cache absorbed (log it as a warning). */
export function createResponseCache (
  { ttlMs }: ResponseCacheSettings,
  store: CacheStore,
  onError?: (err: unknown) => void
): ResponseCache {
  return new ResponseCache(store, { ttlMs, onError })
}
