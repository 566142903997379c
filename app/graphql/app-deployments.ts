// App deployments: a mobile app's name and version with the persisted operations it ships, published
// to the store (node:sqlite or PostgreSQL) by a release pipeline (`npm run app`, or the ADMIN HTTP
// verbs), then served by every instance without a restart, until retired. Apollo's persisted query
// lists and Hive's app deployments, inside the service.
//
// - `checkManifest`: a manifest (this service's own format, Apollo's, Relay's) read and checked for
//   this service: every id the hash of its text, one operation per text, valid against the schema and
//   within the limits (depth, aliases, tokens, size, and a cost with its defaults some caller can pay).
// - `publishManifest` / `retireDeployment` / `listDeployments`: the verbs, over the store.
// - `runningTargets` / `checkAgainst`: what a publish is checked against: the profiles (schema, limits,
//   bound) the running instances said they run, not the publisher's checkout.
// - `deploymentVerbs`: the verbs over HTTP for an administrator.
// What an instance serves of them is the catalog's (deployment-catalog.ts).
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { basename, extname } from 'node:path'
import { buildSchema, type GraphQLSchema } from 'graphql'
import type { OperationLimits } from './operation-limits.ts'
import type { Caller } from '../core/domain/context.ts'
import { AppError, forbidden, unauthenticated } from '../core/errors.ts'
import type { DeployedOperation, Deployment, Store } from '../core/store/types.ts'
import { makePlan } from './plan.ts'
import type { EngineLogger } from './dependencies.ts'
import { readManifest, type ManifestEntry } from './persisted-manifest.ts'

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

type Limits = OperationLimits

/** How problems name an operation: its type, name and the start of its hash. */
export const operationLabel = (op: { type: string; name: string | null; hash: string }) =>
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
    return { problem: whyRefused(err) }
  }
}

/** Why planning refused a text, in words: every validation error of it, or the error's own message. */
export function whyRefused (err: unknown): string {
  const nested = (err as { errors?: readonly { message: string }[] }).errors
  return nested?.length ? nested.map((e) => e.message).join('; ') : (err as Error).message
}

/** Work done in slices of this many ms, the event loop served between them: a large manifest never stalls requests. */
const SLICE_MS = 10

/** Returns a function to await between steps of a long synchronous task: it yields once a slice is used up. */
export function slices (): () => Promise<void> | undefined {
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
// The verbs over HTTP

export interface VerbOptions {
  store: Store
  schema (): GraphQLSchema
  limits: Limits
  maxBytes: number
  /** What serves the deployments on this instance: reloaded before a publish or a retirement answers. */
  catalog: { refresh (): Promise<void> }
  log: EngineLogger
}

/**
 * The verbs of `npm run app` for release pipelines that cannot reach the database (the route serves them
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
    /** Refuses anyone but an administrator: the route asks before it reads a body (a manifest can be large). */
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
