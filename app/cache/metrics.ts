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
  counter('graphql_response_cache_invalidations_total', 'Writes that invalidated response cache entries (one per write, on the instance that made it)',
    () => cache.stats().invalidations)
  counter('graphql_response_cache_errors_total', 'Response cache store failures absorbed (the request was executed uncached)',
    () => cache.stats().errors)
  new Gauge({
    name: 'graphql_response_cache_bytes',
    help: 'Estimated bytes of answers the response cache holds in this process (absent with Redis: see Redis memory)',
    registers: [registry],
    collect () {
      const bytes = cache.stats().bytes
      if (bytes !== null) this.set(bytes)
    }
  })
}
