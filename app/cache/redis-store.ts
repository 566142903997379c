// The response cache's store in Redis, shared by every instance (when REDIS_URL is set). The scheme of
// response-cache.ts, each step one round trip (a Lua script, atomic):
// - `<prefix>rc:seq`: the write sequence. Each invalidation takes the next value, at least Redis's
//   clock in microseconds, so the sequence never goes back even if the key is lost;
// - `<prefix>rc:mark:<tag>`: the sequence of the tag's last invalidation;
// - `<prefix>rc:floor`: the sequence of the last invalidation of everything (invalidateAll): an entry
//   that began before it counts as invalidated, whatever its tags;
// - `<prefix>rc:answer:<SHA-256 of the key>`: an entry, `[since, createdAt, digest, ...tags]` as JSON, a
//   newline, the body (the name changes with the layout: an instance never reads another version's);
// Every key expires: entries `ttlMs` after their computation began at most, marks and the sequence
// `ttlMs` (plus a margin) after their last write, by which time every entry that began before it has
// expired. Redis must not evict these keys early (maxmemory-policy noeviction): an evicted mark would
// let an invalidated entry be served again until it expires.
import { createHash } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { CacheStore, CachedAnswer } from './response-cache.ts'

export interface RedisStoreOptions {
  redis: Redis
  /** The configured prefix + name (plugins/redis.ts `redisKey`): every key this deployment writes. */
  redisKey: (name: string) => string
  /** How long an entry may live (the cache's TTL): marks and the sequence are kept that long after a write. */
  ttlMs: number
}

/** Beyond the TTL, how long marks outlive the entries they concern (timers and clocks are not exact). */
const MARK_MARGIN_MS = 5000

// Entries with many tags are checked in slices: Lua's unpack has a limit on its arguments.
// On a miss it answers the write sequence (a number: what BEGIN answers), so the fill that follows needs
// no round trip of its own; a hit is the entry's text.
const GET = `
local function miss ()
  local seq = redis.call('GET', KEYS[2])
  if not seq then return 0 end
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return tonumber(seq)
end
local value = redis.call('GET', KEYS[1])
if not value then return miss() end
local head = cjson.decode(string.sub(value, 1, string.find(value, '\\n', 1, true) - 1))
local since = head[1]
local floor = redis.call('GET', ARGV[2])
if floor and tonumber(floor) > since then
  redis.call('DEL', KEYS[1])
  return miss()
end
local i = 4
while i <= #head do
  local marks = {}
  for j = i, math.min(i + 199, #head) do marks[#marks + 1] = ARGV[1] .. head[j] end
  local seqs = redis.call('MGET', unpack(marks))
  for j = 1, #marks do
    if seqs[j] and tonumber(seqs[j]) > since then
      redis.call('DEL', KEYS[1])
      return miss()
    end
  end
  i = i + 200
end
return value
`

const SET = `
local since = tonumber(ARGV[2])
local floor = redis.call('GET', ARGV[5])
if floor and tonumber(floor) > since then return 0 end
for i = 6, #ARGV do
  local seq = redis.call('GET', ARGV[1] .. ARGV[i])
  if seq and tonumber(seq) > since then return 0 end
end
redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
return 1
`

const BEGIN = `
local seq = redis.call('GET', KEYS[1])
if not seq then return '0' end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return seq
`

// The next write sequence (KEYS[1]), kept ARGV[2] ms: at least Redis's clock in microseconds.
const NEXT_SEQUENCE = `
local time = redis.call('TIME')
local seq = redis.call('INCR', KEYS[1])
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
if seq < now then
  seq = now
  redis.call('SET', KEYS[1], seq)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
`

// Marks each tag (ARGV[3..], under the prefix ARGV[1]) with the next sequence.
const INVALIDATE = `${NEXT_SEQUENCE}
for i = 3, #ARGV do redis.call('SET', ARGV[1] .. ARGV[i], seq, 'PX', ARGV[2]) end
return seq
`

// Records the next sequence as the floor (ARGV[1]): every entry begun before counts as invalidated.
const INVALIDATE_ALL = `${NEXT_SEQUENCE}
redis.call('SET', ARGV[1], seq, 'PX', ARGV[2])
return seq
`

type Scripts = Redis & {
  responseCacheGet (
    entryKey: string, seqKey: string, markPrefix: string, floorKey: string, keepMs: number
  ): Promise<string | number>
  responseCacheSet (
    entryKey: string, markPrefix: string, since: string, ttlMs: number, value: string, floorKey: string,
    ...tags: string[]
  ): Promise<number>
  responseCacheBegin (seqKey: string, keepMs: number): Promise<string>
  responseCacheInvalidate (seqKey: string, markPrefix: string, keepMs: number, ...tags: string[]): Promise<number>
  responseCacheInvalidateAll (seqKey: string, floorKey: string, keepMs: number): Promise<number>
}

export class RedisCacheStore implements CacheStore {
  readonly bytes = null
  readonly #redis: Scripts
  readonly #entryPrefix: string
  readonly #markPrefix: string
  readonly #seqKey: string
  readonly #floorKey: string
  readonly #keepMs: number

  constructor (options: RedisStoreOptions) {
    const redis = options.redis
    // defineCommand sends EVALSHA, falling back to EVAL once per connection: the scripts are not resent each time.
    if (!('responseCacheGet' in redis)) {
      redis.defineCommand('responseCacheGet', { numberOfKeys: 2, lua: GET })
      redis.defineCommand('responseCacheSet', { numberOfKeys: 1, lua: SET })
      redis.defineCommand('responseCacheBegin', { numberOfKeys: 1, lua: BEGIN })
      redis.defineCommand('responseCacheInvalidate', { numberOfKeys: 1, lua: INVALIDATE })
      redis.defineCommand('responseCacheInvalidateAll', { numberOfKeys: 1, lua: INVALIDATE_ALL })
    }
    this.#redis = redis as Scripts
    this.#entryPrefix = options.redisKey('rc:answer:')
    this.#markPrefix = options.redisKey('rc:mark:')
    this.#seqKey = options.redisKey('rc:seq')
    this.#floorKey = options.redisKey('rc:floor')
    this.#keepMs = options.ttlMs + MARK_MARGIN_MS
  }

  async begin (): Promise<number> {
    return Number(await this.#redis.responseCacheBegin(this.#seqKey, this.#keepMs))
  }

  async get (key: string): Promise<CachedAnswer | number> {
    const value = await this.#redis.responseCacheGet(
      this.#entryKey(key), this.#seqKey, this.#markPrefix, this.#floorKey, this.#keepMs
    )
    if (typeof value === 'number') return value
    const newline = value.indexOf('\n')
    const [, createdAt, digest, ...tags] = JSON.parse(value.slice(0, newline)) as [number, number, string, ...string[]]
    return { body: value.slice(newline + 1), digest, createdAt, tags }
  }

  async set (key: string, entry: CachedAnswer, since: number, ttlMs: number): Promise<boolean> {
    const head = JSON.stringify([since, entry.createdAt, entry.digest, ...entry.tags])
    const stored = await this.#redis.responseCacheSet(
      this.#entryKey(key),
      this.#markPrefix,
      String(since),
      Math.ceil(ttlMs),
      `${head}\n${entry.body}`,
      this.#floorKey,
      ...entry.tags
    )
    return stored === 1
  }

  async invalidate (tags: readonly string[]): Promise<void> {
    await this.#redis.responseCacheInvalidate(this.#seqKey, this.#markPrefix, this.#keepMs, ...tags)
  }

  async invalidateAll (): Promise<void> {
    await this.#redis.responseCacheInvalidateAll(this.#seqKey, this.#floorKey, this.#keepMs)
  }

  /** A key name of bounded length whatever the variables (collision-resistant: keys hold callers' scopes). */
  #entryKey (key: string): string {
    return this.#entryPrefix + createHash('sha256').update(key).digest('base64url')
  }
}
