// npm run bench [-- --duration 10 --connections 50 --warmup 3 --warmup-requests 25000 --only users-list
//                   --smoke --check --profile]
//
// Starts the real service (production profile, a seeded store) in its own process for each scenario,
// exactly as `npm start` does, and drives it with autocannon from this process: a warm-up round, then a
// measured round. The baselines (`limit`, `rest-*`: bench/baseline-server.ts) are started and measured
// the same way in the same run, and every scenario is reported as a ratio to them. See bench/README.md.
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { readCommandLine } from '../app/core/command-line.ts'
import { mintToken } from '../cli/mint-token.ts'
import { openStore } from '../app/core/store/index.ts'
import { seed } from '../app/core/store/sample-data.ts'
import { copySeed, deployedSettings, deployedUnavailable, removeDeployed } from './deployed.ts'
import { redisMeter, type CommandSample, type RedisMeter } from './redis-meter.ts'
import { runTarget } from './target.ts'
import { LB_ADDRESS, startLoadBalancer, type Instance } from '../test/cluster/harness.ts'
import { probeFanout, runFanout, type FanoutSelection } from './fanout.ts'
import { REPO_ROOT, serverCpu, startServer, type ServerProcess } from './processes.ts'
import {
  cacheMarkdownTable,
  cacheTextTable,
  deployedMarkdownTable,
  deployedTextTable,
  redisMarkdownTable,
  redisTextTable,
  soapMarkdownTable,
  soapTextTable,
  checkThresholds,
  type GuardedFloors,
  fanoutMarkdownTable,
  fanoutTextTable,
  markdownTable,
  median,
  previousReport,
  svgChart,
  textTable,
  type RedisUse,
  type Result,
  type RunReport,
  type Thresholds
} from './report.ts'
import {
  baselineScenarios,
  deployedTwin,
  guardedScenarios,
  peerRedisCachedScenarios,
  peerScenarios,
  postgresBaselines,
  restBaselineOf,
  serviceScenarios,
  USER_BY_ID_QUERY,
  USERS_LIST_QUERY,
  type BenchData,
  type HttpScenario,
  type RequestSpec,
  type Sample,
  type StoreKind
} from './scenarios.ts'
import {
  createBenchPartner,
  discoverPersisted,
  PERSISTED_MANIFEST,
  discoverSoap,
  makeSignerCertificate,
  SOAP_PUBLIC_URL,
  soapScenario,
  soapScenarios
} from './transports.ts'

if (Number(process.versions.node.split('.')[0]) < 24) {
  console.error(`bench: run it with the project's Node 24 (npm run bench), not Node ${process.versions.node}`)
  process.exit(2)
}

const BENCH_USAGE = `usage: npm run bench [-- --only ROW … --duration S --rounds N --connections N --smoke --check --profile]
       npm run bench -- --target URL [--only ROW … --duration S --connections N --timeout S]
The benchmark suite (every option and row: bench/README.md; --help prints it), or with --target the
read rows against a deployment it did not start (docs/operations.md#load-testing-a-deployment).`

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(`${BENCH_USAGE}\n\n${readFileSync(new URL('./README.md', import.meta.url), 'utf8')}`)
  process.exit(0)
}
const { values: args } = readCommandLine(BENCH_USAGE, {
  options: {
    duration: { type: 'string' },
    connections: { type: 'string' },
    warmup: { type: 'string' },
    'warmup-requests': { type: 'string' },
    rounds: { type: 'string' },
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
    target: { type: 'string' },
    timeout: { type: 'string' }
  }
})

const smoke = args.smoke
/** A deployment this run did not start (bench/target.ts): only its requests are sent, nothing is started. */
const target = args.target?.replace(/\/+$/, '') ?? null
const num = (value: string | undefined, fallback: number) => (value === undefined ? fallback : Number(value))
const options = {
  // A smoke's one round per row only has to show the row runs and answers correctly: half a second serves
  // hundreds of requests, and a smoke of every row, most of it spent starting servers, stays in CI's budget.
  durationSec: num(args.duration, smoke ? 0.5 : 10),
  // A smoke warms each row up only until it has served a few requests at its concurrency: a cold row's
  // first requests open its pools (PostgreSQL connections), which on a busy machine took longer than
  // the half-second round, and a round with no answer fails.
  warmupSec: num(args.warmup, smoke ? 0.1 : 2),
  // V8 optimises a request path after it has run it many times, not after some seconds: a slow machine
  // needs longer to get there (measured here: about 25000 requests before the service's cost per request
  // stops falling), so warm-up lasts until a row has served this many requests (or WARMUP_MAX_SEC). A
  // deployment under --target is warm already: its warm-up is the --warmup seconds alone (bench/target.ts).
  warmupRequests: num(args['warmup-requests'], smoke ? 20 : 25000),
  rounds: Math.max(1, Math.round(num(args.rounds, smoke ? 1 : 10))),
  connections: num(args.connections, smoke ? 4 : 50),
  users: num(args.users, smoke ? 1000 : 10000),
  messages: num(args.messages, smoke ? 5000 : 50000),
  subscribers: num(args.subscribers, smoke ? 20 : 1000),
  fanoutMessages: num(args['fanout-messages'], smoke ? 5 : 100),
  only: args.only ?? [],
  logLevel: args['log-level'] ?? null,
  profile: args.profile
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
const thresholdsFile = JSON.parse(readFileSync(new URL('./thresholds.json', import.meta.url), 'utf8')) as {
  floors: Thresholds
} & GuardedFloors
const thresholds = thresholdsFile.floors
const work = mkdtempSync(join(tmpdir(), 'bench-'))
const startedAt = new Date()
const loadStart = loadavg()
const log = (line: string) => console.log(line)
const elapsed = () => `${((Date.now() - startedAt.getTime()) / 1000).toFixed(0)}s`

// Every process shares one configuration: production profile, limits the benchmark cannot reach.
const jwtSecret = randomBytes(32).toString('hex')
const baseEnv: Record<string, string> = {
  NODE_ENV: 'production',
  JWT_SECRET: jwtSecret,
  PARTNER_SECRET_KEY: randomBytes(32).toString('hex'),
  SOAP_PUBLIC_URL,
  SOAP_NAMESPACE_BASE: SOAP_PUBLIC_URL,
  // The deploy-time registry the persisted-get scenario reads (when the repository has one).
  ...(existsSync(PERSISTED_MANIFEST) ? { PERSISTED_MANIFEST } : {}),
  SQLITE_PATH: join(work, 'bench.db'),
  DEMO_DATA: 'false',
  // The ad-hoc POST scenarios need ad-hoc queries; production accepts persisted ones only by default.
  PERSISTED_ONLY: 'false',
  // The rate-limit pipeline still runs on every request; its budgets are just out of reach.
  RATE_LIMIT_REQUESTS: '1000000000',
  RATE_LIMIT_COST: '1000000000000',
  WS_MAX_CONNECTIONS_PER_CLIENT: '100000',
  // Anonymous fan-out subscribers all come from 127.0.0.1: one caller for the per-caller subscription cap.
  SUBSCRIPTIONS_MAX_PER_CALLER: '100000',
  // One load generator on loopback opens every connection (up to 10000 fan-out subscribers from 127.0.0.1, checked):
  // no per-address cap, and the WebSocket cap per client (address or user) out of reach.
  MAX_CONNECTIONS_PER_IP: '0',
  // Load shedding (under-pressure) still runs its hook on every request, with its event-loop-delay check off:
  // a saturated benchmark must not trip it (no finite threshold is out of reach: an interval without a delay
  // sample counts as an infinite delay).
  PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0',
  // The response cache is on by default, and the rows rotate over the seeded users: once each user has been
  // read, every later read would be a hit. The rows measure executing a request, so it is off here; the
  // cached rows (cached-persisted-get, cached-mixed) turn it on, and are compared with these.
  RESPONSE_CACHE: 'false',
  ...(options.logLevel ? { LOG_LEVEL: options.logLevel } : {})
}
// The deployed topology's PostgreSQL schema and Redis keys: this run's own (bench/deployed.ts).
const deployed = deployedSettings(`${process.pid}_${Date.now().toString(36)}`)
/** Why the deployed rows cannot run (PostgreSQL or Redis not answering), once the plan has asked. */
let deployedProblem: string | null = null
/** A row's store: the embedded file (copied per process), PostgreSQL alone, or PostgreSQL and Redis. */
const envFor = (store: StoreKind): Record<string, string> => {
  if (store === 'sqlite') return baseEnv
  const { REDIS_URL: _redis, REDIS_PREFIX: _prefix, ...postgres } = deployed.env
  return { ...baseEnv, ...(store === 'deployed' ? deployed.env : postgres) }
}
const ROOMS = ['general', 'random', 'support', 'releases', 'design'] // the rooms of app/core/store/sample-data.ts

interface Seeded {
  ids: string[]
  adminId: string
  partner: { login: string; password: string } | null
  /** The partner's key and certificate for the signed SOAP row. */
  signer: { key: string; cert: string } | null
}

async function seedStore (): Promise<Seeded> {
  const started = Date.now()
  // Explicit settings, not loadConfig: env-schema would merge this shell's environment (a DATABASE_URL there
  // must not turn the embedded seed into a PostgreSQL one).
  const db = await openStore({
    store: { databaseUrl: null, databaseSchema: null, databasePoolSize: 1, sqlitePath: baseEnv.SQLITE_PATH! }
  })
  try {
    const ids = await seed(db, options.users, options.messages, 20260101)
    const [admin] = await db.insertUsers([
      { name: 'Bench Admin', email: `bench.admin.${process.pid}@example.com`, role: 'ADMIN' }
    ])
    const signer = makeSignerCertificate(work)
    const partner = await createBenchPartner(db, baseEnv.PARTNER_SECRET_KEY!, signer?.cert)
    log(`seeded sqlite: ${options.users} users, ${options.messages} messages in ${Date.now() - started} ms`)
    return { ids, adminId: admin!.id, partner, signer }
  } finally {
    await db.close()
  }
}

/** The deployed rows' PostgreSQL: the embedded seed copied into this run's schema; why not, when it cannot be. */
async function seedDeployed (partner: { login: string } | null): Promise<string | null> {
  const unavailable = await deployedUnavailable(deployed)
  if (unavailable) return unavailable
  const started = Date.now()
  const store = await copySeed(baseEnv.SQLITE_PATH!, deployed, ROOMS, partner ? [partner.login] : [])
  await store.close()
  log(`copied the seed into PostgreSQL (schema ${deployed.schema}) in ${Date.now() - started} ms`)
  return null
}

/**
 * Cursors for the page-50 scenario: the service signs them, so the probe pages through the users and
 * keeps end cursors spread over the whole list (every 1/40th), each the start of a full page.
 */
async function pageCursors (url: string): Promise<string[]> {
  const stride = Math.max(1, Math.floor(options.users / 50 / 40))
  const cursors: string[] = []
  let after: string | null = null
  for (let page = 0; cursors.length < 40; page++) {
    const response: Response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        query:
          'query ($after: String) { usersConnection(first: 50, after: $after) { pageInfo { hasNextPage endCursor } } }',
        variables: { after }
      }),
      signal: AbortSignal.timeout(10_000)
    })
    type PageInfo = { hasNextPage: boolean; endCursor: string | null }
    const info: PageInfo | undefined = (
      (await response.json()) as {
        data?: { usersConnection?: { pageInfo: { hasNextPage: boolean; endCursor: string | null } } }
      }
    ).data?.usersConnection?.pageInfo
    // The last page has fewer than 50 users after it: stop before it.
    if (!info?.hasNextPage || !info.endCursor) break
    after = info.endCursor
    if (page % stride === 0) cursors.push(info.endCursor)
  }
  return cursors.slice(0, -1)
}

async function send (url: string, request: RequestSpec): Promise<Required<Sample>> {
  const response = await fetch(url + request.path, {
    method: request.method,
    headers: request.headers,
    body: request.body,
    signal: AbortSignal.timeout(10_000)
  })
  return {
    status: response.status,
    contentType: response.headers.get('content-type') ?? '',
    headers: Object.fromEntries(response.headers),
    body: await response.text()
  }
}

/**
 * Sends `count` requests of the scenario one by one and checks each response in full. A cached row's
 * request is sent twice and the second answer checked: the first may be the miss that fills its entry.
 */
async function verifySamples (url: string, scenario: HttpScenario, count: number): Promise<string | null> {
  for (let i = 0; i < count; i++) {
    const request = scenario.next()
    if (scenario.cacheOutcome) await send(url, request)
    const response = await send(url, request)
    // Every other row measures executing its request (RESPONSE_CACHE=false in baseEnv): a hit would not.
    if (!scenario.cacheOutcome && response.headers.age !== undefined) {
      return `${request.method} ${request.path.slice(0, 80)}: answered from a cache (Age: ${response.headers.age}), but this row measures execution`
    }
    const problem = scenario.verify(request, response)
    if (problem) return `${request.method} ${request.path.slice(0, 80)}: ${problem}`
  }
  return null
}

interface Round {
  requests: number
  seconds: number
  p50: number
  p99: number
  non2xx: number
  errors: number
  mismatches: number
  /** The first non-2xx or failing response, for the report. */
  firstBad: string | null
  /** CPU time the server process used during the round (null without /proc), and how much of it in the kernel. */
  cpuMicros: number | null
  systemMicros: number | null
  /**
   * CPU time this process (the runner: autocannon, its checks) used during the round: how busy the load
   * generator was.
   */
  clientCpuMicros: number
  /** A cached row's answers that came from its cache, and cached reads that did not (zero for other rows). */
  cacheHits: number
  cacheMisses: number
  /** A deployed row's: Redis's CPU time over the round and the commands it processed (script calls included). */
  redisCpuMicros: number | null
  redisCommands: number | null
}

/** The deployed rows' Redis, read around each of their rounds (bench/redis-meter.ts); null until one runs. */
let meter: RedisMeter | null = null
async function closeMeter (): Promise<void> {
  await meter?.close().catch(() => {})
}

async function round (server: ServerProcess, scenario: HttpScenario, durationSec: number): Promise<Round> {
  const redis = scenario.store === 'deployed' ? meter : null
  const redisBefore = await redis?.read()
  const measured = await loadRound(server, scenario, durationSec)
  if (!redis || !redisBefore) return measured
  const spent = redis.spent(redisBefore, await redis.read())
  return { ...measured, redisCpuMicros: spent.cpuMicros, redisCommands: spent.commands }
}

function loadRound (server: ServerProcess, scenario: HttpScenario, durationSec: number): Promise<Round> {
  const url = server.url
  scenario.beforeRound?.()
  const cpuBefore = server.cpuSplitMicros()
  const clientBefore = process.cpuUsage()
  return new Promise((resolve, reject) => {
    const first = scenario.next()
    let firstBad: string | null = null
    let cacheHits = 0
    let cacheMisses = 0
    const cacheOutcome = scenario.cacheOutcome
    autocannon(
      {
        url,
        connections: options.connections,
        duration: durationSec,
        timeout: 10,
        requests: [
          {
            ...first,
            setupRequest: (request) => ({ ...request, ...scenario.next() }),
            onResponse: (status, body, _context, headers) => {
              if (status >= 300 && firstBad === null) firstBad = `HTTP ${status} ${body.slice(0, 200)}`
              const outcome = cacheOutcome?.(headers, body)
              if (outcome === 'hit') cacheHits++
              else if (outcome === 'miss') cacheMisses++
            }
          }
        ],
        verifyBody: (body) => {
          if (scenario.quickCheck(body)) return true
          firstBad ??= body.slice(0, 200)
          return false
        }
      },
      (err, result) => {
        if (err) return reject(err)
        const cpuAfter = server.cpuSplitMicros()
        const client = process.cpuUsage(clientBefore)
        const measured = cpuBefore !== null && cpuAfter !== null
        resolve({
          clientCpuMicros: client.user + client.system,
          cpuMicros: measured ? cpuAfter.user + cpuAfter.system - cpuBefore.user - cpuBefore.system : null,
          systemMicros: measured ? cpuAfter.system - cpuBefore.system : null,
          requests: result.requests.total,
          seconds: result.duration || durationSec,
          p50: result.latency.p50,
          p99: result.latency.p99,
          non2xx: result.non2xx,
          errors: result.errors + result.timeouts,
          mismatches: result.mismatches,
          firstBad,
          cacheHits,
          cacheMisses,
          redisCpuMicros: null,
          redisCommands: null
        })
      }
    )
  })
}

/** Requests of a deployed row watched with MONITOR, to split the commands it sends from its scripts' calls. */
const REDIS_SAMPLE_REQUESTS = 400

/** `count` of the scenario's requests, 8 at a time (a sample: not measured). */
function sendRequests (server: ServerProcess, scenario: HttpScenario, count: number): Promise<void> {
  const first = scenario.next()
  return new Promise((resolve, reject) => {
    autocannon({
      url: server.url,
      connections: 8,
      amount: count,
      timeout: 10,
      requests: [{ ...first, setupRequest: (request) => ({ ...request, ...scenario.next() }) }]
    }, (err) => (err ? reject(err) : resolve()))
  })
}

/** What a deployed row cost Redis per request over its measured rounds, and what the sample saw. */
function redisUse (rounds: Round[], requests: number, sample: CommandSample | undefined): RedisUse | null {
  if (requests === 0 || rounds.some((r) => r.redisCpuMicros === null)) return null
  const cpu = rounds.reduce((n, r) => n + r.redisCpuMicros!, 0) / requests
  return {
    cpuMicrosPerRequest: cpu,
    callsPerRequest: rounds.reduce((n, r) => n + r.redisCommands!, 0) / requests,
    commandsPerRequest: sample?.topLevelPerRequest ?? null,
    scriptCallsPerRequest: sample?.scriptCallsPerRequest ?? null,
    commandsByName: sample?.byName ?? {},
    // One Redis core's worth of such requests a second, for the whole fleet.
    ceilingRps: cpu > 0 ? 1e6 / cpu : null
  }
}

const WARMUP_MAX_SEC = 30
/** A cached row under this share of hits over its measured rounds fails (see runGroup). */
const MIN_CACHE_HIT_RATIO = 0.5

/** Rounds of --warmup seconds until the row has served --warmup-requests requests; counted as one round. */
async function warmUp (server: ServerProcess, scenario: HttpScenario): Promise<Round> {
  const started = Date.now()
  let total = await round(server, scenario, options.warmupSec)
  while (
    total.requests < options.warmupRequests &&
    Date.now() - started < WARMUP_MAX_SEC * 1000 &&
    total.non2xx + total.errors + total.mismatches === 0
  ) {
    const r = await round(server, scenario, options.warmupSec)
    total = {
      ...total,
      requests: total.requests + r.requests,
      clientCpuMicros: total.clientCpuMicros + r.clientCpuMicros,
      seconds: total.seconds + r.seconds,
      non2xx: total.non2xx + r.non2xx,
      errors: total.errors + r.errors,
      mismatches: total.mismatches + r.mismatches,
      firstBad: total.firstBad ?? r.firstBad
    }
  }
  return total
}

async function startProcess (scenario: {
  name: string
  target: 'service' | 'baseline'
  store: StoreKind
  env?: Record<string, string>
  script?: string
}): Promise<ServerProcess> {
  const profileArgs = options.profile
    ? [
        '--cpu-prof',
        `--cpu-prof-dir=${join(REPO_ROOT, 'bench/profiles')}`,
        `--cpu-prof-name=${scenario.name}-${startedAt.toISOString().replace(/[:.]/g, '-')}.cpuprofile`
      ]
    : []
  // Each process on a copy of the seeded file of its own: a service holds its embedded file's instance
  // lock (one service per file, app/core/store/sqlite.ts), and the rows must not see each other's writes anyway.
  const ownFile = scenario.store === 'sqlite' ? join(work, `${scenario.name}-${++sqliteCopies}.db`) : null
  if (ownFile) copyFileSync(baseEnv.SQLITE_PATH!, ownFile)
  const server = await startServer({
    name: scenario.name,
    script: scenario.script ?? (scenario.target === 'service' ? 'app/server.ts' : 'bench/baseline-server.ts'),
    env: {
      ...envFor(scenario.store),
      ...scenario.env,
      ...(ownFile ? { SQLITE_PATH: ownFile } : {}),
      LIMIT_BODY_FILE: join(work, 'list-body.json')
    },
    logDir: work,
    nodeArgs: profileArgs
  })
  if (!ownFile) return server
  const stop = server.stop
  const files = ['', '-wal', '-shm', '.instance-lock'].map((suffix) => ownFile + suffix)
  return {
    ...server,
    async stop () {
      await stop()
      for (const file of files) rmSync(file, { force: true })
    }
  }
}
let sqliteCopies = 0

/**
 * The scenarios of one shape with their `rest` route and `limit`, measured in interleaved rounds
 * (limit, rest, scenario…, then again), so a machine whose speed drifts (other load, thermal) moves
 * all of them alike: each ratio is the median of the ratios of rounds measured back to back.
 */
interface Group {
  label: string
  store: StoreKind
  limit: HttpScenario
  rest: HttpScenario
  /**
   * The rest route's work behind the service's protections (bench/guarded-server.ts), in the shapes of the
   * scenarios.
   */
  guarded: HttpScenario[]
  scenarios: HttpScenario[]
}

interface Member {
  scenario: HttpScenario
  server: ServerProcess
  rounds: Round[]
  /** Counted in the warm-up too: an error is an error whenever it happens. */
  warmup: Round | null
  result: Result
}

function baseResult (scenario: HttpScenario): Result {
  return {
    name: scenario.name,
    kind: scenario.guardedRow
      ? 'guarded'
      : scenario.target === 'service' && !scenario.baselineRow ? 'scenario' : 'baseline',
    store: scenario.store,
    description: scenario.description,
    status: 'ok',
    restBaseline: restBaselineOf(scenario)
  }
}

async function runGroup (group: Group): Promise<Result[]> {
  const results: Result[] = []
  const members: Member[] = []
  let baseline: ServerProcess | null = null
  const servers: ServerProcess[] = []
  try {
    baseline = await startProcess({ name: `baseline-${group.label}`, target: 'baseline', store: group.store })
    servers.push(baseline)
    // The group's servers start together, a few at a time (nothing is measured before every one answers:
    // a smoke spends most of its time starting processes, and twenty starting at once on two CPUs missed
    // their 30 s), then each row's sampled answers are checked; members keep the order.
    const rows = [group.limit, group.rest, ...group.guarded, ...group.scenarios]
    const prepared = await inBatches(
      rows,
      STARTING_AT_ONCE,
      async (scenario): Promise<Member | Result> => {
        const result = baseResult(scenario)
        const unavailable = scenario.unavailable?.()
        if (unavailable) return { ...result, status: 'skipped', reason: unavailable }
        try {
          let server = baseline!
          if (scenario.target === 'service') {
            server = await startProcess(scenario)
            servers.push(server)
          }
          const problem = await verifySamples(server.url, scenario, 3)
          if (problem) return { ...result, status: 'failed', reason: `wrong response before the load: ${problem}` }
          return { scenario, server, rounds: [], warmup: null, result }
        } catch (err) {
          return { ...result, status: 'failed', reason: (err as Error).message.split('\n').slice(0, 3).join(' | ') }
        }
      }
    )
    for (const row of prepared) {
      if ('scenario' in row) members.push(row)
      else results.push(row)
    }
    if (options.warmupSec > 0) {
      log(
        `    warm-up each: at least ${options.warmupSec} s and ${options.warmupRequests} requests (at most ${WARMUP_MAX_SEC} s): ${members.map((m) => m.scenario.name).join(', ')}`
      )
      for (const m of members) m.warmup = await warmUp(m.server, m.scenario)
    }
    const slice = options.durationSec / options.rounds
    log(
      `    measuring ${options.rounds} interleaved rounds of ${slice.toFixed(1)} s × ${options.connections} connections`
    )
    for (let i = 0; i < options.rounds; i++) {
      for (const m of members) m.rounds.push(await round(m.server, m.scenario, slice))
      log(
        `    round ${i + 1}/${options.rounds} (${elapsed()}): ${members.map((m) => `${m.scenario.name} ${Math.round(m.rounds[i]!.requests / m.rounds[i]!.seconds)}`).join(', ')} req/s`
      )
    }
    const limit = members.find((m) => m.scenario === group.limit)
    const rest = members.find((m) => m.scenario === group.rest)
    const commandSamples = new Map<Member, CommandSample>()
    for (const m of members) {
      if (m.scenario.store !== 'deployed' || !meter) continue
      const requests = smoke ? 20 : REDIS_SAMPLE_REQUESTS
      try {
        commandSamples.set(m, await meter.sample(requests, () => sendRequests(m.server, m.scenario, requests)))
      } catch (err) {
        log(`    ${m.scenario.name}: no MONITOR sample of its commands (${(err as Error).message})`)
      }
    }
    for (const m of members) {
      const after = await verifySamples(m.server.url, m.scenario, 1)
      const all = m.warmup ? [...m.rounds, m.warmup] : m.rounds
      const sum = (key: 'non2xx' | 'errors' | 'mismatches') => all.reduce((n, r) => n + r[key], 0)
      const requests = m.rounds.reduce((n, r) => n + r.requests, 0)
      const seconds = m.rounds.reduce((n, r) => n + r.seconds, 0)
      const rpsOf = (r: Round) => r.requests / r.seconds
      const ratioTo = (other: Member | undefined) =>
        other && other.rounds.every((r) => r.requests > 0)
          ? median(m.rounds.map((r, i) => rpsOf(r) / rpsOf(other.rounds[i]!)))
          : null
      // The same comparison by the server's CPU time per request (the other's over this row's, so higher
      // is better like a throughput ratio): what a request costs the server, whatever paced the round.
      const cpuPerRequest = (r: Round) => (r.cpuMicros !== null && r.requests > 0 ? r.cpuMicros / r.requests : null)
      const cpuRatioTo = (other: Member | undefined) => {
        if (!other) return null
        const ratios = m.rounds.map((r, i) => {
          const mine = cpuPerRequest(r)
          const theirs = cpuPerRequest(other.rounds[i]!)
          return mine && theirs ? theirs / mine : null
        })
        return ratios.every((x) => x !== null) ? median(ratios as number[]) : null
      }
      const guarded = members.find((g) => g.scenario.name === m.scenario.guarded)
      const clientCpu = m.rounds.reduce((n, r) => n + r.clientCpuMicros, 0)
      const cacheHits = m.rounds.reduce((n, r) => n + r.cacheHits, 0)
      const cacheReads = cacheHits + m.rounds.reduce((n, r) => n + r.cacheMisses, 0)
      const cacheHitRatio = m.scenario.cacheOutcome && cacheReads > 0 ? cacheHits / cacheReads : null
      Object.assign(m.result, {
        connections: options.connections,
        durationSec: seconds,
        requests,
        rps: requests / seconds,
        latencyMs: { p50: median(m.rounds.map((r) => r.p50)), p99: median(m.rounds.map((r) => r.p99)) },
        non2xx: sum('non2xx'),
        errors: sum('errors') + sum('mismatches'),
        peakRssBytes: m.server.peakRssBytes(),
        cpuMicrosPerRequest:
          m.rounds.every((r) => r.cpuMicros !== null) && requests > 0
            ? m.rounds.reduce((n, r) => n + r.cpuMicros!, 0) / requests
            : null,
        ratioToLimit: ratioTo(limit),
        ...(m.scenario.target === 'service' ? { ratioToRest: ratioTo(rest), cpuRatioToRest: cpuRatioTo(rest) } : {}),
        ...(guarded
          ? {
              guardedBaseline: guarded.scenario.name,
              ratioToGuarded: ratioTo(guarded),
              cpuRatioToGuarded: cpuRatioTo(guarded)
            }
          : {}),
        // How busy each side was over the measured rounds (CPU seconds per second, 1 = one core saturated):
        // a row whose load generator is near 1 while its server is not measured the load generator.
        serverBusy: m.rounds.every((r) => r.cpuMicros !== null)
          ? m.rounds.reduce((n, r) => n + r.cpuMicros!, 0) / 1e6 / seconds
          : null,
        clientBusy: clientCpu / 1e6 / seconds,
        clientCpuMicrosPerRequest: requests > 0 ? clientCpu / requests : null,
        // The kernel's share of the server's CPU time (sockets, mostly): a row whose share differs from its
        // baseline's moves against it with what a system call costs on the machine.
        serverSystemShare: m.rounds.every((r) => r.systemMicros !== null && r.cpuMicros)
          ? m.rounds.reduce((n, r) => n + r.systemMicros!, 0) / m.rounds.reduce((n, r) => n + r.cpuMicros!, 0)
          : null,
        ...(m.scenario.cacheOutcome ? { cacheHitRatio } : {}),
        ...(m.scenario.store === 'deployed' ? { redis: redisUse(m.rounds, requests, commandSamples.get(m)) } : {}),
        rounds: m.rounds.map(rpsOf),
        roundBusy: m.rounds.map((r) => ({
          server: r.cpuMicros === null ? null : r.cpuMicros / 1e6 / r.seconds,
          client: r.clientCpuMicros / 1e6 / r.seconds
        }))
      })
      const failures: string[] = []
      if (sum('non2xx') > 0) failures.push(`${sum('non2xx')} non-2xx responses`)
      if (sum('errors') > 0) failures.push(`${sum('errors')} connection errors or timeouts`)
      if (sum('mismatches') > 0) failures.push(`${sum('mismatches')} responses with errors or without data`)
      if (requests === 0) failures.push('no response at all')
      if (after) failures.push(`wrong response after the load: ${after}`)
      // A cached row whose reads mostly executed measured execution, not its cache (an entry bound below the
      // users rotated over, a cache that never matches). Not in a smoke: its one short round has no warm-up.
      if (!smoke && cacheHitRatio !== null && cacheHitRatio < MIN_CACHE_HIT_RATIO) {
        failures.push(`only ${(cacheHitRatio * 100).toFixed(1)}% of its reads were cache hits (at least ${MIN_CACHE_HIT_RATIO * 100}% expected)`)
      }
      const firstBad = all.find((r) => r.firstBad)?.firstBad
      if (firstBad) failures.push(`first: ${firstBad}`)
      if (failures.length > 0) {
        // The server's own warnings and errors say why (kept in the JSON result, the log file is temporary).
        const logged = m.server
          .logTail(2000)
          .split('\n')
          .filter((line) => /"level":[4-6]\d/.test(line))
          .slice(-5)
        Object.assign(m.result, {
          status: 'failed',
          reason: failures.join('; '),
          details: { ...m.result.details, serverLog: logged }
        })
      }
      results.push(m.result)
    }
  } finally {
    // At once, as they were started: each stop is a graceful close that waits for the process to exit.
    await Promise.all(servers.map((server) => server.stop()))
  }
  const order = [group.limit, group.rest, ...group.guarded, ...group.scenarios].map((s) => s.name)
  return results.sort((a, b) => order.indexOf(a.name) - order.indexOf(b.name))
}

/** How many of a group's servers start at a time. */
const STARTING_AT_ONCE = 6

/** `work` over `items`, at most `size` at a time; the results in the items' order. */
async function inBatches<T, R> (items: readonly T[], size: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(size, items.length) }, async () => {
    while (next < items.length) {
      const i = next++
      results[i] = await work(items[i]!)
    }
  }))
  return results
}

/** `limit` is measured in every group; its row sums them up. */
function mergeLimit (rows: Result[]): Result | null {
  const ok = rows.filter((r) => r.status === 'ok')
  if (rows.length === 0) return null
  if (ok.length < rows.length) return rows.find((r) => r.status !== 'ok')!
  const requests = ok.reduce((n, r) => n + r.requests!, 0)
  const seconds = ok.reduce((n, r) => n + r.durationSec!, 0)
  return {
    ...ok[0]!,
    requests,
    durationSec: seconds,
    rps: requests / seconds,
    latencyMs: { p50: median(ok.map((r) => r.latencyMs!.p50)), p99: median(ok.map((r) => r.latencyMs!.p99)) },
    non2xx: ok.reduce((n, r) => n + r.non2xx!, 0),
    errors: ok.reduce((n, r) => n + r.errors!, 0),
    peakRssBytes: Math.max(...ok.map((r) => r.peakRssBytes ?? 0)) || null,
    cpuMicrosPerRequest: ok.every((r) => r.cpuMicrosPerRequest != null)
      ? ok.reduce((n, r) => n + r.cpuMicrosPerRequest! * r.requests!, 0) / requests
      : null,
    ratioToLimit: 1,
    rounds: ok.flatMap((r) => r.rounds ?? [])
  }
}

function selected (name: string): boolean {
  return options.only.length === 0 || options.only.includes(name)
}

async function main (): Promise<number> {
  if (target !== null) {
    return runTarget(target, { ...options, timeoutSec: num(args.timeout, 2) }, {
      command: `npm run bench -- ${process.argv.slice(2).join(' ')}`,
      commit: gitCommit(),
      resultsDir: args['results-dir'] ? resultsDir : null
    })
  }
  log(
    `bench: ${smoke ? 'SMOKE ' : ''}${options.durationSec} s measured (${options.rounds} interleaved rounds) + warm-up per row (at least ${options.warmupSec} s and ${options.warmupRequests} requests), ${options.connections} connections; ${cpus().length} CPUs (${serverCpu === null ? 'processes not pinned' : `servers on CPU ${serverCpu}, load generator on the others`}), Node ${process.versions.node}, load average ${loadStart.map((n) => n.toFixed(2)).join(' ')}`
  )
  if (loadStart[0]! > cpus().length * 0.5) {
    log(
      `warning: this machine is busy (load average ${loadStart[0]!.toFixed(2)} on ${cpus().length} CPUs); absolute figures will be low and ratios noisier`
    )
  }
  const seeded = await seedStore()
  const jwt = {
    algorithms: ['HS256'],
    secret: jwtSecret,
    publicKey: null,
    privateKey: null,
    issuer: null,
    audience: null,
    clockToleranceSec: 5
  }
  const data: BenchData = {
    users: seeded.ids.map((id) => ({ id, token: mintToken(jwt, id, 'USER') })),
    adminToken: mintToken(jwt, seeded.adminId, 'ADMIN'),
    rooms: ROOMS,
    runId: `${process.pid}${Date.now().toString(36)}`,
    ...(seeded.signer ? { soapSigner: seeded.signer } : {})
  }

  let soapUnavailable: string | null = null
  // Probe: the users-list response becomes the `limit` route's bytes; the optional transports are discovered.
  const probe = await startProcess({ name: 'probe', target: 'service', store: 'sqlite' })
  try {
    const sample = await send(probe.url, {
      method: 'POST',
      path: '/graphql',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: USERS_LIST_QUERY })
    })
    if (sample.status !== 200 || !sample.body.startsWith('{"data":')) {
      throw new Error(
        `the service answered the users-list probe with HTTP ${sample.status}: ${sample.body.slice(0, 300)}`
      )
    }
    data.listBody = sample.body
    writeFileSync(join(work, 'list-body.json'), sample.body)
    // The prices the guarded rows pay: what the service charged these two requests.
    const user = data.users[0]!
    const userSample = await send(probe.url, {
      method: 'POST',
      path: '/graphql',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${user.token}` },
      body: JSON.stringify({ query: USER_BY_ID_QUERY, variables: { id: user.id } })
    })
    const priceOf = (body: string) =>
      (JSON.parse(body) as { extensions?: { cost?: { requested?: number } } }).extensions?.cost?.requested
    const [userCost, listCost] = [priceOf(userSample.body), priceOf(sample.body)]
    if (!userCost || !listCost) {
      throw new Error(
        `the service's answers carry no extensions.cost.requested (user-by-id: ${userSample.body.slice(0, 200)})`
      )
    }
    data.costs = { user: userCost, list: listCost }
    data.persistedUnavailable = (await discoverPersisted(probe.url, data)) ?? undefined
    data.pageCursors = await pageCursors(probe.url)
    soapUnavailable = await discoverSoap(probe.url, data, seeded.partner)
  } finally {
    await probe.stop()
  }

  const [limit, restList, restUser, restMessages, restCreate] = baselineScenarios(data)
  const [usersList, usersPage, userById, persistedGet, cachedPersistedGet, cachedMixed, messagesAuthors, createUser] =
    serviceScenarios(data)
  const peers = peerScenarios(data)
  const soap = soapScenarios(data, soapUnavailable)
  const [guardedList, guardedUserGet, guardedUser] = guardedScenarios(data)
  // The deployed topology (PostgreSQL and Redis): the plain routes on PostgreSQL, and the service's rows
  // again, each made anew (its own rotation over the users), beside their embedded twins in their groups.
  const [restListPostgres, restUserPostgres] = postgresBaselines(data)
  const twin = (scenario: HttpScenario) => deployedTwin(scenario, deployed.redisPrefix)
  const fresh = (name: string) => serviceScenarios(data).find((s) => s.name === name)!
  const deployedList = [restListPostgres!, twin(fresh('users-list'))]
  const deployedUser = [
    restUserPostgres!,
    ...['user-by-id', 'persisted-get', 'cached-persisted-get', 'cached-mixed'].map((name) => twin(fresh(name))),
    twin(soapScenario(data, soapUnavailable)),
    ...peerRedisCachedScenarios(data, deployed.redisPrefix)
  ]
  for (const scenario of [...deployedList, ...deployedUser]) {
    const own = scenario.unavailable
    scenario.unavailable = () => deployedProblem ?? own?.() ?? null
  }
  const groups: Step[] = [
    {
      label: 'list',
      store: 'sqlite',
      limit: limit!,
      rest: restList!,
      guarded: [guardedList!],
      scenarios: [usersList!, usersPage!, ...soap.list, ...peers.list, ...deployedList]
    },
    {
      label: 'user',
      store: 'sqlite',
      limit: limit!,
      rest: restUser!,
      guarded: [guardedUserGet!, guardedUser!],
      scenarios: [
        userById!,
        persistedGet!,
        cachedPersistedGet!,
        cachedMixed!,
        ...soap.user,
        ...peers.user,
        ...peers.cached,
        ...deployedUser
      ]
    },
    {
      label: 'messages',
      store: 'sqlite',
      limit: limit!,
      rest: restMessages!,
      guarded: [],
      scenarios: [messagesAuthors!]
    },
    { label: 'create', store: 'sqlite', limit: limit!, rest: restCreate!, guarded: [], scenarios: [createUser!] },
    'subscription-fanout',
    'deployed-cluster'
  ]
  const plan = groups.flatMap((g): Step[] => {
    if (g === 'subscription-fanout') return FANOUT_ROWS.some((row) => selected(row.name)) ? [g] : []
    if (g === 'deployed-cluster') return selected(CLUSTER_ROW) ? [g] : []
    const scenarios = g.scenarios.filter((s) => selected(s.name))
    // A scenario brings its rest route along, and its guarded row (or one named with --only).
    const guarded = g.guarded.filter((s) => selected(s.name) || scenarios.some((x) => x.guarded === s.name))
    return scenarios.length > 0 || guarded.length > 0 ? [{ ...g, guarded, scenarios }] : []
  })
  if (plan.length === 0) {
    console.error(`bench: no scenario named ${options.only.join(', ')}`)
    return 2
  }
  // PostgreSQL gets the embedded seed only when a row of the plan reads it.
  const readsPostgres = (step: Step) => step === 'deployed-cluster' || (step !== 'subscription-fanout' && step.scenarios.some((s) => s.store !== 'sqlite'))
  if (plan.some(readsPostgres)) {
    deployedProblem = await seedDeployed(seeded.partner)
    deployedSeeded = deployedProblem === null
    if (deployedProblem) log(`the deployed rows are skipped: ${deployedProblem}`)
    else meter = await redisMeter(deployed.redisUrl)
  }

  const results: Result[] = []
  const limits: Result[] = []
  for (const [i, step] of plan.entries()) {
    if (step === 'deployed-cluster') {
      log(`[${i + 1}/${plan.length}] ${CLUSTER_ROW} (${elapsed()})`)
      results.push(await clusterStep(data, results.find((r) => r.name === 'cached-persisted-get-deployed')))
    } else if (step === 'subscription-fanout') {
      log(
        `[${i + 1}/${plan.length}] ${FANOUT_ROWS.filter((row) => selected(row.name))
          .map((row) => `${row.name}, ${row.baseline}`)
          .join(', ')} (${elapsed()})`
      )
      results.push(...(await fanoutStep(data)))
    } else {
      log(
        `[${i + 1}/${plan.length}] ${[step.rest, ...step.guarded, ...step.scenarios].map((s) => s.name).join(', ')} (${elapsed()})`
      )
      let rows: Result[]
      try {
        rows = await runGroup(step)
      } catch (err) {
        rows = [step.rest, ...step.guarded, ...step.scenarios].map((s) => ({
          ...baseResult(s),
          status: 'failed' as const,
          reason: (err as Error).message.split('\n').slice(0, 3).join(' | ')
        }))
      }
      for (const row of rows) (row.name === 'limit' ? limits : results).push(row)
    }
    for (const r of results) {
      if (r.logged) continue
      r.logged = true
      log(
        `    → ${r.name}: ${r.status}${r.rps !== undefined ? `, ${Math.round(r.rps)} ${r.rssPerSubscriberBytes !== undefined ? 'deliveries' : 'req'}/s` : ''}${r.ratioToRest != null ? `, ${r.ratioToRest.toFixed(2)} × rest` : ''}${r.reason ? ` (${r.reason})` : ''}`
      )
    }
  }
  const mergedLimit = mergeLimit(limits)
  if (mergedLimit) results.unshift(mergedLimit)
  for (const r of results) delete r.logged

  const report: RunReport = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    command: `npm run ${args.check ? 'bench:check' : 'bench'}${
      process.argv.length > 2
        ? ` -- ${process.argv
            .slice(2)
            .filter((a) => a !== '--check')
            .join(' ')}`
        : ''
    }`
      .trim()
      .replace(/ --$/, ''),
    commit: gitCommit(),
    smoke,
    machine: {
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? 'unknown',
      node: process.versions.node,
      platform: `${process.platform}-${process.arch}`
    },
    options: { ...options },
    notes: [
      'Production profile (NODE_ENV=production) with PERSISTED_ONLY=false for the ad-hoc POST scenarios.',
      'Rate limiting runs on every request, with budgets set out of reach (RATE_LIMIT_REQUESTS=1e9, RATE_LIMIT_COST=1e12); load shedding runs with its event-loop-delay check off (PRESSURE_MAX_EVENT_LOOP_DELAY_MS=0).',
      'Service and baselines log at the same level (the production default unless --log-level), to a file.',
      'Ratios: req/s of the scenario over req/s of its `rest` route (same store reads, no GraphQL) and of `limit` (prebuilt bytes), each the median over rounds measured back to back (limit, rest, scenario…, repeated), so drift on a shared machine moves them alike.',
      'req/s: all measured rounds of a row; p50/p99: the median over its rounds. `limit` is measured with every group; its row sums them.',
      serverCpu === null
        ? 'Processes were not pinned to CPUs (no taskset, or one CPU).'
        : `Every server ran on CPU ${serverCpu} and the load generator on the others (taskset), so rounds compare like with like.`,
      'CPU µs/req: user + system CPU time of the server process over its measured rounds, per request (what a request costs; other load on the machine moves it far less than req/s).',
      "Guarded rows (bench/guarded-server.ts): the rest routes' work behind the service's own plugins (JWT, request and cost budgets, metrics, access log, request id, load shedding, CORS) and one chargeCost at the price the service charged the same request; × guarded compares a scenario with the guarded row of its transport shape. CPU × rest / CPU × guarded: the other row's server CPU µs/req over this row's, median over rounds.",
      'Response cache: off (RESPONSE_CACHE=false) in every service row but the cached ones (cached-persisted-get, cached-mixed), which measure its hits; the peers\' cached rows use their own caches. Hit ratio: the cached reads answered from the cache over the measured rounds, counted by this runner from each answer (the service\'s and Apollo\'s `age` header, Yoga\'s extensions.responseCache.hit).',
      'server busy / client busy: CPU seconds per second of the server process and of this runner (autocannon) over the measured rounds; a row whose client is near 1 while its server is not was paced by the load generator.',
      `Deployed rows (<row>-deployed): the service on PostgreSQL and Redis (as docker-compose.yml runs it), reading a copy of the embedded seed in a schema of this run (${deployed.schema}), each with Redis keys of its own; measured in the same groups as their embedded twins. rest-*-postgres: the plain routes on PostgreSQL. The peers' *-cached-user-get-deployed rows keep their response caches on Redis. ${CLUSTER_ROW}: two instances behind nginx (test:cluster's config), CPU per request for both instances together, throughput over one instance's; reported, not judged (instances, nginx, PostgreSQL, Redis and the load generator share the machine).`,
      "Fan-out: deliveries/s and p99 delivery latency of each fan-out row over those of its ws-broadcast row (a bare `ws` process writing prebuilt bytes the size of that row's `next` messages to the same graphql-ws clients), measured right after it in the same run; RSS/subscriber: the server's VmRSS once every subscriber is active minus before they connected, over the subscribers. Targets shown, not checked.",
      `Load average when the run started: ${loadStart.map((n) => n.toFixed(2)).join(', ')} (${cpus().length} CPUs); when it ended: ${loadavg()
        .map((n) => n.toFixed(2))
        .join(', ')}.`
    ],
    results
  }

  log('')
  log(textTable(report))
  log('')
  const fanout = fanoutTextTable(report)
  if (fanout) log(`${fanout}\n`)
  const cache = cacheTextTable(report)
  if (cache) log(`${cache}\n`)
  const deployedTable = deployedTextTable(report)
  if (deployedTable) log(`${deployedTable}\n`)
  const redisTable = redisTextTable(report)
  if (redisTable) log(`${redisTable}\n`)
  const soapTable = soapTextTable(report)
  if (soapTable) log(`${soapTable}\n`)
  for (const note of report.notes) log(`note: ${note}`)

  if (!smoke || args['results-dir']) {
    mkdirSync(resultsDir, { recursive: true })
    const stamp = report.startedAt.replace(/[:.]/g, '-')
    const previous = previousReport(resultsDir, `${stamp}.json`)
    writeFileSync(join(resultsDir, `${stamp}.json`), JSON.stringify(report, null, 2) + '\n')
    writeFileSync(join(resultsDir, `${stamp}.svg`), svgChart(report, previous, thresholds))
    // latest.* (shown in the README) follow full runs only, not --only subsets.
    if (options.only.length === 0) {
      copyFileSync(join(resultsDir, `${stamp}.svg`), join(resultsDir, 'latest.svg'))
      writeFileSync(
        join(resultsDir, 'latest.md'),
        `Command: \`${report.command}\` (${report.startedAt}, commit ${report.commit}, ${report.machine.cpus} × ${report.machine.cpuModel}, Node ${report.machine.node}, load average at start ${loadStart[0]!.toFixed(2)})\n\n${[markdownTable(report), fanoutMarkdownTable(report), cacheMarkdownTable(report), deployedMarkdownTable(report), redisMarkdownTable(report), soapMarkdownTable(report)].filter(Boolean).join('\n\n')}\n`
      )
    }
    log(
      `written: ${join(resultsDir, `${stamp}.json`)}, .svg (compared with ${previous ? previous.startedAt : 'no previous result'})`
    )
  }

  let exitCode = results.some((r) => r.status === 'failed') ? 1 : 0
  if (args.check) {
    const outcome = checkThresholds(report, thresholds, thresholdsFile)
    log('')
    for (const line of outcome.lines) log(line)
    log(outcome.ok ? 'bench:check passed' : 'bench:check FAILED')
    if (!outcome.ok) exitCode = 1
  }
  log(`done in ${elapsed()}`)
  return exitCode
}

/** A group of rows measured in interleaved rounds, or one of the steps that run their own way. */
type Step = Group | 'subscription-fanout' | 'deployed-cluster'

/** The two-instance row: cached-persisted-get-deployed's requests through nginx to two instances. */
const CLUSTER_ROW = 'cached-persisted-get-deployed-x2'

/**
 * Two instances of the service on the deployed topology (PostgreSQL and one Redis, one response cache
 * between them) behind nginx, rendered as test:cluster renders it (test/cluster/harness.ts, around
 * deploy/nginx/), driven with cached-persisted-get-deployed's requests. Its CPU per request is both
 * instances' together, with each one's beside it; its throughput is compared with one instance's
 * (cached-persisted-get-deployed, same run). On two CPUs the instances, nginx and the load generator
 * share the machine: the figures are reported, not judged.
 */
async function clusterStep (data: BenchData, oneInstance: Result | undefined): Promise<Result> {
  const scenario: HttpScenario = {
    ...deployedTwin(serviceScenarios(data).find((s) => s.name === 'cached-persisted-get')!, deployed.redisPrefix),
    name: CLUSTER_ROW,
    description: "cached-persisted-get-deployed's requests through nginx to two instances sharing PostgreSQL and Redis"
  }
  // One Redis prefix for both (their shared cache), and nginx trusted for X-Forwarded-For.
  scenario.env = { ...scenario.env, REDIS_PREFIX: `${deployed.redisPrefix}cluster:`, TRUST_PROXY: LB_ADDRESS }
  const result: Result = { ...baseResult(scenario), restBaseline: null }
  if (deployedProblem) return { ...result, status: 'skipped', reason: deployedProblem }
  const cleanups: (() => unknown)[] = []
  const instances: ServerProcess[] = []
  try {
    instances.push(...await Promise.all(['a', 'b'].map((name) => startProcess({ ...scenario, name: `${CLUSTER_ROW}-${name}` }))))
    const balancer = await startLoadBalancer(
      { teardown: (fn) => { cleanups.push(fn) }, comment: () => {} },
      instances.map((instance) => ({ port: Number(new URL(instance.url).port) }) as Instance)
    )
    const cpuOf = (server: ServerProcess) => server.cpuSplitMicros() ?? { user: 0, system: 0 }
    const both: ServerProcess = {
      ...instances[0]!,
      name: CLUSTER_ROW,
      url: balancer.url,
      cpuMicros: () => instances.reduce((n, s) => n + (s.cpuMicros() ?? 0), 0),
      cpuSplitMicros: () =>
        instances.map(cpuOf).reduce((a, b) => ({ user: a.user + b.user, system: a.system + b.system }))
    }
    const problem = await verifySamples(balancer.url, scenario, 3)
    if (problem) return { ...result, status: 'failed', reason: `wrong response before the load: ${problem}` }
    if (options.warmupSec > 0) await warmUp(both, scenario)
    const before = instances.map((s) => s.cpuMicros() ?? 0)
    const rounds: Round[] = []
    const slice = options.durationSec / options.rounds
    for (let i = 0; i < options.rounds; i++) rounds.push(await round(both, scenario, slice))
    const each = instances.map((s, i) => (s.cpuMicros() ?? 0) - before[i]!)
    const requests = rounds.reduce((n, r) => n + r.requests, 0)
    const seconds = rounds.reduce((n, r) => n + r.seconds, 0)
    const bad = rounds.reduce((n, r) => n + r.non2xx + r.errors + r.mismatches, 0)
    const rps = requests / seconds
    return {
      ...result,
      status: bad === 0 && requests > 0 ? 'ok' : 'failed',
      ...(bad > 0 ? { reason: `${bad} failed responses; first: ${rounds.find((r) => r.firstBad)?.firstBad}` } : {}),
      connections: options.connections,
      durationSec: seconds,
      requests,
      rps,
      latencyMs: { p50: median(rounds.map((r) => r.p50)), p99: median(rounds.map((r) => r.p99)) },
      non2xx: rounds.reduce((n, r) => n + r.non2xx, 0),
      errors: rounds.reduce((n, r) => n + r.errors + r.mismatches, 0),
      cpuMicrosPerRequest: requests > 0 ? (each[0]! + each[1]!) / requests : null,
      details: {
        instanceCpuMicrosPerRequest: each.map((cpu) => (requests > 0 ? cpu / requests : null)),
        ratioToOneInstance: oneInstance?.rps ? rps / oneInstance.rps : null
      }
    }
  } catch (err) {
    return { ...result, status: 'failed', reason: (err as Error).message.split('\n').slice(0, 3).join(' | ') }
  } finally {
    await Promise.all(instances.map((s) => s.stop()))
    for (const cleanup of cleanups) await cleanup()
  }
}

interface FanoutRow {
  name: string
  /** Its physical reference: bench/fanout-baseline-server.ts writing messages the size of this row's. */
  baseline: string
  selection: FanoutSelection
  anonymousHalf: boolean
  description: string
}

const FANOUT_ROWS: FanoutRow[] = [
  {
    name: 'subscription-fanout',
    baseline: 'ws-broadcast',
    selection: 'plain',
    anonymousHalf: false,
    description: 'USER subscribers (one token each), `id content author { name }`'
  },
  {
    name: 'subscription-fanout-mixed',
    baseline: 'ws-broadcast-mixed',
    selection: 'mixed',
    anonymousHalf: true,
    description:
      'half USER (one token each), half anonymous, `id content author { name email }` (email visible to its owner only)'
  }
]

/**
 * Each fan-out row on a fresh service process, then its physical reference: the same clients against a
 * bare `ws` process writing, for every post, one prebuilt copy of the `next` message that service
 * delivered to most of the row's subscribers (FANOUT_SAMPLE), to all of them.
 */
async function fanoutStep (data: BenchData): Promise<Result[]> {
  const counts = `${options.subscribers} subscribers of one room, ${options.fanoutMessages} messages posted`
  const fail = (result: Result, err: Error): Result => ({
    ...result,
    status: 'failed',
    reason: err.message.split('\n')[0]!
  })
  const results: Result[] = []
  const measure = async (server: ServerProcess, row: FanoutRow, checkVisibility: boolean) => {
    const outcome = await runFanout(server.url, data, {
      subscribers: options.subscribers,
      messages: options.fanoutMessages,
      selection: row.selection,
      anonymousHalf: row.anonymousHalf,
      checkVisibility,
      rssBytes: () => server.rssBytes(),
      cpuMicros: () => server.cpuMicros(),
      log
    })
    return { ...outcome, peakRssBytes: server.peakRssBytes() }
  }

  for (const row of FANOUT_ROWS.filter((r) => selected(r.name))) {
    const result: Result = {
      name: row.name,
      kind: 'scenario',
      store: 'sqlite',
      description: `${counts}: ${row.description}`,
      status: 'ok',
      restBaseline: row.baseline
    }
    const baseline: Result = {
      name: row.baseline,
      kind: 'baseline',
      store: 'sqlite',
      description: `${counts}: a bare ws process writing prebuilt bytes the size of ${row.name}'s messages`,
      status: 'ok'
    }
    let sample: string | null = null
    try {
      const server = await startProcess({ name: row.name, target: 'service', store: 'sqlite' })
      try {
        const probe = await probeFanout(server.url, data, row.selection)
        if (probe.unavailable) {
          results.push(
            { ...baseline, status: 'skipped', reason: probe.unavailable },
            { ...result, status: 'skipped', reason: probe.unavailable }
          )
          continue
        }
        sample = probe.sample
        Object.assign(result, await measure(server, row, true))
      } finally {
        await server.stop()
      }
    } catch (err) {
      Object.assign(result, fail(result, err as Error))
    }
    if (sample === null) {
      results.push({ ...baseline, status: 'skipped', reason: `no message of ${row.name} to copy` }, result)
      continue
    }
    try {
      const server = await startProcess({
        name: row.baseline,
        target: 'baseline',
        store: 'sqlite',
        script: 'bench/fanout-baseline-server.ts',
        env: { FANOUT_SAMPLE: sample }
      })
      try {
        Object.assign(baseline, await measure(server, row, false))
      } finally {
        await server.stop()
      }
    } catch (err) {
      Object.assign(baseline, fail(baseline, err as Error))
    }
    if (result.status === 'ok' && baseline.status === 'ok') {
      result.ratioToRest = result.rps! / baseline.rps!
      result.p99Ratio = result.latencyMs!.p99 / baseline.latencyMs!.p99
    }
    results.push(baseline, result)
  }
  return results
}

function gitCommit (): string {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim()
    const dirty = execFileSync(
      'git',
      ['status', '--porcelain', '--untracked-files=no', '--', 'app', 'plugins', 'routes'],
      { cwd: REPO_ROOT, encoding: 'utf8' }
    ).trim()
    return dirty ? `${commit}+changes` : commit
  } catch {
    return 'unknown'
  }
}

let code = 1
/** Whether this run made a PostgreSQL schema and Redis keys of its own (removed at the end). */
let deployedSeeded = false
try {
  code = await main()
} catch (err) {
  console.error(`bench: ${(err as Error).stack ?? err}`)
} finally {
  await closeMeter()
  if (deployedSeeded) {
    await removeDeployed(deployed).catch((err) => console.error(`bench: could not remove ${deployed.schema} and ${deployed.redisPrefix}*: ${err.message}`))
  }
  rmSync(work, { recursive: true, force: true })
}
process.exit(code)
