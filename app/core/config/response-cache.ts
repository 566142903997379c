// The shared response cache of query answers (app/core/cache/): on or off, its TTL, its in-process bound,
// and a Redis of its own.
import { DEFAULT_MAX_BYTES, DEFAULT_TTL_MS } from '../cache/create.ts'
import { area } from './area.ts'
import { redis, redisAddress, redisProblems } from './redis.ts'
import { store } from './store.ts'

export const responseCache = area({
  key: 'responseCache',
  title: 'Response cache',
  about: 'Answers to queries, shared by every instance in Redis with `REDIS_URL`, else kept in this process; every write through the service invalidates exactly what it changed.',
  uses: [store, redis],
  settings: {
    RESPONSE_CACHE: { type: 'boolean', shownDefault: 'true; false when `DATABASE_URL` is set without `REDIS_URL`', doc: 'the shared response cache of query answers ([reference](reference.md#response-cache)): in Redis with `REDIS_URL` (every instance answers what another computed), else in this process. On by default because every write through the service invalidates exactly what it changed, so a cached read is never older than an acknowledged write; off by default on PostgreSQL without Redis, where instances could not tell one another of writes, and `true` there is refused at start' },
    RESPONSE_CACHE_TTL_MS: { type: 'integer', minimum: 1000, maximum: 86400000, default: DEFAULT_TTL_MS, doc: 'how long an answer may be served after its computation began (1000 to 86400000). Writes through the service invalidate before they are acknowledged, and changes made beside it within a second ([operations](operations.md#response-cache)), so this bounds what the cache holds, not staleness; one minute, like CACHE_MAX_AGE_SEC' },
    RESPONSE_CACHE_MAX_BYTES: { type: 'integer', minimum: 0, default: DEFAULT_MAX_BYTES, doc: 'the in-process store\'s memory: one block of this size outside V8\'s heap, holding the entries and their index (the oldest sixteenth dropped at a time, entries in use kept). **What the process grows by**: measured at 100000 distinct keys and 32 MiB, the cache\'s share of RSS (the processes with the cache less those without, after the same requests) was 0.7-1.3 × this setting (`test/cluster/memory-bound.test.ts`, which fails past 1.5 ×); size a container for it plus the service\'s own memory. A 200-byte answer takes about 350 bytes of it. With Redis the bound is Redis\'s memory: entries expire; on `REDIS_URL` Redis runs with `maxmemory-policy noeviction` (it holds the budgets too), on `RESPONSE_CACHE_REDIS_URL` it may evict ([operations](operations.md#response-cache))' },
    RESPONSE_CACHE_REDIS_URL: { type: 'string', doc: 'a Redis of its own for cached answers only (budgets, nonces, APQ and events stay on `REDIS_URL`), which may run as a cache: `maxmemory` with `allkeys-lru`. An evicted answer is a miss, an evicted invalidation mark makes the answers relying on it misses: nothing stale is served ([deployment](deployment.md#a-redis-of-its-own-for-cached-answers)). Needs `REDIS_URL` or `REDIS_CLUSTER_NODES`' },
    RESPONSE_CACHE_REDIS_CLUSTER_NODES: { type: 'string', doc: 'the same as a Redis Cluster (comma-separated node URLs)' }
  },
  // Instances that share PostgreSQL without Redis would each keep answers that another instance's writes
  // never invalidate, so there the cache is off unless asked for, and asking for it is refused: with no
  // shared store, "no read returns what an acknowledged write replaced" cannot hold.
  read: (e, { problems, store, redis }) => {
    for (const problem of redisProblems('RESPONSE_CACHE_REDIS_URL', e.RESPONSE_CACHE_REDIS_URL,
      'RESPONSE_CACHE_REDIS_CLUSTER_NODES', e.RESPONSE_CACHE_REDIS_CLUSTER_NODES)) if (problem) problems.push(problem)
    const ownRedis = redisAddress(e.RESPONSE_CACHE_REDIS_URL, e.RESPONSE_CACHE_REDIS_CLUSTER_NODES)
    const sharedDatabaseWithoutRedis = store.databaseUrl !== null && redis.address === null
    if (e.RESPONSE_CACHE === true && sharedDatabaseWithoutRedis) {
      problems.push('RESPONSE_CACHE needs REDIS_URL (or REDIS_CLUSTER_NODES) when DATABASE_URL is set: instances sharing PostgreSQL must share their cache (or set RESPONSE_CACHE=false)')
    }
    if (ownRedis !== null && redis.address === null) {
      problems.push('RESPONSE_CACHE_REDIS_URL (or _CLUSTER_NODES) needs REDIS_URL (or REDIS_CLUSTER_NODES): it holds cached answers only, apart from the shared state')
    }
    return {
      enabled: e.RESPONSE_CACHE ?? !sharedDatabaseWithoutRedis,
      ttlMs: e.RESPONSE_CACHE_TTL_MS,
      maxBytes: e.RESPONSE_CACHE_MAX_BYTES,
      redis: ownRedis
    }
  }
})
