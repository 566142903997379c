// The composition root's one call: the response cache the settings ask for, on Redis when the service
// has it (shared by the instances), else in process.
import type { Redis } from 'ioredis'
import { DEFAULT_MAX_BYTES, MemoryCacheStore } from './memory-store.ts'
import { RedisCacheStore } from './redis-store.ts'
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
}

/** The service's Redis as plugins/redis.ts decorates it: its client (null in the embedded default), its key naming. */
export interface CacheRedis {
  client: Redis | null
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
  const store = redis.client
    ? new RedisCacheStore({ redis: redis.client, redisKey: redis.key, ttlMs })
    : new MemoryCacheStore({ ttlMs, maxBytes })
  return new ResponseCache(store, { ttlMs, onError })
}
