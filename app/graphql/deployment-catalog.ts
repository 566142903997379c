// The app deployment catalog: what an instance serves of the active app deployments (app-deployments.ts
// publishes and checks them). It loads whole deployments only, newest first while their weight fits
// DEPLOYMENTS_MAX_BYTES (and a quarter of the heap), plans and compiles each operation in slices between
// requests before swapping them in, reloads what changed whenever the store reports a change
// (Store.watchChanges), retries a failed reload with backoff and refuses its operations once its view may
// be stale, answers the persisted registry's lookups, names a retired operation's deployments, counts
// admitted requests per deployment and operation (written to the store in batches), and says in the
// store which profile this instance runs.
import { createHash, randomUUID } from 'node:crypto'
import { getHeapStatistics } from 'node:v8'
import { AppError } from '../core/errors.ts'
import type { ChangeWatch, Deployment, DeploymentKey, DeploymentOperationRow, Store } from '../core/store/types.ts'
import { operationLabel, PROFILE_HEARTBEAT_MS, slices, whyRefused, type ServiceProfile } from './app-deployments.ts'
import type { EngineLogger } from './dependencies.ts'
import { deploymentUsage, type DeploymentRequests } from './deployment-usage.ts'
import type { ClientApp, PersistedOperation } from './persisted.ts'

/** What the persisted registry asks of the catalog. */
export interface RegisteredOperations {
  /**
   * The active operation a request names (sha256:<hex>, the bare hex, or the id its manifest gave it).
   * Throws SERVICE_UNAVAILABLE while this instance cannot vouch for its view (reloads failing).
   */
  find (id: string): PersistedOperation | undefined
  /** Why an id names no active operation when it named one once: the deployments it was retired with. */
  retiredWith (id: string): string[] | undefined
  /**
   * Counts one admitted request of an operation: for the deployment the client names when it holds the
   * operation, else once for the newest active deployment holding it.
   */
  count (operation: PersistedOperation, client: ClientApp | null): void
}

export interface CatalogOptions {
  store: Store
  /** Plans and compiles a text to serve: what it weighs in memory. Throws when this service cannot run it. */
  retain (text: string): number
  release (text: string): void
  /** DEPLOYMENTS_MAX_BYTES: what the active operations' plans and compiled code may weigh in memory, at most. */
  maxBytes: number
  /** How often counted requests are written to the store (ms). */
  usageFlushMs: number
  /** What this instance runs: said to the store while it runs (what publishes are checked against). */
  profile: ServiceProfile
  log: EngineLogger
}

interface Served {
  operation: PersistedOperation
  /** The served deployments holding it, as `name version`, newest first. */
  deployments: string[]
}

const keyOf = (name: string, version: string) => `${name} ${version}`

/**
 * How a failed reload is retried: after RETRY_FIRST_MS, doubling up to RETRY_MAX_MS (with jitter, so a
 * fleet that lost its store does not come back in step). While the feed of changes is down, the catalog
 * reloads on the same schedule instead, each success vouching for what it read.
 */
const RETRY_FIRST_MS = 250
const RETRY_MAX_MS = 4000
/**
 * How long a reported change may stay unloaded (reloads failing) before this instance stops serving the
 * deployments' operations (SERVICE_UNAVAILABLE, /health/ready failing): a retirement is honoured
 * everywhere within this window, or the operations are refused until a reload succeeds.
 */
export const STALE_AFTER_MS = 5000

/**
 * What an instance may hold of the active operations, at most: DEPLOYMENTS_MAX_BYTES, and a quarter of
 * the heap V8 allows this process (an instance started with a small heap serves what fits, not dies).
 */
export function instanceWeightBound (maxBytes: number): number {
  return Math.min(maxBytes, Math.floor(getHeapStatistics().heap_size_limit / 4))
}

/** A deployment as the catalog last read it: its head and its operations' rows. */
interface LoadedDeployment {
  state: Deployment['state']
  contentHash: string
  publishedAt: string
  rows: DeploymentOperationRow[]
}

export function createDeploymentCatalog (options: CatalogOptions) {
  const { store, log } = options
  const bound = instanceWeightBound(options.maxBytes)
  let byId = new Map<string, Served>()
  let retired = new Map<string, string[]>()
  /** The texts retained (planned and compiled), with their weight. */
  let retained = new Map<string, number>()
  /** Every deployment that is not pending, as last read (only what changed is read again). */
  const loaded = new Map<string, LoadedDeployment>()
  /** Operations this service cannot run, by hash, with why (not planned again on every reload). */
  let cannotRun = new Map<string, string>()
  /** Active deployments not served, with why (each logged once, reported by /health/ready). */
  let refused = new Map<string, string>()
  let refreshing: Promise<void> | null = null
  let again = false
  const usage = deploymentUsage(store, log)
  /** The active deployments (`name version`) as last loaded. */
  let activeDeployments: string[] = []
  /** Weight of what is served (plans and compiled code). */
  let servedWeight = 0
  const instance = randomUUID()
  const profileJson = JSON.stringify(options.profile)
  const profileHash = createHash('sha256').update(profileJson).digest('hex')
  let heartbeat: NodeJS.Timeout | null = null
  const sayRunning = () => store.recordServiceInstance(instance, profileHash, profileJson)
    .catch((err: unknown) => log.warn({ err: (err as Error).message }, 'could not tell the store which profile this instance runs: retried in a minute'))

  // Whether the view can be vouched for: changes reported (or the feed down) since a reload last succeeded.
  let reported = 0
  let loadedUpTo = 0
  let unloadedSince: number | null = null
  let feedLive = true
  let refusing = false
  let staleTimer: NodeJS.Timeout | null = null
  let retryTimer: NodeJS.Timeout | null = null
  let failures = 0
  let stopped = false

  async function load (): Promise<void> {
    const pause = slices()
    // The heads (small), then the operations of the deployments new or changed since the last read.
    const heads = (await store.listDeployments()).filter((d) => d.state !== 'pending')
    const seen = new Set<string>()
    const toRead: DeploymentKey[] = []
    for (const head of heads) {
      const key = keyOf(head.name, head.version)
      seen.add(key)
      const known = loaded.get(key)
      if (!known || known.contentHash !== head.contentHash || (head.state === 'active' && known.state !== 'active')) {
        toRead.push({ name: head.name, version: head.version })
      }
    }
    const read = new Map<string, DeploymentOperationRow[]>()
    for (const row of await store.deploymentOperations(toRead)) {
      const key = keyOf(row.app, row.version)
      const rows = read.get(key)
      if (rows) rows.push(row)
      else read.set(key, [row])
    }
    for (const key of loaded.keys()) if (!seen.has(key)) loaded.delete(key)
    for (const head of heads) {
      const key = keyOf(head.name, head.version)
      const rows = read.get(key) ?? loaded.get(key)?.rows ?? []
      loaded.set(key, { state: head.state, contentHash: head.contentHash, publishedAt: head.publishedAt, rows })
    }

    // Whole deployments, newest first, while their weight fits: when another instance allowed more (or
    // this heap is smaller), the oldest wait, and say so.
    const active = [...loaded].filter(([, d]) => d.state === 'active')
      .sort(([, a], [, b]) => b.publishedAt.localeCompare(a.publishedAt))
    const next = new Map<string, Served>()
    const nextRetained = new Map<string, number>()
    const nextCannotRun = new Map<string, string>()
    const nextRefused = new Map<string, string>()
    let weight = 0
    for (const [deployment, { rows }] of active) {
      let problem: string | null = null
      let added = 0
      const fresh = new Map<string, DeploymentOperationRow>()
      for (const row of rows) {
        if (nextRetained.has(row.body) || fresh.has(row.body)) continue
        const known = cannotRun.get(row.hash) ?? nextCannotRun.get(row.hash)
        if (known) {
          nextCannotRun.set(row.hash, known)
          problem = `${operationLabel(row)}: ${known}`
          break
        }
        added += retained.get(row.body) ?? row.weight
        fresh.set(row.body, row)
      }
      if (!problem && weight + added > bound) {
        problem = `its operations would take what the served ones weigh in memory to ${weight + added} bytes, over ${bound} ` +
          `(DEPLOYMENTS_MAX_BYTES${bound < options.maxBytes ? ', or a quarter of this instance\'s heap' : ''})`
      }
      // Planned and compiled (in slices) only once the deployment fits: all of its operations, or none served.
      const retainedHere: string[] = []
      for (const row of problem ? [] : fresh.values()) {
        let retainedWeight = retained.get(row.body)
        if (retainedWeight === undefined) {
          await pause()
          try {
            retainedWeight = options.retain(row.body)
          } catch (err) {
            const why = whyRefused(err)
            nextCannotRun.set(row.hash, why)
            problem = `${operationLabel(row)}: ${why} (the schema or the limits changed?)`
            break
          }
        }
        nextRetained.set(row.body, retainedWeight)
        retainedHere.push(row.body)
      }
      if (problem) {
        for (const text of retainedHere) {
          nextRetained.delete(text)
          // Retained by this load alone: let go now (the end of the load lets go of earlier ones).
          if (!retained.has(text)) options.release(text)
        }
        nextRefused.set(deployment, problem)
        continue
      }
      for (const text of retainedHere) weight += nextRetained.get(text)!
      for (const row of rows) {
        let served = next.get(`sha256:${row.hash}`)
        if (!served) {
          served = { operation: { id: `sha256:${row.hash}`, text: row.body, name: row.name, type: row.type as PersistedOperation['type'] }, deployments: [] }
          next.set(served.operation.id, served)
          next.set(row.hash, served)
        }
        if (!served.deployments.includes(deployment)) served.deployments.push(deployment)
        if (row.clientId) next.set(row.clientId, served)
      }
    }
    const gone = new Map<string, string[]>()
    for (const [deployment, { state, rows }] of loaded) {
      if (state !== 'retired') continue
      for (const row of rows) {
        if (next.has(row.hash)) continue
        for (const id of [`sha256:${row.hash}`, row.hash, ...(row.clientId ? [row.clientId] : [])]) {
          const holders = gone.get(id)
          if (holders) holders.push(deployment)
          else gone.set(id, [deployment])
        }
      }
    }
    for (const text of retained.keys()) if (!nextRetained.has(text)) options.release(text)
    for (const [deployment, why] of nextRefused) {
      if (refused.get(deployment) !== why) log.error({ deployment, reason: why }, 'app deployment not served by this instance')
    }
    for (const deployment of refused.keys()) {
      if (!nextRefused.has(deployment) && active.some(([key]) => key === deployment)) log.info({ deployment }, 'app deployment now served')
    }
    byId = next
    retired = gone
    retained = nextRetained
    cannotRun = nextCannotRun
    refused = nextRefused
    servedWeight = weight
    activeDeployments = active.filter(([key]) => !nextRefused.has(key)).map(([key]) => key)
  }

  /** A change reported (or the feed down): the view is unvouched for until a reload started after it succeeds. */
  function changeReported (): void {
    reported++
    if (unloadedSince === null) {
      unloadedSince = Date.now()
      staleTimer = setTimeout(becomeStale, STALE_AFTER_MS).unref()
    }
  }

  function becomeStale (): void {
    if (unloadedSince === null || refusing) return
    refusing = true
    log.error({ sinceMs: Date.now() - unloadedSince },
      'app deployments not reloaded within the stale window: their operations are refused until a reload succeeds')
  }

  function vouched (upTo: number, startedAt: number): void {
    loadedUpTo = Math.max(loadedUpTo, upTo)
    if (loadedUpTo < reported || !feedLive) {
      // Changes came meanwhile (or the feed is still down): what was read is current as of this load's start.
      unloadedSince = startedAt
      if (staleTimer) clearTimeout(staleTimer)
      staleTimer = setTimeout(becomeStale, Math.max(0, STALE_AFTER_MS - (Date.now() - startedAt))).unref()
      return
    }
    unloadedSince = null
    if (staleTimer) clearTimeout(staleTimer)
    staleTimer = null
    if (refusing) log.info({}, 'app deployments reloaded: their operations are served again')
    refusing = false
  }

  /** Reloads from the store (one at a time; a change reported meanwhile reloads again after). */
  function refresh (): Promise<void> {
    if (refreshing) {
      again = true
      return refreshing
    }
    refreshing = (async () => {
      try {
        do {
          again = false
          const upTo = reported
          const startedAt = Date.now()
          await load()
          failures = 0
          vouched(upTo, startedAt)
        } while (again)
      } finally {
        refreshing = null
      }
    })()
    return refreshing
  }

  /** Schedules the next reload: after a failure (backoff), or while the feed is down (polling). */
  function scheduleRetry (): void {
    if (stopped || retryTimer) return
    const base = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.min(failures, 10))
    retryTimer = setTimeout(() => {
      retryTimer = null
      reload()
    }, base / 2 + Math.random() * base / 2).unref()
  }

  /** A reload that is retried until it succeeds (and, while the feed is down, repeated). */
  function reload (): void {
    if (!feedLive) changeReported()
    refresh().then(() => {
      if (!feedLive) scheduleRetry()
    }, (err: unknown) => {
      failures++
      log.warn({ err: (err as Error).message, failures }, 'app deployments not reloaded: retrying')
      scheduleRetry()
    })
  }

  let watch: ChangeWatch | null = null
  let timer: NodeJS.Timeout | null = null

  const unavailable = () => new AppError('SERVICE_UNAVAILABLE',
    'The app deployments could not be reloaded from the store: persisted operations are refused until they are; retry shortly',
    { retryAfter: Math.ceil(RETRY_MAX_MS / 1000) })

  const registered: RegisteredOperations = {
    find (id) {
      if (refusing) throw unavailable()
      return byId.get(id)?.operation
    },
    retiredWith: (id) => retired.get(id),
    count (operation, client) {
      const served = byId.get(operation.id)
      if (!served) return
      // The deployment the client names, when it holds the operation; otherwise the newest holding it.
      const named = client ? keyOf(client.name, client.version) : null
      usage.count(named && served.deployments.includes(named) ? named : served.deployments[0]!, operation.id)
    }
  }

  return {
    registered,
    refresh,
    flush: usage.flush,
    /**
     * Says which profile this instance runs (and again every PROFILE_HEARTBEAT_MS), starts following the
     * store's changes (a change reloads) and writing usage every usageFlushMs.
     */
    async start (): Promise<void> {
      await sayRunning()
      heartbeat = setInterval(() => { void sayRunning() }, PROFILE_HEARTBEAT_MS).unref()
      watch = store.watchChanges({
        changed (tags) {
          if (tags !== 'all' && !tags.includes('deployments')) return
          changeReported()
          reload()
        },
        watching (live) {
          if (live === feedLive) return
          feedLive = live
          // Changes made elsewhere go unheard while the feed is down: reloads poll the store meanwhile.
          if (!live) reload()
        }
      })
      timer = setInterval(() => { void usage.flush() }, options.usageFlushMs).unref()
    },
    async stop (): Promise<void> {
      stopped = true
      if (timer) clearInterval(timer)
      if (heartbeat) clearInterval(heartbeat)
      await store.forgetServiceInstance(instance).catch(() => {})
      if (retryTimer) clearTimeout(retryTimer)
      if (staleTimer) clearTimeout(staleTimer)
      await watch?.stop()
      await usage.flush()
    },
    /**
     * What /health/ready says of the catalog: throws while its operations are refused (reloads failing
     * past the stale window); a note naming the active deployments it does not serve, and why; else undefined.
     */
    readiness (): string | undefined {
      if (refusing) {
        throw new Error(`app deployments not reloaded for ${Date.now() - (unloadedSince ?? Date.now())} ms: their operations are refused`)
      }
      if (refused.size === 0) return undefined
      return `ok, but ${refused.size} active app deployment(s) not served: ` +
        [...refused].map(([deployment, why]) => `${deployment} (${why})`).join('; ').slice(0, 2000)
    },
    /**
     * Every active deployment served, with the requests this instance served for it since the last call
     * (the metrics' counter adds them up, and drops the deployments no longer listed).
     */
    takeUsage: (): DeploymentRequests[] => usage.take(activeDeployments),
    get stats () {
      const operations = new Set(byId.values()).size
      return { operations, retired: retired.size, weight: servedWeight, refused: refused.size }
    }
  }
}

export type DeploymentCatalog = ReturnType<typeof createDeploymentCatalog>
