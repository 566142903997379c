// Automatic persisted queries (APQ): where registered texts live, by sha256 hex, bounded; in this
// process, or shared by every instance through Redis.
import type { Cluster, Redis } from 'ioredis'
import { LruMap } from '../core/lru-map.ts'

// ---------------------------------------------------------------------------------------------
// Automatic registration (APQ)

/** Where automatically registered texts live, by sha256 hex. Implementations bound their size. */
export interface ApqStore {
  /** Where the texts live: this process, or Redis (shared by every instance). */
  readonly kind: 'memory' | 'redis'
  get (hash: string): Promise<string | undefined>
  set (hash: string, text: string): Promise<void>
}

/**
 * What a registered text keeps alive in a process: the string at two bytes a character (V8's worst case) and its entry.
 */
export const apqEntryBytes = (text: string) => text.length * 2 + 512

export function memoryApqStore (maxEntries: number, maxBytes = Infinity): ApqStore {
  const lru = new LruMap<string, string>(maxEntries, maxBytes)
  return {
    kind: 'memory',
    async get (hash) { return lru.get(hash) },
    async set (hash, text) { lru.set(hash, text, apqEntryBytes(text)) }
  }
}

// Redis layout: a hash (sha256 hex → text) and a sorted set of the same hashes scored by last
// registration or last fetch; registering beyond maxEntries drops the lowest scores. Both steps run
// as one script, so the bound holds with many instances registering at once. (Per-key TTLs would
// bound age, not count: a flood of registrations could still grow the set without limit.)
const REGISTER = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  local dropped = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #dropped, 2 do redis.call('HDEL', KEYS[1], dropped[i]) end
end
return over`
const FETCH = `
local text = redis.call('HGET', KEYS[1], ARGV[1])
if text then redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1]) end
return text`

/**
 * APQ registry shared through Redis. The resolver keeps parsed copies of the texts it has seen in
 * memory (texts never change for a hash, so they are never stale), so only a first sight on this
 * instance costs a round trip. Redis failures degrade to that local copy: APQ is an optimisation,
 * so an outage costs clients a resend, not an error.
 */
export function redisApqStore (
  redis: Redis | Cluster,
  keyOf: (name: string) => string,
  maxEntries: number,
  log: { warn(o: object, msg: string): void }
): ApqStore {
  // One hash slot for both keys (`{apq}`): the scripts run on a Redis Cluster too.
  const keys = [keyOf('{apq}:documents'), keyOf('{apq}:recency')]
  const warn = (err: unknown) =>
    log.warn({ err: (err as Error).message }, "APQ registry: Redis unavailable, using this instance's copy")
  return {
    kind: 'redis',
    async get (hash) {
      try {
        return ((await redis.eval(FETCH, 2, ...keys, hash, Date.now())) as string | null) ?? undefined
      } catch (err) {
        warn(err)
        return undefined
      }
    },
    async set (hash, text) {
      try {
        await redis.eval(REGISTER, 2, ...keys, hash, text, Date.now(), maxEntries)
      } catch (err) {
        warn(err)
      }
    }
  }
}
