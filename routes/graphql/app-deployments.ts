// App deployments: a mobile app's name and version with the persisted operations it ships, published
// to the store (node:sqlite or PostgreSQL) by a release pipeline (`npm run app`, or the ADMIN HTTP
// verbs), then served by every instance without a restart, until retired. Apollo's persisted query
// lists and Hive's app deployments, inside the service.
//
// - `checkManifest`: a manifest (this service's own format, Apollo's, Relay's) read and checked for
//   this service: every id the hash of its text, one operation per text, valid against the schema and
//   within the limits (depth, aliases, tokens, size, and a cost with its defaults some caller can pay).
// - `publishManifest` / `retireDeployment` / `listDeployments`: the verbs, over the store.
// - `createDeploymentCatalog`: what an instance serves. It loads every active deployment's operations
//   (within DEPLOYMENTS_MAX_BYTES), plans and compiles each before swapping them in, reloads whenever the
//   store reports a change (Store.watchChanges: PostgreSQL's notifications, the embedded file's data
//   version), answers the persisted registry's lookups, names a retired operation's deployments, and
//   counts requests per deployment and operation, written to the store in batches.
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { basename, extname } from 'node:path'
import type { GraphQLSchema } from 'graphql'
import type { Config } from '../../app/config.ts'
import type { Caller } from '../../app/domain/context.ts'
import { AppError, forbidden, unauthenticated } from '../../app/errors.ts'
import type { ChangeWatch, DeployedOperation, Deployment, DeploymentUsage, Store } from '../../app/store/types.ts'
import { makePlan } from './plan.ts'
import type { RoomLogger } from './ports.ts'
import { readManifest, type ManifestEntry } from './persisted-manifest.ts'
import type { ClientApp, PersistedOperation } from './persisted.ts'

/** A name or a version: what a release pipeline can name an app by, safe in logs and URLs. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$/

export function assertDeploymentName (value: unknown, field: 'name' | 'version'): string {
  if (typeof value !== 'string' || !NAME.test(value)) {
    throw new AppError('BAD_USER_INPUT', `The app's ${field} must be 1 to 100 letters, digits or . _ + - (starting with a letter or digit)`,
      { field })
  }
  return value
}

/** A manifest checked for this service: its operations, or every problem found (nothing to publish then). */
export interface CheckedManifest {
  operations: DeployedOperation[]
  problems: string[]
}

type Limits = Config['limits']

/**
 * Reads and checks a manifest for this service, as it would run its operations: every problem named
 * with its operation (a malformed manifest, an unknown format or a hash that does not match its text
 * is one problem for the whole manifest).
 */
/** How problems name an operation: its type, name and the start of its hash. */
const operationLabel = (op: { type: string; name: string | null; hash: string }) =>
  `${op.type} ${op.name ?? '(anonymous)'} (sha256:${op.hash.slice(0, 12)}…)`

/** Why this service cannot serve an operation's text (too long, invalid, over every budget), or null. */
function operationProblem (text: string, schema: GraphQLSchema, limits: Limits): string | null {
  if (text.length > limits.maxQueryLength) return `longer than ${limits.maxQueryLength} characters (MAX_QUERY_LENGTH)`
  try {
    const [operation] = makePlan(schema, text, limits).operations
    const cost = operation!.cost({})
    const maxBudget = Math.max(...Object.values(limits.budgets))
    return cost > maxBudget ? `its cost with its defaults, ${cost}, is over every caller's budget (at most ${maxBudget})` : null
  } catch (err) {
    const nested = (err as { errors?: readonly { message: string }[] }).errors
    return nested?.length ? nested.map((e) => e.message).join('; ') : (err as Error).message
  }
}

/**
 * The active deployments' operations this schema cannot serve, one line each naming the app version
 * and the operation: what `npm run schema:check` reports before a schema change ships.
 */
export async function deploymentsBrokenBy (schema: GraphQLSchema, store: Store, limits: Limits): Promise<string[]> {
  const problemOf = new Map<string, string | null>()
  const lines: string[] = []
  for (const row of await store.deploymentOperations()) {
    if (row.state !== 'active') continue
    if (!problemOf.has(row.hash)) problemOf.set(row.hash, operationProblem(row.body, schema, limits))
    const problem = problemOf.get(row.hash)
    if (problem) lines.push(`${row.app} ${row.version}: ${operationLabel(row)}: ${problem}`)
  }
  return lines
}

export function checkManifest (json: unknown, schema: GraphQLSchema, limits: Limits): CheckedManifest {
  let entries: ManifestEntry[]
  try {
    entries = readManifest(json)
  } catch (err) {
    return { operations: [], problems: [(err as Error).message] }
  }
  if (entries.length === 0) return { operations: [], problems: ['the manifest holds no operation'] }
  const problems: string[] = []
  const byHash = new Map<string, DeployedOperation>()
  for (const entry of entries) {
    const problem = operationProblem(entry.text, schema, limits)
    if (problem) {
      problems.push(`${operationLabel(entry)}: ${problem}`)
      continue
    }
    const clientId = entry.id === entry.hash || entry.id === `sha256:${entry.hash}` ? null : entry.id
    byHash.set(entry.hash, { hash: entry.hash, body: entry.text, name: entry.name, type: entry.type, clientId })
  }
  return { operations: problems.length > 0 ? [] : [...byHash.values()], problems }
}

/** What makes a deployment's content the same: its operations' hashes and the ids its clients send, sorted. */
export function contentHashOf (operations: readonly DeployedOperation[]): string {
  const lines = operations.map((op) => `${op.hash} ${op.clientId ?? ''}`).sort()
  return createHash('sha256').update(lines.join('\n')).digest('hex')
}

const bytesOf = (operations: Iterable<{ body: string }>) => {
  let total = 0
  for (const op of operations) total += Buffer.byteLength(op.body)
  return total
}

/**
 * A PERSISTED_MANIFEST file, read and checked for this service, with the name and version it is
 * published under (its file's name, and its content's hash: a changed file is a new version). Throws a
 * startup error naming the file and its problems: a manifest the service cannot honour is a broken deploy.
 */
export function manifestFileDeployment (file: string, schema: GraphQLSchema, limits: Limits) {
  let json: unknown
  try {
    json = JSON.parse(readFileSync(file, 'utf8'))
  } catch (err) {
    throw new Error(`Persisted query manifest ${file}: ${(err as Error).message}`)
  }
  const checked = checkManifest(json, schema, limits)
  if (checked.problems.length > 0) throw new Error(`Persisted query manifest ${file}: ${checked.problems.join('; ')}`)
  return {
    name: basename(file, extname(file)).replace(/[^A-Za-z0-9._+-]/g, '-').slice(0, 100),
    version: contentHashOf(checked.operations).slice(0, 12),
    manifest: json
  }
}

/**
 * Publishes a manifest as app `name` `version`: checked first (nothing is written when a problem is
 * found, nor when the active operations would pass DEPLOYMENTS_MAX_BYTES), then stored and activated
 * in one step. The same content again is a no-op; other content under a published name and version is
 * a CONFLICT.
 */
export async function publishManifest (
  store: Store,
  options: { name: string; version: string; manifest: unknown; schema: GraphQLSchema; limits: Limits; maxBytes: number }
): Promise<{ outcome: 'published' | 'unchanged'; operations: number }> {
  const name = assertDeploymentName(options.name, 'name')
  const version = assertDeploymentName(options.version, 'version')
  const checked = checkManifest(options.manifest, options.schema, options.limits)
  if (checked.problems.length > 0) {
    throw new AppError('BAD_USER_INPUT', `App deployment ${name} ${version} not published: ${checked.problems.join('; ')}`,
      { problems: checked.problems })
  }
  const active = new Map<string, string>()
  for (const row of await store.deploymentOperations()) if (row.state === 'active') active.set(row.hash, row.body)
  for (const op of checked.operations) active.set(op.hash, op.body)
  const bytes = bytesOf([...active.values()].map((body) => ({ body })))
  if (bytes > options.maxBytes) {
    throw new AppError('BAD_USER_INPUT',
      `App deployment ${name} ${version} not published: the active operations would take ${bytes} bytes, over DEPLOYMENTS_MAX_BYTES (${options.maxBytes}); retire versions no longer in use first`,
      { bytes, maxBytes: options.maxBytes })
  }
  const outcome = await store.publishDeployment({
    name, version, contentHash: contentHashOf(checked.operations), operations: checked.operations
  })
  return { outcome, operations: checked.operations.length }
}

export async function retireDeployment (store: Store, name: string, version: string): Promise<void> {
  if (!(await store.retireDeployment(assertDeploymentName(name, 'name'), assertDeploymentName(version, 'version')))) {
    throw new AppError('NOT_FOUND', `No app deployment ${name} ${version}`)
  }
}

/** A deployment as `list --json` and the HTTP verb answer it, with whether and when it was last used. */
export interface ListedDeployment {
  name: string
  version: string
  state: Deployment['state']
  operations: number
  requests: number
  lastUsedAt: string | null
  publishedAt: string
  retiredAt: string | null
  /** Active and not used for `staleDays` days (never used: published that long ago); null when not asked. */
  stale: boolean | null
}

export async function listDeployments (
  store: Store, staleDays: number | null = null, now = Date.now()
): Promise<ListedDeployment[]> {
  return (await store.listDeployments()).map(({ contentHash: _content, ...deployment }) => ({
    ...deployment,
    stale: staleDays === null
      ? null
      : deployment.state === 'active' &&
        Date.parse(deployment.lastUsedAt ?? deployment.publishedAt) < now - staleDays * 86_400_000
  }))
}

// ---------------------------------------------------------------------------------------------
// What an instance serves

/** The app a request's headers say it comes from (ClientApp), or null. */
export function clientAppOf (headers: Record<string, string | string[] | undefined>): ClientApp | null {
  const one = (value: string | string[] | undefined) => (typeof value === 'string' && value.length <= 100 ? value : undefined)
  const name = one(headers['apollographql-client-name']) ?? one(headers['graphql-client-name'])
  const version = one(headers['apollographql-client-version']) ?? one(headers['graphql-client-version'])
  return name && version ? { name, version } : null
}

/** What the persisted registry asks of the catalog. */
export interface RegisteredOperations {
  /** The active operation a request names (sha256:<hex>, the bare hex, or the id its manifest gave it). */
  find (id: string): PersistedOperation | undefined
  /** Why an id names no active operation when it named one once: the deployments it was retired with. */
  retiredWith (id: string): string[] | undefined
  /** Counts one request of an operation, for the deployment the client says it is, else for every one holding it. */
  count (operation: PersistedOperation, client: ClientApp | null): void
}

export interface CatalogOptions {
  store: Store
  /** Plans and compiles a text before it is served; throws when this service cannot run it. */
  pin (text: string): void
  unpin (text: string): void
  /** DEPLOYMENTS_MAX_BYTES: the active operations' texts held in memory, at most. */
  maxBytes: number
  /** How often counted requests are written to the store (ms). */
  usageFlushMs: number
  log: RoomLogger
}

interface Counted {
  app: string
  version: string
  hash: string
  requests: number
  lastUsedAt: number
}

interface Served {
  operation: PersistedOperation
  /** The active deployments holding it, as `name version`. */
  deployments: string[]
}

const keyOf = (name: string, version: string) => `${name} ${version}`

export function createDeploymentCatalog (options: CatalogOptions) {
  const { store, log } = options
  let byId = new Map<string, Served>()
  let retired = new Map<string, string[]>()
  let pinnedTexts = new Set<string>()
  let refreshing: Promise<void> | null = null
  let again = false
  /** Requests counted since the last write, by `name version hash` (the last use in epoch ms until written). */
  let pending = new Map<string, Counted>()
  /** Requests counted by this instance since the metrics last read them, by deployment (`name version`). */
  let unscraped = new Map<string, number>()
  /** The active deployments (`name version`) as last loaded. */
  let activeDeployments: string[] = []

  async function load (): Promise<void> {
    const rows = await store.deploymentOperations()
    const active = rows.filter((row) => row.state === 'active')
    // Newest first within the bound: when another instance allowed more, the oldest wait (and say so).
    const published = new Map((await store.listDeployments()).map((d) => [keyOf(d.name, d.version), d.publishedAt]))
    active.sort((a, b) => (published.get(keyOf(b.app, b.version)) ?? '').localeCompare(published.get(keyOf(a.app, a.version)) ?? ''))
    const next = new Map<string, Served>()
    const texts = new Set<string>()
    let bytes = 0
    for (const row of active) {
      const deployment = keyOf(row.app, row.version)
      let served = next.get(`sha256:${row.hash}`)
      if (!served) {
        const size = Buffer.byteLength(row.body)
        if (bytes + size > options.maxBytes) {
          log.error({ deployment, maxBytes: options.maxBytes }, 'app deployment operations over DEPLOYMENTS_MAX_BYTES: not served')
          continue
        }
        if (!pinnedTexts.has(row.body)) {
          try {
            options.pin(row.body)
          } catch (err) {
            log.error({ deployment, operation: row.name, hash: row.hash, err: (err as Error).message },
              'an app deployment operation this service cannot run (the schema changed?): not served')
            continue
          }
        }
        bytes += size
        texts.add(row.body)
        served = { operation: { id: `sha256:${row.hash}`, text: row.body, name: row.name, type: row.type as PersistedOperation['type'] }, deployments: [] }
        next.set(served.operation.id, served)
        next.set(row.hash, served)
      }
      served.deployments.push(deployment)
      if (row.clientId) next.set(row.clientId, served)
    }
    const gone = new Map<string, string[]>()
    for (const row of rows) {
      if (row.state !== 'retired' || next.has(row.hash)) continue
      for (const id of [`sha256:${row.hash}`, row.hash, ...(row.clientId ? [row.clientId] : [])]) {
        gone.set(id, [...(gone.get(id) ?? []), keyOf(row.app, row.version)])
      }
    }
    for (const text of pinnedTexts) if (!texts.has(text)) options.unpin(text)
    byId = next
    retired = gone
    pinnedTexts = texts
    activeDeployments = [...new Set(active.map((row) => keyOf(row.app, row.version)))]
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
          await load()
        } while (again)
      } finally {
        refreshing = null
      }
    })()
    return refreshing
  }

  async function flush (): Promise<void> {
    if (pending.size === 0) return
    const batch = pending
    pending = new Map()
    try {
      await store.recordUsage([...batch.values()].map((u): DeploymentUsage =>
        ({ ...u, lastUsedAt: new Date(u.lastUsedAt).toISOString() })))
    } catch (err) {
      // Kept for the next write (merged with what comes meanwhile): counts are never dropped for an outage.
      for (const [key, usage] of batch) {
        const now = pending.get(key)
        pending.set(key, now ? { ...now, requests: now.requests + usage.requests } : usage)
      }
      log.warn({ err: (err as Error).message }, 'app deployment usage not written yet: kept for the next write')
    }
  }

  let watch: ChangeWatch | null = null
  let timer: NodeJS.Timeout | null = null

  const registered: RegisteredOperations = {
    find: (id) => byId.get(id)?.operation,
    retiredWith: (id) => retired.get(id),
    count (operation, client) {
      const served = byId.get(operation.id)
      if (!served) return
      // The deployment the client names, when it holds the operation; otherwise every one that does.
      const named = client ? keyOf(client.name, client.version) : null
      const at = Date.now()
      for (const deployment of named && served.deployments.includes(named) ? [named] : served.deployments) {
        const key = `${deployment} ${operation.id}`
        const usage = pending.get(key)
        if (usage) {
          usage.requests++
          usage.lastUsedAt = at
        } else {
          const [name, version] = deployment.split(' ') as [string, string]
          pending.set(key, { app: name, version, hash: operation.id.slice(7), requests: 1, lastUsedAt: at })
        }
        unscraped.set(deployment, (unscraped.get(deployment) ?? 0) + 1)
      }
    }
  }

  return {
    registered,
    refresh,
    flush,
    /** Starts following the store's changes (a change reloads) and writing usage every usageFlushMs. */
    start (): void {
      watch = store.watchChanges({
        changed (tags) { if (tags === 'all' || tags.includes('deployments')) void refresh().catch((err) => log.error({ err }, 'app deployments not reloaded')) },
        watching () {}
      })
      timer = setInterval(() => { void flush() }, options.usageFlushMs).unref()
    },
    async stop (): Promise<void> {
      if (timer) clearInterval(timer)
      await watch?.stop()
      await flush()
    },
    /**
     * Every active deployment with the requests this instance served for it since the last call (the
     * metrics' counter adds them up, and drops the deployments no longer listed).
     */
    takeUsage (): DeploymentRequests[] {
      const taken = unscraped
      unscraped = new Map()
      return activeDeployments.map((deployment) => {
        const requests = taken.get(deployment) ?? 0
        const [name, version] = deployment.split(' ') as [string, string]
        return { name, version, requests }
      })
    },
    get stats () { return { operations: new Set(byId.values()).size, retired: retired.size } }
  }
}

export type DeploymentCatalog = ReturnType<typeof createDeploymentCatalog>

/** Requests one instance served for one app version's operations. */
export interface DeploymentRequests { name: string; version: string; requests: number }

// ---------------------------------------------------------------------------------------------
// The verbs over HTTP

export interface VerbOptions {
  store: Store
  schema (): GraphQLSchema
  limits: Limits
  maxBytes: number
  catalog: DeploymentCatalog
  log: CatalogOptions['log']
}

/**
 * The verbs of `npm run app` for release pipelines that cannot reach the database (the door serves them
 * under /admin/app-deployments): an administrator's only, each logged with who asked. A publish or a
 * retirement is live on this instance when it answers, and on the others as soon as they hear of it.
 */
export function deploymentVerbs (options: VerbOptions) {
  const { store, catalog, log } = options
  const administrator = (caller: Caller | null): Caller => {
    if (!caller) throw unauthenticated()
    if (caller.role !== 'ADMIN') throw forbidden('App deployments are published and retired by administrators')
    return caller
  }
  return {
    /** Refuses anyone but an administrator: the door asks before it reads a body (a manifest can be large). */
    admit: administrator,
    /** `staleDays` as the query string gives it: absent, or a whole number of days. */
    async list (caller: Caller | null, staleDays: string | undefined) {
      administrator(caller)
      const days = staleDays === undefined ? null : Number(staleDays)
      if (days !== null && !(/^\d{1,5}$/.test(staleDays!) && Number.isInteger(days))) {
        throw new AppError('BAD_USER_INPUT', 'staleDays must be a whole number of days', { field: 'staleDays' })
      }
      return { deployments: await listDeployments(store, days) }
    },
    check (caller: Caller | null, manifest: unknown) {
      administrator(caller)
      const { operations, problems } = checkManifest(manifest, options.schema(), options.limits)
      if (problems.length > 0) throw new AppError('BAD_USER_INPUT', `The manifest does not check: ${problems.join('; ')}`, { problems })
      return { operations: operations.length }
    },
    async publish (caller: Caller | null, name: string, version: string, manifest: unknown) {
      const admin = administrator(caller)
      const published = await publishManifest(store, {
        name, version, manifest, schema: options.schema(), limits: options.limits, maxBytes: options.maxBytes
      })
      await catalog.refresh()
      log.info({ caller: admin.id, app: name, version, ...published }, 'app deployment published')
      return { name, version, ...published }
    },
    async retire (caller: Caller | null, name: string, version: string) {
      const admin = administrator(caller)
      await retireDeployment(store, name, version)
      await catalog.refresh()
      log.info({ caller: admin.id, app: name, version }, 'app deployment retired')
      return { name, version, state: 'retired' as const }
    }
  }
}
