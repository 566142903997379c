// npm run bench [-- --duration 10 --connections 50 --warmup 3 --only users-list --smoke --check --profile]
//
// Starts the real service (production profile, a seeded store) in its own process for each scenario,
// exactly as `npm start` does, and drives it with autocannon from this process: a warm-up round, then a
// measured round. The baselines (`limit`, `rest-*`: bench/baseline-server.ts) are started and measured
// the same way in the same run, and every scenario is reported as a ratio to them. See bench/README.md.
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import autocannon from 'autocannon'
import { mintToken } from '../app/auth/mint-token.ts'
import { openStore } from '../app/store/index.ts'
import { seed } from '../app/store/sample-data.ts'
import { runFanout, fanoutUnavailable } from './fanout.ts'
import { REPO_ROOT, startServer, type ServerProcess } from './processes.ts'
import { checkThresholds, markdownTable, previousReport, svgChart, textTable, type Result, type RunReport, type Thresholds } from './report.ts'
import { baselineScenarios, restBaselineOf, serviceScenarios, USERS_LIST_QUERY, type BenchData, type HttpScenario, type RequestSpec, type Sample, type StoreKind } from './scenarios.ts'
import { createBenchPartner, discoverPersisted, discoverSoap, SOAP_PUBLIC_URL, soapScenario } from './transports.ts'

if (Number(process.versions.node.split('.')[0]) < 24) {
  console.error(`bench: run it with the project's Node 24 (npm run bench), not Node ${process.versions.node}`)
  process.exit(2)
}

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string' },
    connections: { type: 'string' },
    warmup: { type: 'string' },
    only: { type: 'string', multiple: true },
    smoke: { type: 'boolean', default: false },
    check: { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
    users: { type: 'string' },
    messages: { type: 'string' },
    subscribers: { type: 'string' },
    'fanout-messages': { type: 'string' },
    'log-level': { type: 'string' },
    'results-dir': { type: 'string' },
    help: { type: 'boolean', default: false }
  }
})

if (args.help) {
  console.log(readFileSync(new URL('./README.md', import.meta.url), 'utf8'))
  process.exit(0)
}

const smoke = args.smoke
const num = (value: string | undefined, fallback: number) => value === undefined ? fallback : Number(value)
const options = {
  durationSec: num(args.duration, smoke ? 1 : 10),
  warmupSec: num(args.warmup, smoke ? 0 : 3),
  connections: num(args.connections, smoke ? 4 : 50),
  users: num(args.users, smoke ? 1000 : 10000),
  messages: num(args.messages, smoke ? 5000 : 50000),
  subscribers: num(args.subscribers, smoke ? 20 : 1000),
  fanoutMessages: num(args['fanout-messages'], smoke ? 5 : 100),
  only: args.only ?? [],
  logLevel: args['log-level'] ?? null,
  profile: args.profile,
  postgres: Boolean(process.env.DATABASE_URL)
}
for (const [key, value] of Object.entries(options)) {
  if (typeof value === 'number' && !(Number.isFinite(value) && value >= 0)) {
    console.error(`bench: --${key} must be a non-negative number`)
    process.exit(2)
  }
}
if (options.users < 1000) {
  console.error('bench: --users must be at least 1000 (the scenarios rotate over them)')
  process.exit(2)
}

const resultsDir = args['results-dir'] ?? join(REPO_ROOT, 'bench/results')
const thresholds = JSON.parse(readFileSync(new URL('./thresholds.json', import.meta.url), 'utf8')).floors as Thresholds
const work = mkdtempSync(join(tmpdir(), 'bench-'))
const startedAt = new Date()
const log = (line: string) => console.log(line)
const elapsed = () => `${((Date.now() - startedAt.getTime()) / 1000).toFixed(0)}s`

// Every process shares one configuration: production profile, limits the benchmark cannot reach.
const jwtSecret = randomBytes(32).toString('hex')
const baseEnv: Record<string, string> = {
  NODE_ENV: 'production',
  JWT_SECRET: jwtSecret,
  PARTNER_SECRET_KEY: randomBytes(32).toString('hex'),
  SOAP_PUBLIC_URL,
  SQLITE_PATH: join(work, 'bench.db'),
  DEMO_DATA: 'false',
  // The ad-hoc POST scenarios need ad-hoc queries; production accepts persisted ones only by default.
  PERSISTED_ONLY: 'false',
  // The rate-limit pipeline still runs on every request; its budgets are just out of reach.
  RATE_LIMIT_REQUESTS: '1000000000',
  RATE_LIMIT_COST: '1000000000000',
  WS_MAX_CONNECTIONS_PER_CLIENT: '100000',
  // Load shedding (under-pressure) still samples and checks every request; a saturated benchmark must not trip it.
  PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '600000',
  ...(options.logLevel ? { LOG_LEVEL: options.logLevel } : {})
}
const pgSchema = `bench_${process.pid}_${Date.now()}`
const pgEnv: Record<string, string> = options.postgres
  ? { DATABASE_URL: process.env.DATABASE_URL!, DATABASE_SCHEMA: pgSchema, DATABASE_POOL_SIZE: process.env.DATABASE_POOL_SIZE ?? '10' }
  : {}
const envFor = (store: StoreKind) => store === 'postgres' ? { ...baseEnv, ...pgEnv } : baseEnv
const ROOMS = ['general', 'random', 'support', 'releases', 'design'] // the rooms of app/store/sample-data.ts

async function seedStore (store: StoreKind): Promise<{ ids: string[]; adminId: string; partner: { login: string; password: string } | null }> {
  const started = Date.now()
  // Explicit settings, not loadConfig: env-schema would merge this shell's environment (a DATABASE_URL there
  // must not turn the sqlite seed into a PostgreSQL one).
  const db = await openStore(store === 'postgres'
    ? { databaseUrl: pgEnv.DATABASE_URL!, databaseSchema: pgSchema, databasePoolSize: 4, sqlitePath: '' }
    : { databaseUrl: null, databaseSchema: null, databasePoolSize: 1, sqlitePath: baseEnv.SQLITE_PATH! })
  try {
    const ids = await seed(db, options.users, options.messages, 20260101)
    const [admin] = await db.insertUsers([{ name: 'Bench Admin', email: `bench.admin.${process.pid}@example.com`, role: 'ADMIN' }])
    const partner = store === 'sqlite' ? await createBenchPartner(db, baseEnv.PARTNER_SECRET_KEY!) : null
    log(`seeded ${store}: ${options.users} users, ${options.messages} messages in ${Date.now() - started} ms`)
    return { ids, adminId: admin!.id, partner }
  } finally {
    await db.close()
  }
}

async function dropPostgresSchema (): Promise<void> {
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL })
  await client.connect()
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`)
  } finally {
    await client.end()
  }
}

async function send (url: string, request: RequestSpec): Promise<Sample> {
  const response = await fetch(url + request.path, { method: request.method, headers: request.headers, body: request.body, signal: AbortSignal.timeout(10_000) })
  return { status: response.status, contentType: response.headers.get('content-type') ?? '', body: await response.text() }
}

/** Sends `count` requests of the scenario one by one and checks each response in full. */
async function verifySamples (url: string, scenario: HttpScenario, count: number): Promise<string | null> {
  for (let i = 0; i < count; i++) {
    const request = scenario.next()
    const problem = scenario.verify(request, await send(url, request))
    if (problem) return `${request.method} ${request.path.slice(0, 80)}: ${problem}`
  }
  return null
}

interface Round {
  requests: number
  rps: number
  p50: number
  p99: number
  non2xx: number
  errors: number
  mismatches: number
}

function round (url: string, scenario: HttpScenario, durationSec: number, label: string): Promise<Round> {
  return new Promise((resolve, reject) => {
    const first = scenario.next()
    const instance = autocannon({
      url,
      connections: options.connections,
      duration: durationSec,
      timeout: 10,
      requests: [{ ...first, setupRequest: (request) => ({ ...request, ...scenario.next() }) }],
      verifyBody: scenario.quickCheck
    }, (err, result) => {
      if (err) return reject(err)
      const requests = result.requests.total as number
      resolve({
        requests,
        rps: requests / (result.duration || durationSec),
        p50: result.latency.p50,
        p99: result.latency.p99,
        non2xx: result.non2xx,
        errors: result.errors + result.timeouts,
        mismatches: result.mismatches
      })
    })
    // Long rounds show progress every 5 s.
    let seconds = 0
    let counted = 0
    instance.on('response', () => { counted++ })
    instance.on('tick', () => {
      seconds++
      if (durationSec >= 10 && seconds % 5 === 0 && seconds < durationSec) {
        log(`    ${label} ${seconds}/${durationSec} s: ${Math.round(counted / seconds)} req/s`)
      }
    })
  })
}

function startProcess (scenario: { name: string; target: 'service' | 'baseline'; store: StoreKind; env?: Record<string, string> }): Promise<ServerProcess> {
  const profileArgs = options.profile && scenario.target === 'service'
    ? ['--cpu-prof', `--cpu-prof-dir=${join(REPO_ROOT, 'bench/profiles')}`, `--cpu-prof-name=${scenario.name}-${startedAt.toISOString().replace(/[:.]/g, '-')}.cpuprofile`]
    : []
  return startServer({
    name: scenario.name,
    script: scenario.target === 'service' ? 'app/server.ts' : 'bench/baseline-server.ts',
    env: { ...envFor(scenario.store), ...scenario.env, LIMIT_BODY_FILE: join(work, 'list-body.json') },
    logDir: work,
    nodeArgs: profileArgs
  })
}

async function runHttp (scenario: HttpScenario, data: BenchData): Promise<Result> {
  const result: Result = { name: scenario.name, kind: scenario.target === 'service' ? 'scenario' : 'baseline', store: scenario.store, description: scenario.description, status: 'ok', restBaseline: restBaselineOf(scenario) }
  const unavailable = scenario.unavailable?.()
  if (unavailable) return { ...result, status: 'skipped', reason: unavailable }
  void data
  const server = await startProcess(scenario)
  try {
    const problem = await verifySamples(server.url, scenario, 3)
    if (problem) return { ...result, status: 'failed', reason: `wrong response before the load: ${problem}` }
    if (options.warmupSec > 0) {
      log(`    warm-up ${options.warmupSec} s`)
      await round(server.url, scenario, options.warmupSec, 'warm-up')
    }
    log(`    measuring ${options.durationSec} s × ${options.connections} connections`)
    const measured = await round(server.url, scenario, options.durationSec, 'measured')
    const after = await verifySamples(server.url, scenario, 1)
    Object.assign(result, {
      connections: options.connections,
      durationSec: options.durationSec,
      requests: measured.requests,
      rps: measured.rps,
      latencyMs: { p50: measured.p50, p99: measured.p99 },
      non2xx: measured.non2xx,
      errors: measured.errors + measured.mismatches,
      peakRssBytes: server.peakRssBytes()
    })
    const failures: string[] = []
    if (measured.non2xx > 0) failures.push(`${measured.non2xx} non-2xx responses`)
    if (measured.errors > 0) failures.push(`${measured.errors} connection errors or timeouts`)
    if (measured.mismatches > 0) failures.push(`${measured.mismatches} responses with errors or without data`)
    if (measured.requests === 0) failures.push('no response at all')
    if (after) failures.push(`wrong response after the load: ${after}`)
    if (failures.length > 0) Object.assign(result, { status: 'failed', reason: failures.join('; ') })
    return result
  } finally {
    await server.stop()
  }
}

function selected (name: string): boolean {
  return options.only.length === 0 || options.only.includes(name)
}

async function main (): Promise<number> {
  log(`bench: ${smoke ? 'SMOKE ' : ''}${options.durationSec} s measured + ${options.warmupSec} s warm-up per round, ${options.connections} connections; ${cpus().length} CPUs, Node ${process.versions.node}`)
  const seeded = await seedStore('sqlite')
  const jwt = { algorithms: ['HS256'], secret: jwtSecret, publicKey: null, privateKey: null, issuer: null, audience: null, clockToleranceSec: 5 }
  const data: BenchData = {
    users: seeded.ids.map((id) => ({ id, token: mintToken(jwt, id, 'USER') })),
    adminToken: mintToken(jwt, seeded.adminId, 'ADMIN'),
    rooms: ROOMS,
    runId: `${process.pid}${Date.now().toString(36)}`
  }

  let soapUnavailable: string | null = null
  // Probe: the users-list response becomes the `limit` route's bytes; the optional transports are discovered.
  const probe = await startProcess({ name: 'probe', target: 'service', store: 'sqlite' })
  try {
    const sample = await send(probe.url, { method: 'POST', path: '/graphql', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query: USERS_LIST_QUERY }) })
    if (sample.status !== 200 || !sample.body.startsWith('{"data":')) throw new Error(`the service answered the users-list probe with HTTP ${sample.status}: ${sample.body.slice(0, 300)}`)
    data.listBody = sample.body
    writeFileSync(join(work, 'list-body.json'), sample.body)
    data.persistedUserQueryId = await discoverPersisted(probe.url, data) ?? undefined
    soapUnavailable = await discoverSoap(probe.url, data, seeded.partner)
  } finally {
    await probe.stop()
  }

  const [limit, restList, restUser, restMessages, restCreate] = baselineScenarios(data, 'sqlite')
  const [usersList, userById, persistedGet, messagesAuthors, createUser] = serviceScenarios(data, 'sqlite')
  const soapGetUser = soapScenario(data, soapUnavailable)
  // Each scenario right after the `rest` route of its shape, so drift between them stays small.
  const plan: (HttpScenario | 'subscription-fanout' | 'postgres')[] = [
    limit!, restList!, usersList!,
    restUser!, userById!, persistedGet!, soapGetUser,
    restMessages!, messagesAuthors!,
    restCreate!, createUser!,
    'subscription-fanout',
    'postgres'
  ]
  const wanted = new Set<string>()
  const all = [...baselineScenarios(data, 'sqlite'), ...serviceScenarios(data, 'sqlite'), soapGetUser]
  for (const s of all) {
    if (s.target === 'service' && selected(s.name)) {
      wanted.add(s.name)
      wanted.add(restBaselineOf(s)!)
      wanted.add('limit')
    }
  }
  if (selected('subscription-fanout')) wanted.add('subscription-fanout')
  if (selected('users-list-postgres') && options.postgres) wanted.add('postgres').add('limit')
  if (options.only.length > 0 && wanted.size === 0) {
    console.error(`bench: no scenario named ${options.only.join(', ')}`)
    return 2
  }

  const results: Result[] = []
  const steps = plan.filter((p) => wanted.has(typeof p === 'string' ? p : p.name))
  for (const [i, step] of steps.entries()) {
    const name = typeof step === 'string' ? (step === 'postgres' ? 'users-list-postgres (with rest-list-postgres)' : step) : step.name
    log(`[${i + 1}/${steps.length}] ${name} (${elapsed()})`)
    try {
      if (step === 'subscription-fanout') {
        results.push(await fanoutStep(data))
      } else if (step === 'postgres') {
        await seedStore('postgres')
        const [restListPg] = baselineScenarios(data, 'postgres')
        const [usersListPg] = serviceScenarios(data, 'postgres')
        for (const s of [restListPg!, usersListPg!]) {
          log(`    ${s.name}`)
          results.push(await guarded(s, () => runHttp(s, data)))
        }
      } else {
        results.push(await guarded(step, () => runHttp(step, data)))
      }
    } catch (err) {
      results.push({ name, kind: 'scenario', store: 'sqlite', description: '', status: 'failed', reason: (err as Error).message.split('\n')[0]! })
    }
    const last = results.at(-1)!
    log(`    → ${last.status}${last.rps !== undefined ? `: ${Math.round(last.rps)} ${last.name === 'subscription-fanout' ? 'deliveries' : 'req'}/s` : ''}${last.reason ? ` (${last.reason})` : ''}`)
  }
  if (!options.postgres && selected('users-list-postgres')) {
    results.push({ name: 'users-list-postgres', kind: 'scenario', store: 'postgres', description: 'users-list against PostgreSQL', status: 'skipped', reason: 'DATABASE_URL is not set' })
  }

  // Ratios, from figures measured in this run.
  const byName = new Map(results.map((r) => [r.name, r]))
  const limitRps = byName.get('limit')?.status === 'ok' ? byName.get('limit')!.rps! : null
  for (const r of results) {
    if (r.rps === undefined || r.name === 'subscription-fanout') continue
    r.ratioToLimit = limitRps ? r.rps / limitRps : null
    const rest = r.restBaseline ? byName.get(r.restBaseline) : undefined
    if (r.kind === 'scenario') r.ratioToRest = rest?.status === 'ok' ? r.rps / rest.rps! : null
  }

  const report: RunReport = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    command: `npm run ${args.check ? 'bench:check' : 'bench'}${process.argv.length > 2 ? ` -- ${process.argv.slice(2).filter((a) => a !== '--check').join(' ')}` : ''}`.trim().replace(/ --$/, ''),
    commit: gitCommit(),
    smoke,
    machine: { cpus: cpus().length, cpuModel: cpus()[0]?.model ?? 'unknown', node: process.versions.node, platform: `${process.platform}-${process.arch}` },
    options: { ...options },
    notes: [
      'Production profile (NODE_ENV=production) with PERSISTED_ONLY=false for the ad-hoc POST scenarios.',
      'Rate limiting runs on every request, with budgets set out of reach (RATE_LIMIT_REQUESTS=1e9, RATE_LIMIT_COST=1e12); so does load shedding (PRESSURE_MAX_EVENT_LOOP_DELAY_MS=600000).',
      'Service and baselines log at the same level (the production default unless --log-level), to a file.',
      'Ratios: req/s of the scenario over req/s of its `rest` route (same store reads, no GraphQL) and of `limit` (prebuilt bytes), measured in this run.'
    ],
    results
  }

  log('')
  log(textTable(report))
  log('')
  for (const note of report.notes) log(`note: ${note}`)

  if (!smoke || args['results-dir']) {
    mkdirSync(resultsDir, { recursive: true })
    const stamp = report.startedAt.replace(/[:.]/g, '-')
    const previous = previousReport(resultsDir, `${stamp}.json`)
    writeFileSync(join(resultsDir, `${stamp}.json`), JSON.stringify(report, null, 2) + '\n')
    writeFileSync(join(resultsDir, `${stamp}.svg`), svgChart(report, previous, thresholds))
    copyFileSync(join(resultsDir, `${stamp}.svg`), join(resultsDir, 'latest.svg'))
    writeFileSync(join(resultsDir, 'latest.md'), `Command: \`${report.command}\` (${report.startedAt}, commit ${report.commit}, ${report.machine.cpus} × ${report.machine.cpuModel}, Node ${report.machine.node})\n\n${markdownTable(report)}\n`)
    log(`written: ${join(resultsDir, `${stamp}.json`)}, .svg (compared with ${previous ? previous.startedAt : 'no previous result'})`)
  }

  let exitCode = results.some((r) => r.status === 'failed') ? 1 : 0
  if (args.check) {
    const outcome = checkThresholds(report, thresholds)
    log('')
    for (const line of outcome.lines) log(line)
    log(outcome.ok ? 'bench:check passed' : 'bench:check FAILED')
    if (!outcome.ok) exitCode = 1
  }
  log(`done in ${elapsed()}`)
  return exitCode
}

async function guarded (scenario: HttpScenario, fn: () => Promise<Result>): Promise<Result> {
  try {
    return await fn()
  } catch (err) {
    return { name: scenario.name, kind: scenario.target === 'service' ? 'scenario' : 'baseline', store: scenario.store, description: scenario.description, status: 'failed', reason: (err as Error).message.split('\n').slice(0, 3).join(' | ') }
  }
}

async function fanoutStep (data: BenchData): Promise<Result> {
  const base: Result = { name: 'subscription-fanout', kind: 'scenario', store: 'sqlite', description: `${options.subscribers} WebSocket subscribers of one room, ${options.fanoutMessages} messages posted`, status: 'ok' }
  const server = await startProcess({ name: 'subscription-fanout', target: 'service', store: 'sqlite' })
  try {
    const unavailable = await fanoutUnavailable(server.url, data)
    if (unavailable) return { ...base, status: 'skipped', reason: unavailable }
    const outcome = await runFanout(server.url, data, { subscribers: options.subscribers, messages: options.fanoutMessages, log })
    return { ...base, ...outcome, peakRssBytes: server.peakRssBytes() }
  } finally {
    await server.stop()
  }
}

function gitCommit (): string {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim()
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no', '--', 'app', 'plugins', 'routes'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim()
    return dirty ? `${commit}+changes` : commit
  } catch {
    return 'unknown'
  }
}

let code = 1
try {
  code = await main()
} catch (err) {
  console.error(`bench: ${(err as Error).stack ?? err}`)
} finally {
  if (options.postgres) await dropPostgresSchema().catch((err) => console.error(`bench: could not drop schema ${pgSchema}: ${err.message}`))
  rmSync(work, { recursive: true, force: true })
}
process.exit(code)
