// What an instance counts of its app deployments' use: admitted requests per deployment and operation,
// written to the store in batches (kept for the next write when the store fails: never dropped), and per
// deployment for the metrics since they last read them.
import type { DeploymentUsage, Store } from '../core/store/types.ts'
import type { EngineLogger } from './dependencies.ts'

/** Requests one instance served for one app version's operations. */
export interface DeploymentRequests { name: string; version: string; requests: number }

interface Counted {
  app: string
  version: string
  hash: string
  requests: number
  lastUsedAt: number
}

export function deploymentUsage (store: Pick<Store, 'recordUsage'>, log: Pick<EngineLogger, 'warn'>) {
  /** Requests counted since the last write, by `name version hash` (the last use in epoch ms until written). */
  let pending = new Map<string, Counted>()
  /** Requests counted since the metrics last read them, by deployment (`name version`). */
  let unscraped = new Map<string, number>()

  return {
    /** One admitted request of the operation `id` (`sha256:<hex>`), for `deployment` (`name version`). */
    count (deployment: string, id: string): void {
      const key = `${deployment} ${id}`
      const at = Date.now()
      const usage = pending.get(key)
      if (usage) {
        usage.requests++
        usage.lastUsedAt = at
      } else {
        const [name, version] = deployment.split(' ') as [string, string]
        pending.set(key, { app: name, version, hash: id.slice(7), requests: 1, lastUsedAt: at })
      }
      unscraped.set(deployment, (unscraped.get(deployment) ?? 0) + 1)
    },

    /** Writes what was counted since the last write; on failure keeps it, merged with what comes meanwhile. */
    async flush (): Promise<void> {
      if (pending.size === 0) return
      const batch = pending
      pending = new Map()
      try {
        await store.recordUsage([...batch.values()].map((u): DeploymentUsage =>
          ({ ...u, lastUsedAt: new Date(u.lastUsedAt).toISOString() })))
      } catch (err) {
        for (const [key, usage] of batch) {
          const now = pending.get(key)
          const lastUsedAt = now ? Math.max(now.lastUsedAt, usage.lastUsedAt) : usage.lastUsedAt
          pending.set(key, now ? { ...now, requests: now.requests + usage.requests, lastUsedAt } : usage)
        }
        log.warn({ err: (err as Error).message }, 'app deployment usage not written yet: kept for the next write')
      }
    },

    /**
     * Every deployment of `active`, with the requests counted for it since the last call (the metrics'
     * counter adds them up, and drops the deployments no longer listed).
     */
    take (active: readonly string[]): DeploymentRequests[] {
      const taken = unscraped
      unscraped = new Map()
      return active.map((deployment) => {
        const requests = taken.get(deployment) ?? 0
        const [name, version] = deployment.split(' ') as [string, string]
        return { name, version, requests }
      })
    }
  }
}
