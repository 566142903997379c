// Shared by the response cache's tests through two real instances (test/cluster/harness.ts's processes,
// addressed directly, without the load balancer): the settings they run with, what their metrics say
// of the cache, and a persisted GET through the harness's HTTP client.
import { request, type HttpResponse, type Instance } from '../cluster/harness.ts'
import { MANIFEST_FILE, PREFLIGHT, persistedGetUrl, queryIdOf } from '../persisted/helpers.ts'

/**
 * Every instance's settings: the example manifest (persisted GETs), and request and cost limits out of
 * the way (every request of a test comes from 127.0.0.1, and the limits are shared through Redis). The
 * response cache is left at its default, which is on with REDIS_URL.
 */
export const CACHE_TEST_ENV: Record<string, string> = {
  PERSISTED_MANIFEST: MANIFEST_FILE,
  RATE_LIMIT_REQUESTS: '1000000',
  RATE_LIMIT_COST: '100000000',
  COST_BUDGET_ANONYMOUS: '100000',
  COST_BUDGET_USER: '100000'
}

export interface CacheCounters { hits: number; misses: number; invalidations: number }

/** Sums a metric's samples (over its label sets, if any) in a Prometheus text exposition; null when absent. */
export function metricValue (exposition: string, name: string): number | null {
  let total: number | null = null
  for (const line of exposition.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? (\S+)/.exec(line)
    if (match?.[1] === name) total = (total ?? 0) + Number(match[2])
  }
  return total
}

/** The instance's response cache counters, as Prometheus scrapes them (fails when a counter is missing). */
export async function cacheCounters (instance: Instance): Promise<CacheCounters> {
  const scrape = await request(instance.metricsUrl)
  if (scrape.status !== 200) throw new Error(`${instance.name} metrics: ${scrape.status}`)
  const read = (name: string) => {
    const value = metricValue(scrape.text, name)
    if (value === null) throw new Error(`${instance.name} does not expose ${name}`)
    return value
  }
  return {
    hits: read('graphql_response_cache_hits_total'),
    misses: read('graphql_response_cache_misses_total'),
    invalidations: read('graphql_response_cache_invalidations_total')
  }
}

/** How the counters moved between two scrapes. */
export function counted (before: CacheCounters, after: CacheCounters): CacheCounters {
  return {
    hits: after.hits - before.hits,
    misses: after.misses - before.misses,
    invalidations: after.invalidations - before.invalidations
  }
}

/** A persisted GET of a manifest operation (by name), on the harness's client. */
export function persistedGet (
  baseUrl: string,
  operation: string,
  variables: Record<string, unknown>,
  headers: Record<string, string> = {}
): Promise<HttpResponse> {
  return request(persistedGetUrl(baseUrl, queryIdOf(operation), variables), { headers: { ...PREFLIGHT, ...headers } })
}

/** The `Age` header of a cache hit (whole seconds), or undefined on an executed answer. */
export function ageOf (response: { headers: Record<string, string | string[] | undefined> }): string | undefined {
  const age = response.headers.age
  return Array.isArray(age) ? age.join(',') : age
}
