// Fixed-window counters for rate limiting (requests and cost units): in-process by default, in Redis
// when configured so every instance shares them. While Redis is unreachable the shared counters fall
// back to in-process ones: each instance then enforces the limits on its own traffic (availability
// over strictness: an outage of the counter store must not take the API down, nor lift every limit).
import type { Redis } from 'ioredis'

export interface WindowCount {
  /** The key's total in the current window, this increment included. */
  total: number
  /** Milliseconds until the window resets. */
  resetMs: number
}

export interface WindowCounters {
  incr (key: string, amount: number, windowMs: number): Promise<WindowCount>
  /** In-process counters answer at once: the hot path need not wait a promise for a Map update. */
  incrNow?: (key: string, amount: number, windowMs: number) => WindowCount
}

export function localCounters (maxKeys = 100_000): WindowCounters {
  const windows = new Map<string, { total: number; endsAt: number }>()
  const incrNow = (key: string, amount: number, windowMs: number): WindowCount => {
    const now = Date.now()
    let entry = windows.get(key)
    if (!entry || entry.endsAt <= now) {
      // Bounded: when full, drop the oldest keys (Map keeps insertion order).
      if (!entry && windows.size >= maxKeys) {
        for (const k of windows.keys()) { windows.delete(k); if (windows.size < maxKeys * 0.9) break }
      }
      entry = { total: 0, endsAt: now + windowMs }
      windows.delete(key)
      windows.set(key, entry)
    }
    entry.total += amount
    return { total: entry.total, resetMs: entry.endsAt - now }
  }
  return { incrNow, incr: async (key, amount, windowMs) => incrNow(key, amount, windowMs) }
}

const INCR_SCRIPT = `
local total = redis.call('INCRBY', KEYS[1], ARGV[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = tonumber(ARGV[2])
end
return { total, ttl }`

type Scripts = Redis & {
  windowCounterIncr (key: string, amount: number, windowMs: number): Promise<[number, number]>
}

export function redisCounters (redis: Redis, prefix: string): WindowCounters {
  // defineCommand sends EVALSHA (the script's digest), not the script's text with every request as EVAL
  // does, which Redis must then hash again each time.
  if (!('windowCounterIncr' in redis)) redis.defineCommand('windowCounterIncr', { numberOfKeys: 1, lua: INCR_SCRIPT })
  const scripts = redis as Scripts
  return {
    async incr (key, amount, windowMs) {
      const [total, ttl] = await scripts.windowCounterIncr(prefix + key, amount, windowMs)
      return { total, resetMs: ttl }
    }
  }
}

/** Redis counters that fall back to in-process ones while Redis fails; `onFallback` is told each time. */
export function sharedCounters (
  primary: WindowCounters,
  fallback: WindowCounters,
  onFallback: (err: unknown) => void
): WindowCounters {
  return {
    async incr (key, amount, windowMs) {
      try {
        return await primary.incr(key, amount, windowMs)
      } catch (err) {
        onFallback(err)
        return fallback.incr(key, amount, windowMs)
      }
    }
  }
}
