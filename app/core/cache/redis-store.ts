// The response cache's store in Redis, shared by every instance (REDIS_URL, or a Redis of its own:
// RESPONSE_CACHE_REDIS_URL). The scheme of response-cache.ts, laid out so that a hit is one plain MGET:
//
// - `{rc:<s>}:a:<SHA-256 of the key>`: an entry, `[since, createdAt, digest, ...tags]` as JSON, a newline,
//   the body; it expires when its TTL ends;
// - `{rc:<s>}:seq`: the write sequence of shard s, taken by each invalidation (at least Redis's clock in
//   microseconds, so it never goes back even if the key is lost); a lookup reads it, and a fill begins
//   from what it read;
// - `{rc:<s>}:m:<tag>`: the tag's mark in shard s, the sequence of its last invalidation (0: none since
//   the mark was made). Every entry is also checked on the mark of `*`, which `invalidateAll` sets;
// - `{rc:0}:changes-applied`: where the store's change feed is applied up to (app/core/cache/store-changes.ts),
//   so that an instance starting reads the change log from there, re-applying nothing.
//
// A lookup is `MGET entry seq marks…` of the tags this instance has seen the entry carry (it keeps them
// for its recent keys: no answer, only tag names): the entry is served when every mark is there and
// none is later than the entry's `since`. So a hit is one command with no script, and nothing is
// served that an invalidation replaced: the mark is set before `invalidate` returns. A key first seen
// on this instance costs one MGET more (its marks, once the entry has named its tags).
//
// A fill is one script: it stores the entry unless a mark is later than the sequence the fill began
// from, and keeps each mark alive as long as the entry (a mark outlives every entry that relies on it).
// On a Redis that may evict keys (a cache Redis of its own with `allkeys-lru`), a missing mark cannot
// be told from an evicted one: the fill then makes the mark anew, later than its own beginning, and
// stores nothing (the next fill of the key is stored), and a lookup that finds a mark missing misses.
// An evicted entry is a miss; an evicted mark makes its entries misses; nothing stale is ever served.
//
// Shards (s) keep a lookup's keys in one hash slot, so a Redis Cluster serves each MGET and script from
// one node: one shard on a single Redis, CLUSTER_SHARDS on a cluster, spread over its nodes by slot.
// An entry lives in the shard its key hashes to; an invalidation marks its tags in every shard.
import { createHash } from 'node:crypto'
import type { Cluster, Redis } from 'ioredis'
import { LruMap } from '../lru-map.ts'
import type { CacheStore, CachedAnswer } from './response-cache.ts'

export interface RedisStoreOptions {
  redis: Redis | Cluster
  /** The configured prefix + name (plugins/redis.ts `redisKey`): every key this deployment writes. */
  redisKey: (name: string) => string
  /** How long an entry may live (the cache's TTL): marks are kept a margin longer than any entry. */
  ttlMs: number
  /** Shards: 1 on a single Redis, CLUSTER_SHARDS on a Redis Cluster (all instances must agree). */
  shards?: number
  /** The Redis may evict keys (a cache Redis of its own): a missing mark is not taken for "never invalidated". */
  mayEvict?: boolean
  /** Keys whose tags this instance remembers (so that a hit is one MGET). */
  rememberedKeys?: number
}

/**
 * The scripts whose number of keys varies (passed first, as EVAL takes it). ioredis's automatic
 * pipelining on a Redis Cluster routes a custom command by its first argument, which here is that
 * number, not a key: the cluster's connection must send these on their own (plugins/redis.ts).
 */
export const SCRIPTS_WITH_KEY_COUNTS = ['responseCacheFill', 'responseCacheInvalidate']

/** Shards on a Redis Cluster: enough to spread the cache over a few dozen nodes; each write marks every one. */
export const CLUSTER_SHARDS = 16

/** The tag every entry is also checked on: invalidateAll marks it. */
const EVERYTHING = '*'

/**
 * Beyond the TTL, how long marks outlive the entries they concern: a computation may run for the query
 * deadline (10 s by default) between the sequence it began from and its fill, and clocks are not exact.
 */
const MARK_MARGIN_MS = 60_000

// The next write sequence of a shard (KEYS[1]): at least Redis's clock in microseconds.
const NEXT_SEQUENCE = `
local time = redis.call('TIME')
local seq = redis.call('INCR', KEYS[1])
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
if seq < now then
  seq = now
  redis.call('SET', KEYS[1], string.format('%d', seq))
end`

// Marks the tags (KEYS[2..], one shard's) with the shard's next sequence, kept ARGV[1] ms.
const INVALIDATE = `${NEXT_SEQUENCE}
for i = 2, #KEYS do redis.call('SET', KEYS[i], string.format('%d', seq), 'PX', ARGV[1]) end
return 1`

// Stores the entry (KEYS[1]: ARGV[3] for ARGV[2] ms) unless a mark (KEYS[3..]) is later than ARGV[1],
// the sequence the fill began from; keeps the marks ARGV[4] ms. A missing mark: made 0 (nothing
// invalidated since) when the Redis never evicts (ARGV[5] = '0'); else made with the next sequence,
// and the entry is not stored (KEYS[2]: the shard's sequence).
const FILL = `
local since = tonumber(ARGV[1])
local stored = 1
for i = 3, #KEYS do
  local mark = redis.call('GET', KEYS[i])
  if not mark then
    if ARGV[5] == '1' then
      ${NEXT_SEQUENCE.trim().replaceAll('KEYS[1]', 'KEYS[2]')}
      redis.call('SET', KEYS[i], string.format('%d', seq), 'PX', ARGV[4])
      stored = 0
    else
      redis.call('SET', KEYS[i], '0', 'PX', ARGV[4])
    end
  elseif tonumber(mark) > since then
    stored = 0
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[4])
  end
end
if stored == 1 then redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2]) end
return stored`

// Records ARGV[1] in KEYS[1] unless a later position is there (positions are PostgreSQL transaction ids).
const RECORD_POSITION = `
local known = redis.call('GET', KEYS[1])
if not known or tonumber(known) < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1`

type Scripts = {
  responseCacheRecordPosition (key: string, position: string): Promise<number>
  responseCacheInvalidate (seqKey: string, ...marksAndKeepMs: string[]): Promise<number>
  responseCacheFill (...keysAndArgs: string[]): Promise<number>
}

interface Shard {
  seq: string
  entryPrefix: string
  markPrefix: string
}

export class RedisCacheStore implements CacheStore {
  readonly bytes = null
  readonly #redis: (Redis | Cluster) & Scripts
  readonly #shards: Shard[]
  readonly #keepMs: number
  /** Where the store's change feed is applied up to, by any instance (no expiry: one key). */
  readonly #positionKey: string
  readonly #mayEvict: boolean
  /** The tags (with `*`) of entries this instance has seen, by entry key: what a lookup's MGET asks for. */
  readonly #tagsOf: LruMap<string, readonly string[]>

  constructor (options: RedisStoreOptions) {
    const redis = options.redis
    // defineCommand sends EVALSHA, falling back to EVAL once per connection: the scripts are not resent each time.
    if (!('responseCacheFill' in redis)) {
      redis.defineCommand('responseCacheInvalidate', { lua: INVALIDATE })
      redis.defineCommand('responseCacheFill', { lua: FILL })
      redis.defineCommand('responseCacheRecordPosition', { numberOfKeys: 1, lua: RECORD_POSITION })
    }
    this.#redis = redis as (Redis | Cluster) & Scripts
    const shards = options.shards ?? 1
    this.#shards = Array.from({ length: shards }, (_, s) => ({
      seq: options.redisKey(`{rc:${s}}:seq`),
      entryPrefix: options.redisKey(`{rc:${s}}:a:`),
      markPrefix: options.redisKey(`{rc:${s}}:m:`)
    }))
    this.#positionKey = options.redisKey('{rc:0}:changes-applied')
    this.#keepMs = options.ttlMs + MARK_MARGIN_MS
    this.#mayEvict = options.mayEvict ?? false
    this.#tagsOf = new LruMap(options.rememberedKeys ?? 50_000, 16 * 1024 * 1024)
  }

  async begin (key: string): Promise<number> {
    return Number(await this.#redis.get(this.#placeOf(key).shard.seq) ?? 0)
  }

  async get (key: string): Promise<CachedAnswer | number> {
    const { shard, entryKey } = this.#placeOf(key)
    const known = this.#tagsOf.get(entryKey)
    const marks = known ?? [EVERYTHING]
    const markKeys = marks.map((tag) => shard.markPrefix + tag)
    const [value, seq, ...seqs] = await this.#redis.mget(entryKey, shard.seq, ...markKeys)
    const since = Number(seq ?? 0)
    if (value == null) return since
    const newline = value.indexOf('\n')
    const head = JSON.parse(value.slice(0, newline)) as [number, number, string, ...string[]]
    const [began, createdAt, digest, ...tags] = head
    const checked = [...tags, EVERYTHING]
    if (!sameTags(checked, marks)) {
      // Tags this instance did not know the entry to carry: their marks, read now (once per key and instance).
      this.#remember(entryKey, checked)
      const more = await this.#redis.mget(...checked.map((tag) => shard.markPrefix + tag))
      return valid(more, began) ? { body: value.slice(newline + 1), digest, createdAt, tags } : since
    }
    return valid(seqs, began) ? { body: value.slice(newline + 1), digest, createdAt, tags } : since
  }

  async set (key: string, entry: CachedAnswer, since: number, ttlMs: number): Promise<boolean> {
    const { shard, entryKey } = this.#placeOf(key)
    const checked = [...entry.tags, EVERYTHING]
    const head = JSON.stringify([since, entry.createdAt, entry.digest, ...entry.tags])
    const stored = await this.#redis.responseCacheFill(
      String(2 + checked.length), entryKey, shard.seq, ...checked.map((tag) => shard.markPrefix + tag),
      String(since), String(Math.ceil(ttlMs)), `${head}\n${entry.body}`, String(this.#keepMs), this.#mayEvict ? '1' : '0'
    )
    this.#remember(entryKey, checked)
    return stored === 1
  }

  async invalidate (tags: readonly string[]): Promise<void> {
    await Promise.all(this.#shards.map((shard) => this.#redis.responseCacheInvalidate(
      String(1 + tags.length), shard.seq, ...tags.map((tag) => shard.markPrefix + tag), String(this.#keepMs)
    )))
  }

  async invalidateAll (): Promise<void> {
    await this.invalidate([EVERYTHING])
  }

  async changesApplied (): Promise<string | null> {
    return await this.#redis.get(this.#positionKey)
  }

  async recordChangesApplied (position: string): Promise<void> {
    await this.#redis.responseCacheRecordPosition(this.#positionKey, position)
  }

  /**
   * The shard of a key and its entry's name: bounded whatever the variables (and collision-resistant:
   * keys hold callers' scopes).
   */
  #placeOf (key: string): { shard: Shard, entryKey: string } {
    const digest = createHash('sha256').update(key).digest()
    const shard = this.#shards[digest.readUInt32BE(0) % this.#shards.length]!
    return { shard, entryKey: shard.entryPrefix + digest.toString('base64url') }
  }

  #remember (entryKey: string, tags: readonly string[]): void {
    let weight = entryKey.length + 64
    for (const tag of tags) weight += tag.length + 16
    this.#tagsOf.set(entryKey, tags, weight)
  }
}

function sameTags (a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

/** Every mark there, and none later than the entry's beginning. */
function valid (marks: ReadonlyArray<string | null>, began: number): boolean {
  for (const mark of marks) if (mark === null || Number(mark) > began) return false
  return true
}
