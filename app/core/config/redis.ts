// The Redis of shared state (budgets, APQ, WS-Security nonces, events; and cached answers unless they have
// their own: response-cache.ts), and how any Redis's address is read from its settings.
import type { RedisAddress } from '../redis-address.ts'
import { area, list, optional } from './area.ts'
import { urlProblem } from './urls.ts'

export const redis = area({
  key: 'redis',
  title: 'Redis',
  about: 'Shared counters, the APQ registry, WS-Security nonces and pub/sub across instances; in-process without it.',
  settings: {
    REDIS_URL: { type: 'string', doc: 'shared counters, APQ registry, WS-Security nonces and pub/sub across instances; in-process without it (`redis://` or `rediss://` with a host, checked at start). Must run with `maxmemory-policy noeviction`: budgets and nonces must not be evicted' },
    REDIS_CLUSTER_NODES: { type: 'string', doc: 'instead of `REDIS_URL`: a Redis Cluster, named by the comma-separated URLs of some of its nodes (`redis://:password@host1:6379,redis://host2:6379`; the rest are found from them). Every command and script touches one hash slot; the response cache\'s keys are spread over 16 shards ([deployment](deployment.md#a-redis-cluster))' },
    REDIS_SENTINELS: { type: 'string', doc: 'with `REDIS_URL`: the comma-separated URLs of Redis Sentinels (`redis://sentinel-1:26379,redis://sentinel-2:26379`); `REDIS_URL`\'s host is then the name of the master group they watch, its password and database the master\'s ([deployment](deployment.md#redis-sentinel))' },
    REDIS_PREFIX: { type: 'string', default: 'gqs:', doc: 'prefix of every Redis key and channel, so deployments (or test files) can share a server' }
  },
  read: (e, { problems }) => {
    for (const problem of redisProblems('REDIS_URL', e.REDIS_URL, 'REDIS_CLUSTER_NODES', e.REDIS_CLUSTER_NODES,
      { setting: 'REDIS_SENTINELS', value: e.REDIS_SENTINELS })) if (problem) problems.push(problem)
    return {
      /** null: no Redis (one instance: everything in process). */
      address: redisAddress(e.REDIS_URL, e.REDIS_CLUSTER_NODES, e.REDIS_SENTINELS),
      /** Prefix of every key and channel, so several deployments (or test files) can share a server. */
      prefix: e.REDIS_PREFIX
    }
  }
})

/**
 * A Redis's address from its settings: one server's URL, or a cluster's comma-separated node URLs; with
 * sentinels, the URL names the master group the sentinels know.
 */
export function redisAddress (
  url: string | undefined, clusterNodes: string | undefined, sentinels?: string
): RedisAddress | null {
  const nodes = list(clusterNodes)
  if (nodes.length > 0) return { urls: nodes, cluster: true }
  const one = optional(url)
  if (one === null) return null
  const watchers = list(sentinels)
  return watchers.length > 0 ? { urls: [one], cluster: false, sentinels: watchers } : { urls: [one], cluster: false }
}

/** What is wrong with a Redis's settings: each URL, and settings that exclude each other set together. */
export function redisProblems (
  urlSetting: string, url: string | undefined, nodesSetting: string, nodes: string | undefined,
  sentinels?: { setting: string, value: string | undefined }
): Array<string | null> {
  const example = 'redis://:password@host:6379'
  const nodeUrls = list(nodes)
  const sentinelUrls = list(sentinels?.value)
  return [
    optional(url) !== null && nodeUrls.length > 0 ? `set ${urlSetting} (one server) or ${nodesSetting} (a Redis Cluster), not both` : null,
    sentinels && sentinelUrls.length > 0 && nodeUrls.length > 0 ? `${sentinels.setting} watches one master: it does not go with ${nodesSetting}` : null,
    sentinels && sentinelUrls.length > 0 && optional(url) === null
      ? `${sentinels.setting} needs ${urlSetting} naming the master group (redis://:password@mymaster/0)`
      : null,
    urlProblem(urlSetting, optional(url), ['redis:', 'rediss:'], example),
    ...nodeUrls.map((node) => urlProblem(nodesSetting, node, ['redis:', 'rediss:'], `${example},redis://host2:6379`)),
    ...sentinelUrls.map((node) => urlProblem(sentinels!.setting, node, ['redis:', 'rediss:'], 'redis://sentinel-1:26379,redis://sentinel-2:26379'))
  ]
}
