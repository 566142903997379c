// The composition root's one call: the response cache the settings ask for, on Redis when the service
// has it (shared by the instances), else in process.
import type { SharedRedis } from '../../plugins/redis.ts'
import type { Invalidation } from '../domain/context.ts'
import { AppError } from '../errors.ts'
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

export const DEFAULT_RESPONSE_CACHE_SETTINGS: ResponseCacheSettings = {
  enabled: true,
  ttlMs: DEFAULT_TTL_MS,
  maxBytes: DEFAULT_MAX_BYTES
}

/**
 * The cache, or null when turned off. `redis`: the service's Redis (plugins/redis.ts; its client is null in
 * the embedded default). `onError`: a store failure the cache absorbed (log it as a warning).
 */
export function createResponseCache (
  settings: ResponseCacheSettings,
  redis: SharedRedis,
  onError?: (err: unknown) => void
): ResponseCache | null {
  if (!settings.enabled) return null
  const { ttlMs, maxBytes } = settings
  const store = redis.client
    ? new RedisCacheStore({ redis: redis.client, redisKey: redis.key, ttlMs })
    : new MemoryCacheStore({ ttlMs, maxBytes })
  return new ResponseCache(store, { ttlMs, onError })
}

/**
 * The response cache as the domain's invalidation port: a write whose invalidation fails (Redis down) is
 * stored but not acknowledged. Its caller gets SERVICE_UNAVAILABLE rather than a success that a cached
 * answer elsewhere could still contradict; the answers that read what it changed expire within the TTL.
 */
export function invalidationOf (cache: ResponseCache): Invalidation {
  return {
    async invalidate (tags) {
      try {
        await cache.invalidate(tags)
      } catch {
        throw new AppError(
          'SERVICE_UNAVAILABLE',
          'The change was made, but the response cache could not be told of it: reads may show the old value until their cached answers expire. Do not repeat the change'
        )
      }
    }
  }
}
