// App deployments: a mobile app's name and version with the persisted operations it ships, published
// to the store (node:sqlite or PostgreSQL) by a release pipeline (`npm run app`, or the ADMIN HTTP
// verbs), then served by every instance without a restart, until retired. Apollo's persisted query
// lists and Hive's app deployments, inside the service.
//
// - `checkManifest`: a manifest (this service's own format, Apollo's, Relay's) read and checked for
//   this service: every id the hash of its text, one operation per text, valid against the schema and
//   within the limits (depth, aliases, tokens, size, and a cost with its defaults some caller can pay).
// - `publishManifest` / `retireDeployment` / `listDeployments`: the verbs, over the store.
// - `createDeploymentCatalog`: what an instance serves. It loads the active deployments' operations,
//   whole deployments only, newest first while their weight fits DEPLOYMENTS_MAX_BYTES (and the heap),
//   plans and compiles each in slices between requests before swapping them in, reloads what changed
//   whenever the store reports a change (Store.watchChanges), retries a failed reload with backoff and
//   refuses its operations once its view may be stale, answers the persisted registry's lookups, names a
//   retired operation's deployments, and counts admitted requests per deployment and operation, written
//   to the store in batches.
import { createHash, randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { basename, extname } from 'node:path'
import { getHeapStatistics } from 'node:v8'
import { buildSchema, type GraphQLSchema } from 'graphql'
import type { Config } from '../../app/config.ts'
import type { Caller } from '../../app/domain/context.ts'
import { AppError, forbidden, unauthenticated } from '../../app/errors.ts'
import type { ChangeWatch, DeployedOperation, Deployment, DeploymentKey, DeploymentOperationRow, DeploymentUsage, Store } from '../../app/store/types.ts'
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

/** How problems name an operation: its type, name and the start of its hash. */
const operationLabel = (op: { type: string; name: string | null; hash: string }) =>
  `${op.type} ${op.name ?? '(anonymous)'} (sha256:${op.hash.slice(0, 12)}…)`

/**
 * Whether this service can serve an operation's text: why not (too long, invalid, over every budget), or
 * what it weighs in memory once planned and compiled (plan.ts's estimate, measured per character and
 * per field: its compilation is not made to know it).
 */
function operationCheck (
  text: string, schema: GraphQLSchema, limits: Limits
): { problem: string } | { weight: number } {
  if (text.length > limits.maxQueryLength) return { problem: `longer than ${limits.maxQueryLength} characters (MAX_QUERY_LENGTH)` }
  try {
    const plan = makePlan(schema, text, limits)
    const operation = plan.operations[0]!
    const cost = operation.cost({})
    const maxBudget = Math.max(...Object.values(limits.budgets))
    if (cost > maxBudget) return { problem: `its cost with its defaults, ${cost}, is over every caller's budget (at most ${maxBudget})` }
    return { weight: plan.bytes + plan.operations.reduce((sum, op) => sum + op.compiledBytes, 0) }
  } catch (err) {
    const nested = (err as { errors?: readonly { message: string }[] }).errors
    return { problem: nested?.length ? nested.map((e) => e.message).join('; ') : (err as Error).message }
  }
}

/** Work done in slices of this many ms, the event loop served between them: a large manifest never stalls requests. */
const SLICE_MS = 10

/** Returns a function to await between steps of a long synchronous task: it yields once a slice is used up. */
function slices (): () => Promise<void> | undefined {
  let started = performance.now()
  return () => {
    if (performance.now() - started < SLICE_MS) return undefined
    return new Promise<void>((resolve) => setImmediate(() => { started = performance.now(); resolve() }))
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
    if (!problemOf.has(row.hash)) {
      const checked = operationCheck(row.body, schema, limits)
      problemOf.set(row.hash, 'problem' in checked ? checked.problem : null)
    }
    const problem = problemOf.get(row.hash)
    if (problem) lines.push(`${row.app} ${row.version}: ${operationLabel(row)}: ${problem}`)
  }
  return lines
}

/**
 * Reads and checks a manifest for this service, as it would run its operations: every problem named
 * with its operation (a malformed manifest, an unknown format or a hash that does not match its text
 * is one problem for the whole manifest). Planned in slices: checking 10000 operations on an instance
 * leaves its requests (and /health/live) served meanwhile.
 */
export async function checkManifest (json: unknown, schema: GraphQLSchema, limits: Limits): Promise<CheckedManifest> {
  let entries: ManifestEntry[]
  try {
    entries = readManifest(json)
  } catch (err) {
    return { operations: [], problems: [(err as Error).message] }
  }
  if (entries.length === 0) return { operations: [], problems: ['the manifest holds no operation'] }
  const problems: string[] = []
  const byHash = new Map<string, DeployedOperation>()
  const pause = slices()
  for (const entry of entries) {
    await pause()
    const checked = operationCheck(entry.text, schema, limits)
    if ('problem' in checked) {
      problems.push(`${operationLabel(entry)}: ${checked.problem}`)
      continue
    }
    const clientId = entry.id === entry.hash || entry.id === `sha256:${entry.hash}` ? null : entry.id
    const { hash, text: body, name, type } = entry
    byHash.set(hash, { hash, body, name, type, clientId, weight: checked.weight })
  }
  return { operations: problems.length > 0 ? [] : [...byHash.values()], problems }
}

// ---------------------------------------------------------------------------------------------
// What the running instances run: a publish is checked against it, not against the publisher's checkout

/** What decides whether an instance can serve an operation: its schema's text, its limits, its bound. */
export interface ServiceProfile {
  schema: string
  limits: Limits
  maxBytes: number
}

/** What a manifest is checked against: a schema, limits and bound, and whose (label null: this process's own). */
export interface CheckTarget {
  schema: GraphQLSchema
  limits: Limits
  maxBytes: number
  label: string | null
}

/**
 * Each instance says which profile it runs when it starts and every PROFILE_HEARTBEAT_MS; a profile counts
 * as running while an instance said so within PROFILE_RUNNING_MS (an instance that stops says so too).
 */
export const PROFILE_HEARTBEAT_MS = 60_000
const PROFILE_RUNNING_MS = 3 * PROFILE_HEARTBEAT_MS

/** The schemas of the profiles met, built once each (a fleet runs one or two at a time). */
const profileSchemas = new Map<string, GraphQLSchema>()

function schemaOf (hash: string, sdl: string): GraphQLSchema {
  let schema = profileSchemas.get(hash)
  if (!schema) {
    if (profileSchemas.size >= 16) profileSchemas.delete(profileSchemas.keys().next().value!)
    profileSchemas.set(hash, schema = buildSchema(sdl))
  }
  return schema
}

/** The profiles of the running instances, as check targets; empty when none has said (none runs, or older ones). */
export async function runningTargets (store: Store): Promise<CheckTarget[]> {
  return (await store.serviceProfiles(PROFILE_RUNNING_MS)).map(({ hash, profile, instances }) => {
    const { schema, limits, maxBytes } = JSON.parse(profile) as ServiceProfile
    return { schema: schemaOf(hash, schema), limits, maxBytes, label: `the ${instances} running instance(s) of profile ${hash.slice(0, 12)}` }
  })
}

/**
 * Checks a manifest against every target: its operations (each with the most it weighs for any of them)
 * and the bound the publish is held to (the least of theirs), or every problem, named with its target's
 * label when there is one.
 */
export async function checkAgainst (
  manifest: unknown, targets: readonly CheckTarget[]
): Promise<CheckedManifest & { maxBytes: number }> {
  let operations: DeployedOperation[] = []
  for (const [i, target] of targets.entries()) {
    const checked = await checkManifest(manifest, target.schema, target.limits)
    if (checked.problems.length > 0) {
      const problems = target.label ? checked.problems.map((problem) => `refused by ${target.label}: ${problem}`) : checked.problems
      return { operations: [], problems, maxBytes: 0 }
    }
    operations = i === 0
      ? checked.operations
      : operations.map((op, j) => ({ ...op, weight: Math.max(op.weight, checked.operations[j]!.weight) }))
  }
  return { operations, problems: [], maxBytes: Math.min(...targets.map((target) => target.maxBytes)) }
}

/** What makes a deployment's content the same: its operations' hashes and the ids its clients send, sorted. */
export function contentHashOf (operations: readonly DeployedOperation[]): string {
  const lines = operations.map((op) => `${op.hash} ${op.clientId ?? ''}`).sort()
  return createHash('sha256').update(lines.join('\n')).digest('hex')
}

/**
 * A PERSISTED_MANIFEST file, read and checked for this service, with the name and version it is
 * published under (its file's name, and its content's hash: a changed file is a new version). Throws a
 * startup error naming the file and its problems: a manifest the service cannot honour is a broken deploy.
 */
export async function manifestFileDeployment (file: string, schema: GraphQLSchema, limits: Limits) {
  let json: unknown
  try {
    json = JSON.parse(readFileSync(file, 'utf8'))
  } catch (err) {
    throw new Error(`Persisted query manifest ${file}: ${(err as Error).message}`)
  }
  const checked = await checkManifest(json, schema, limits)
  if (checked.problems.length > 0) throw new Error(`Persisted query manifest ${file}: ${checked.problems.join('; ')}`)
  return {
    name: basename(file, extname(file)).replace(/[^A-Za-z0-9._+-]/g, '-').slice(0, 100),
    version: contentHashOf(checked.operations).slice(0, 12),
    manifest: json
  }
}

/**
 * Publishes a manifest as app `name` `version`: checked first (nothing is written when a problem is
 * found), then stored and activated in one transaction, which refuses it when the active operations
 * would then weigh more than `maxBytes` (DEPLOYMENTS_MAX_BYTES). The same content again is a no-op;
 * other content under a published name and version is a CONFLICT.
 */
export async function publishManifest (
  store: Store,
  options: {
    name: string
    version: string
    manifest: unknown
    schema: GraphQLSchema
    limits: Limits
    maxBytes: number
    /** What to check it against instead of `schema`, `limits` and `maxBytes` (the running instances' profiles). */
    targets?: readonly CheckTarget[]
  }
): Promise<{ outcome: 'published' | 'unchanged'; operations: number }> {
  const name = assertDeploymentName(options.name, 'name')
  const version = assertDeploymentName(options.version, 'version')
  const { schema, limits, maxBytes } = options
  const checked = await checkAgainst(options.manifest, options.targets ?? [{ schema, limits, maxBytes, label: null }])
  if (checked.problems.length > 0) {
    throw new AppError('BAD_USER_INPUT', `App deployment ${name} ${version} not published: ${checked.problems.join('; ')}`,
      { problems: checked.problems })
  }
  const outcome = await store.publishDeployment({
    name,
    version,
    contentHash: contentHashOf(checked.operations),
    operations: checked.operations,
    maxWeight: checked.maxBytes
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
  pin (text: string): number
  unpin (text: string): void
  /** DEPLOYMENTS_MAX_BYTES: what the active operations' plans and compiled code may weigh in memory, at most. */
  maxBytes: number
  /** How often counted requests are written to the store (ms). */
  usageFlushMs: number
  /** What this instance runs: said to the store while it runs (what publishes are checked against). */
  profile: ServiceProfile
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
  /** The texts pinned (planned and compiled), with their weight. */
  let pinned = new Map<string, number>()
  /** Every deployment that is not pending, as last read (only what changed is read again). */
  const loaded = new Map<string, LoadedDeployment>()
  /** Operations this service cannot run, by hash, with why (not planned again on every reload). */
  let cannotRun = new Map<string, string>()
  /** Active deployments not served, with why (each logged once, reported by /health/ready). */
  let refused = new Map<string, string>()
  let refreshing: Promise<void> | null = null
  let again = false
  /** Requests counted since the last write, by `name version hash` (the last use in epoch ms until written). */
  let pending = new Map<string, Counted>()
  /** Requests counted by this instance since the metrics last read them, by deployment (`name version`). */
  let unscraped = new Map<string, number>()
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
      read.set(key, [...(read.get(key) ?? []), row])
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
    const nextPinned = new Map<string, number>()
    const nextCannotRun = new Map<string, string>()
    const nextRefused = new Map<string, string>()
    let weight = 0
    for (const [deployment, { rows }] of active) {
      let problem: string | null = null
      let added = 0
      const fresh: DeploymentOperationRow[] = []
      for (const row of rows) {
        if (nextPinned.has(row.body) || fresh.some((f) => f.body === row.body)) continue
        const known = cannotRun.get(row.hash) ?? nextCannotRun.get(row.hash)
        if (known) {
          nextCannotRun.set(row.hash, known)
          problem = `${operationLabel(row)}: ${known}`
          break
        }
        added += pinned.get(row.body) ?? row.weight
        fresh.push(row)
      }
      if (!problem && weight + added > bound) {
        problem = `its operations would take what the served ones weigh in memory to ${weight + added} bytes, over ${bound} ` +
          `(DEPLOYMENTS_MAX_BYTES${bound < options.maxBytes ? ', or a quarter of this instance\'s heap' : ''})`
      }
      // Planned and compiled (in slices) only once the deployment fits: all of its operations, or none served.
      const pinnedHere: string[] = []
      for (const row of problem ? [] : fresh) {
        let pinnedWeight = pinned.get(row.body)
        if (pinnedWeight === undefined) {
          await pause()
          try {
            pinnedWeight = options.pin(row.body)
          } catch (err) {
            const nested = (err as { errors?: readonly { message: string }[] }).errors
            const why = nested?.length ? nested.map((e) => e.message).join('; ') : (err as Error).message
            nextCannotRun.set(row.hash, why)
            problem = `${operationLabel(row)}: ${why} (the schema or the limits changed?)`
            break
          }
        }
        nextPinned.set(row.body, pinnedWeight)
        pinnedHere.push(row.body)
      }
      if (problem) {
        for (const text of pinnedHere) nextPinned.delete(text)
        nextRefused.set(deployment, problem)
        continue
      }
      for (const text of pinnedHere) weight += nextPinned.get(text)!
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
          gone.set(id, [...(gone.get(id) ?? []), deployment])
        }
      }
    }
    for (const text of pinned.keys()) if (!nextPinned.has(text)) options.unpin(text)
    for (const [deployment, why] of nextRefused) {
      if (refused.get(deployment) !== why) log.error({ deployment, reason: why }, 'app deployment not served by this instance')
    }
    for (const deployment of refused.keys()) {
      if (!nextRefused.has(deployment) && active.some(([key]) => key === deployment)) log.info({ deployment }, 'app deployment now served')
    }
    byId = next
    retired = gone
    pinned = nextPinned
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
        pending.set(key, now
          ? { ...now, requests: now.requests + usage.requests, lastUsedAt: Math.max(now.lastUsedAt, usage.lastUsedAt) }
          : usage)
      }
      log.warn({ err: (err as Error).message }, 'app deployment usage not written yet: kept for the next write')
    }
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
      const deployment = named && served.deployments.includes(named) ? named : served.deployments[0]!
      const key = `${deployment} ${operation.id}`
      const at = Date.now()
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

  return {
    registered,
    refresh,
    flush,
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
      timer = setInterval(() => { void flush() }, options.usageFlushMs).unref()
    },
    async stop (): Promise<void> {
      stopped = true
      if (timer) clearInterval(timer)
      if (heartbeat) clearInterval(heartbeat)
      await store.forgetServiceInstance(instance).catch(() => {})
      if (retryTimer) clearTimeout(retryTimer)
      if (staleTimer) clearTimeout(staleTimer)
      await watch?.stop()
      await flush()
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
    takeUsage (): DeploymentRequests[] {
      const taken = unscraped
      unscraped = new Map()
      return activeDeployments.map((deployment) => {
        const requests = taken.get(deployment) ?? 0
        const [name, version] = deployment.split(' ') as [string, string]
        return { name, version, requests }
      })
    },
    get stats () {
      const operations = new Set(byId.values()).size
      return { operations, retired: retired.size, weight: servedWeight, refused: refused.size }
    }
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
  /** What the running instances run (this one among them), or this instance's own when none has said. */
  const targets = async (): Promise<CheckTarget[]> => {
    const running = await runningTargets(store)
    if (running.length > 0) return running
    return [{ schema: options.schema(), limits: options.limits, maxBytes: options.maxBytes, label: null }]
  }
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
    async check (caller: Caller | null, manifest: unknown) {
      administrator(caller)
      const { operations, problems } = await checkAgainst(manifest, await targets())
      if (problems.length > 0) throw new AppError('BAD_USER_INPUT', `The manifest does not check: ${problems.join('; ')}`, { problems })
      return { operations: operations.length }
    },
    async publish (caller: Caller | null, name: string, version: string, manifest: unknown) {
      const admin = administrator(caller)
      const published = await publishManifest(store, {
        name,
        version,
        manifest,
        schema: options.schema(),
        limits: options.limits,
        maxBytes: options.maxBytes,
        targets: await targets()
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
