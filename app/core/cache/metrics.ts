// The response cache's Prometheus metrics, read from its counters when scraped (nothing is counted twice
// and the request path pays nothing for them).
import { Counter, Gauge, type Registry } from 'prom-client'
import type { ResponseCache } from './response-cache.ts'

/* eslint-disable no-new -- a prom-client metric registers itself in `registers` when constructed */
export function responseCacheMetrics (registry: Registry, cache: ResponseCache): void {
  // A request that waited for a concurrent execution of its key was answered from it: a hit, not a miss.
  const counter = (name: string, help: string, read: () => number) => new Counter({
    name,
    help,
    registers: [registry],
    collect () { this.reset(); this.inc(read()) }
  })
  counter('graphql_response_cache_hits_total', 'Query answers served from the response cache (not executed), waits for a concurrent execution of the same key included',
    () => { const s = cache.stats(); return s.hits + s.coalesced })
  counter('graphql_response_cache_misses_total', 'Cacheable queries executed because the response cache held no valid answer',
    () => { const s = cache.stats(); return s.misses - s.coalesced })
  counter('graphql_response_cache_invalidations_total', 'Invalidations sent to the response cache by writes on this instance (two per write: before storing, and before answering)',
    () => cache.stats().invalidations)
  counter('graphql_response_cache_errors_total', 'Response cache store failures absorbed (the request was executed uncached)',
    () => cache.stats().errors)
  // Only for the in-process store: with Redis the answers are held there (see Redis's memory), and a
  // gauge left unset would read 0, as if the cache held nothing.
  if (cache.stats().bytes === null) return
  new Gauge({
    name: 'graphql_response_cache_bytes',
    help: 'Estimated bytes of answers the response cache holds in this process',
    registers: [registry],
    collect () { this.set(cache.stats().bytes ?? 0) }
  })
}
