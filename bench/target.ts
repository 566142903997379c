// `npm run bench -- --target URL`: the benchmark's reads against a deployment it did not start (the
// compose stack through its nginx, a staging URL). It signs USER tokens with the key it is given
// (JWT_SECRET, or JWT_PRIVATE_KEY, with JWT_ALGORITHMS, JWT_ISSUER and JWT_AUDIENCE as the service has
// them), reads the users it asks for from the service itself (the persisted Users operation), and the
// SOAP contract's namespace from its WSDL. Before any load it checks that the service answers, accepts
// the tokens, knows the operations, and that its rate limits will not refuse the run's callers: each of
// those failing stops the run with one line saying which and what to do (TargetRefusal, exit 2).
// The load itself (bench/target-load.ts) checks every answer in full and counts every request sent.
import { readFileSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { mintToken, signingKey } from '../cli/mint-token.ts'
import { ConfigError, loadSettings, tokenSigning, type SigningConfig } from '../app/core/config/index.ts'
import type { Result, RunReport } from './report.ts'
import { serviceScenarios, USERS_LIST_QUERY, type BenchData, type HttpScenario, type RequestSpec, type Sample } from './scenarios.ts'
import { addCounts, emptyCounts, loadRound, percentile, send, type LoadCounts } from './target-load.ts'
import { PERSISTED_MANIFEST, soapScenario } from './transports.ts'

/** Why a run against a target cannot start, in one line for the person who started it. */
export class TargetRefusal extends Error {}

/** The rows a deployment can be load-tested with: reads only (a load test must not change its data). */
export const TARGET_ROWS = ['persisted-get', 'persisted-users-list', 'user-by-id', 'users-list', 'soap-get-user']

/** Where operators read how to run it: the message of every refusal ends with it. */
const HOW_TO = 'docs/operations.md#load-testing-a-deployment'
/** A probe (the checks before the load) that gets no answer within this long: the target does not answer. */
const PROBE_TIMEOUT_MS = 10_000

interface Operation { id: string; name: string; body: string }

function operationNamed (name: string): Operation {
  const manifest = JSON.parse(readFileSync(PERSISTED_MANIFEST, 'utf8')) as { operations: Operation[] }
  const operation = manifest.operations.find((o) => o.name === name)
  if (!operation) throw new TargetRefusal(`${PERSISTED_MANIFEST} has no ${name} operation`)
  return { ...operation, id: operation.id.startsWith('sha256:') ? operation.id : `sha256:${operation.id}` }
}

interface Answer { status: number; headers: Record<string, string>; body: any; text: string }

/** One probe request; a target that does not answer stops the run. */
async function probe (url: string, request: RequestSpec): Promise<Answer> {
  const sent = await send(url, request, PROBE_TIMEOUT_MS)
  if ('failure' in sent) throw new TargetRefusal(`${url} does not answer: ${sent.failure.split(' ')[0]}`)
  let body: any = null
  try { body = JSON.parse(sent.answer.body) } catch { /* not JSON: said where it matters */ }
  return { status: sent.answer.status, headers: sent.answer.headers, body, text: sent.answer.body }
}

const get = (path: string, headers: Record<string, string> = {}): RequestSpec => ({ method: 'GET', path, headers })

/** The first error of an answer, as `CODE: message`. */
const firstError = (answer: Answer) => {
  const error = answer.body?.errors?.[0]
  return error ? `${error.extensions?.code ?? 'error'}: ${error.message}` : `HTTP ${answer.status} ${answer.text.slice(0, 200)}`
}

/** How many users a list row expects: 20 (the operations' page), or all of them when the target has fewer. */
let listLength = 20

/**
 * What the requests need from the deployment: its users (up to 100, by the persisted Users operation,
 * anonymous), a USER token for each, and proof that it accepts those tokens (UserById as the first user).
 */
export async function targetData (url: string, jwt: SigningConfig, keyInWords: string): Promise<BenchData> {
  const users = operationNamed('Users')
  const listed = await probe(url, get(`/graphql?${new URLSearchParams({ queryId: users.id, variables: JSON.stringify({ limit: 100 }) })}`))
  if (listed.status !== 200 || !Array.isArray(listed.body?.data?.users)) {
    throw new TargetRefusal(`${url} answered the persisted Users operation (${users.id.slice(0, 19)}…) with ${firstError(listed)}` +
      (listed.body?.errors?.[0]?.extensions?.code === 'PERSISTED_QUERY_NOT_FOUND'
        ? ': give the service persisted/manifest.json (PERSISTED_MANIFEST) to load-test it'
        : ''))
  }
  const ids = (listed.body.data.users as { id: string }[]).map((user) => user.id)
  if (ids.length === 0) throw new TargetRefusal(`${url} has no users to read: seed it first (npm run seed)`)
  listLength = Math.min(20, ids.length)
  const data: BenchData = {
    users: ids.map((id) => ({ id, token: mintToken(jwt, id, 'USER') })),
    adminToken: '',
    rooms: ['general', 'random', 'support', 'releases', 'design'],
    runId: `target${Date.now().toString(36)}`,
    persistedUserQueryId: operationNamed('UserById').id
  }
  const [first] = data.users
  const read = await probe(url, get(`/graphql?${new URLSearchParams({ queryId: data.persistedUserQueryId!, variables: JSON.stringify({ id: first!.id }) })}`,
    { authorization: `Bearer ${first!.token}` }))
  if (read.status === 401 || read.body?.errors?.[0]?.extensions?.code === 'UNAUTHENTICATED') {
    throw new TargetRefusal(`${url} refused the token signed with ${keyInWords} (${firstError(read)}): give the key it verifies with ` +
      '(JWT_SECRET, or JWT_PRIVATE_KEY; JWT_ALGORITHMS, JWT_ISSUER and JWT_AUDIENCE as the service has them)')
  }
  if (read.status !== 200 || read.body?.data?.user?.id !== first!.id) {
    throw new TargetRefusal(`${url} answered the persisted UserById operation with ${firstError(read)}`)
  }
  return data
}

/** A users list answer: `listLength` users, each with id, name and createdAt. */
function verifyList (_request: RequestSpec, response: Sample): string | null {
  if (response.status !== 200) return `HTTP ${response.status}: ${response.body.slice(0, 200)}`
  let body: { data?: { users?: unknown }; errors?: unknown }
  try { body = JSON.parse(response.body) } catch { return `not JSON: ${response.body.slice(0, 200)}` }
  if (body.errors) return `errors: ${JSON.stringify(body.errors).slice(0, 200)}`
  const list = body.data?.users
  if (!Array.isArray(list) || list.length !== listLength) return `expected ${listLength} users, got ${JSON.stringify(list)?.slice(0, 200)}`
  return list.every((u) => typeof u?.id === 'string' && typeof u.name === 'string' && typeof u.createdAt === 'string')
    ? null
    : `a user lacks id, name or createdAt: ${response.body.slice(0, 200)}`
}

/** The SOAP contract as the target's WSDL declares it, or why it could not be read. */
type SoapContract = { namespace: string } | { problem: string }

/**
 * The SOAP v1 contract's namespace, as the target's WSDL declares it (SOAP_NAMESPACE_BASE + /v1/UserService),
 * or why it cannot be read.
 */
export async function soapNamespace (url: string): Promise<SoapContract> {
  const wsdl = await probe(url, get('/v1/UserService?wsdl'))
  const namespace = /<wsdl:definitions\b[^>]*\btargetNamespace="([^"]+)"/.exec(wsdl.text)?.[1]
  return namespace ? { namespace } : { problem: `GET /v1/UserService?wsdl answered HTTP ${wsdl.status} without a targetNamespace` }
}

/**
 * The rows a deployment is load-tested with, made for it: the persisted GETs a mobile app sends, the
 * same reads by POST (skipped when the service takes persisted operations only), and SOAP GetUser when a
 * partner login is given (BENCH_SOAP_LOGIN, BENCH_SOAP_PASSWORD), in the namespace of the target's WSDL.
 */
export function targetScenarios (data: BenchData, adHoc: string | null, soap: SoapContract): HttpScenario[] {
  const byName = new Map(serviceScenarios(data).map((s) => [s.name, s]))
  const users = operationNamed('Users')
  const persistedList: HttpScenario = {
    ...byName.get('users-list')!,
    name: 'persisted-users-list',
    description: 'GET /graphql?queryId=<Users>&variables={"limit":20}, anonymous',
    next: () => get(`/graphql?${new URLSearchParams({ queryId: users.id, variables: JSON.stringify({ limit: 20 }) })}`),
    verify: verifyList
  }
  const refusedAdHoc = () => adHoc
  const soapLogin = process.env.BENCH_SOAP_LOGIN
  const soapPassword = process.env.BENCH_SOAP_PASSWORD
  if (soapLogin && soapPassword && 'namespace' in soap) {
    data.soap = { path: '/v1/UserService', login: soapLogin, password: soapPassword, namespace: soap.namespace }
  }
  const noSoap = 'problem' in soap ? soap.problem : 'no partner login given (set BENCH_SOAP_LOGIN and BENCH_SOAP_PASSWORD)'
  return [
    byName.get('persisted-get')!,
    persistedList,
    { ...byName.get('user-by-id')!, unavailable: refusedAdHoc },
    { ...byName.get('users-list')!, unavailable: refusedAdHoc, verify: verifyList },
    soapScenario(data, noSoap)
  ].map((scenario) => ({ ...scenario, guarded: undefined, env: undefined }))
}

/** Why the deployment cannot run the POST rows (it takes persisted operations only), or null. */
export async function adHocRefusal (url: string): Promise<string | null> {
  const answer = await probe(url, {
    method: 'POST',
    path: '/graphql',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query: USERS_LIST_QUERY })
  })
  const code = answer.body?.errors?.[0]?.extensions?.code
  return code ? `the service refuses ad-hoc queries (${code}): it takes persisted operations only` : null
}

/** Who a row's requests are counted against by the target's budgets, and how many such callers there are. */
function callerOf (scenario: HttpScenario, data: BenchData): { caller: string; callers: number } {
  if (scenario.name === 'soap-get-user') return { caller: `one caller, the partner "${data.soap?.login}"`, callers: 1 }
  if (scenario.name.endsWith('users-list')) return { caller: 'one anonymous caller (this machine\'s address)', callers: 1 }
  return { caller: `each of ${data.users.length} users`, callers: data.users.length }
}

/** What a row's pre-load samples showed of the target: their latency and the budgets their answers carried. */
interface Sampled {
  scenario: HttpScenario
  /** Median time of the samples, in ms. */
  ms: number
  /** x-ratelimit-limit, -remaining and -reset (seconds) of the last sample, when the target sends them. */
  requests: { limit: number; remaining: number; resetSec: number } | null
  /** The cost one request was charged, and the cost units left in the window (extensions.cost), for GraphQL rows. */
  cost: { requested: number; remaining: number } | null
}

export interface TargetOptions {
  connections: number
  durationSec: number
  rounds: number
  warmupSec: number
  timeoutSec: number
  only: string[]
}

/**
 * The limits check before the load: each row keeps `connections` requests in flight, so it sends about
 * connections / (a sample's time) requests a second. Its callers' budgets must hold what the rows of the
 * same callers send before the window in force resets (x-ratelimit-reset; the whole run if it is shorter).
 * Returns the refusal in words, or null when the budgets hold.
 */
export function budgetRefusal (
  url: string, sampled: Sampled[], data: BenchData, options: TargetOptions
): string | null {
  const rowSeconds = options.warmupSec + options.durationSec
  const runSeconds = rowSeconds * sampled.length
  const byCaller = new Map<string, { rows: string[]; requests: number; cost: number; sampled: Sampled }>()
  for (const row of sampled) {
    if (!row.requests) continue
    const { caller, callers } = callerOf(row.scenario, data)
    const window = Math.min(row.requests.resetSec || runSeconds, runSeconds)
    // The row's share of the window: the rows take turns, each about rowSeconds of the run.
    const perCaller = (options.connections / (row.ms / 1000)) * window * (rowSeconds / runSeconds) / callers
    const group = byCaller.get(caller) ?? { rows: [], requests: 0, cost: 0, sampled: row }
    group.rows.push(row.scenario.name)
    group.requests += perCaller
    group.cost += perCaller * (row.cost?.requested ?? 0)
    if (row.requests.remaining < group.sampled.requests!.remaining) group.sampled = row
    byCaller.set(caller, group)
  }
  for (const [caller, group] of byCaller) {
    const { requests, cost } = group.sampled
    const costLeft = sampled.filter((s) => group.rows.includes(s.scenario.name) && s.cost)
      .reduce((least, s) => Math.min(least, s.cost!.remaining), Infinity)
    const overRequests = group.requests > requests!.remaining
    const overCost = group.cost > costLeft
    if (!overRequests && !overCost) continue
    const amount = overRequests
      ? `${Math.round(group.requests)} requests per caller`
      : `${Math.round(group.cost)} cost units per caller`
    const allowed = overRequests
      ? `${requests!.remaining} more requests (x-ratelimit-limit: ${requests!.limit} per caller)`
      : `${costLeft} more cost units (each request costs ${cost!.requested})`
    return `${url} would refuse this run with 429 RATE_LIMITED: ${group.rows.join(' and ')} would send about ${amount} ` +
      `(${caller}) before the budget window resets in ${requests!.resetSec} s, and the target allows ${allowed}. ` +
      'Raise the target\'s RATE_LIMIT_REQUESTS and RATE_LIMIT_COST for the run (e.g. RATE_LIMIT_REQUESTS=100000000 ' +
      `RATE_LIMIT_COST=10000000000, then restore them), or run fewer rows or connections (--only, --connections); ${HOW_TO}`
  }
  return null
}

/** What the row's sample answers say: their median time and the budgets they carried. */
async function sampleRow (url: string, scenario: HttpScenario): Promise<Sampled | string> {
  const times: number[] = []
  let last: Required<Sample> | null = null
  for (let i = 0; i < 3; i++) {
    const request = scenario.next()
    const sent = await send(url, request, PROBE_TIMEOUT_MS)
    if ('failure' in sent) return `${request.method} ${request.path.slice(0, 80)}: no answer (${sent.failure})`
    const problem = scenario.verify(request, sent.answer)
    if (problem) return `${request.method} ${request.path.slice(0, 80)}: ${problem}`
    times.push(sent.ms)
    last = sent.answer
  }
  const header = (name: string) => (last!.headers[name] === undefined ? NaN : Number(last!.headers[name]))
  const limit = header('x-ratelimit-limit')
  let cost: Sampled['cost'] = null
  try {
    const reported = JSON.parse(last!.body)?.extensions?.cost
    if (typeof reported?.requested === 'number' && typeof reported.remaining === 'number') cost = reported
  } catch { /* a SOAP answer: no cost report */ }
  return {
    scenario,
    ms: percentile(times, 50)!,
    requests: Number.isFinite(limit)
      ? { limit, remaining: header('x-ratelimit-remaining'), resetSec: header('x-ratelimit-reset') }
      : null,
    cost
  }
}

/** A row's outcome: every request counted once; req/s of the ok answers only; latency of every answer. */
function rowResult (scenario: HttpScenario, measured: LoadCounts, warmup: LoadCounts, connections: number): Result {
  const all = addCounts(measured, warmup)
  const failures = all.non2xx + all.wrong + all.noAnswer
  const failed = failures > 0 || measured.ok === 0
  const said = (count: number, what: string, first?: string) => (count > 0 ? [`${count} ${what}${first ? ` (first: ${first})` : ''}`] : [])
  const reason = [
    ...said(all.non2xx, 'non-2xx', all.firstFailure.non2xx),
    ...said(all.wrong, 'wrong answers', all.firstFailure.wrong),
    ...said(all.noAnswer, 'without an answer', all.firstFailure.noAnswer),
    ...(measured.ok === 0 ? ['no correct answer'] : [])
  ].join('; ')
  const latencies = measured.latenciesMs
  return {
    name: scenario.name,
    kind: 'scenario',
    store: scenario.store,
    description: scenario.description,
    status: failed ? 'failed' : 'ok',
    ...(failed ? { reason: `${failures} of ${all.sent} requests failed: ${reason}` } : {}),
    connections,
    durationSec: measured.seconds,
    requests: measured.sent,
    rps: measured.ok / measured.seconds,
    latencyMs: { p50: percentile(latencies, 50) ?? NaN, p99: percentile(latencies, 99) ?? NaN },
    non2xx: all.non2xx,
    errors: all.wrong + all.noAnswer,
    details: {
      sent: all.sent,
      ok: all.ok,
      non2xx: all.non2xx,
      wrong: all.wrong,
      noAnswer: all.noAnswer,
      /** Answers the latency is measured on (every answer of the measured rounds, whatever it was). */
      answered: latencies.length,
      maxMs: percentile(latencies, 100),
      warmupRequests: warmup.sent
    }
  }
}

const fixed = (value: number | null | undefined, digits: number) => (value == null || !Number.isFinite(value) ? '–' : value.toFixed(digits))

/** The run's table: one line a row; a skipped row says why in one line. */
export function targetTable (results: Result[]): string {
  const header = ['row', 'ok req/s', 'sent', 'ok', 'non-2xx', 'wrong', 'no answer', 'p50 ms', 'p99 ms', 'max ms', 'result']
  const measured = results.filter((r) => r.status !== 'skipped').map((r) => {
    const d = r.details as Record<'sent' | 'ok' | 'non2xx' | 'wrong' | 'noAnswer', number> & { maxMs: number | null }
    const counts = [d.sent, d.ok, d.non2xx, d.wrong, d.noAnswer].map(String)
    return [r.name, fixed(r.rps, 0), ...counts,
      fixed(r.latencyMs?.p50, 1), fixed(r.latencyMs?.p99, 1), fixed(d.maxMs, 1), r.status === 'ok' ? 'ok' : `FAILED: ${r.reason}`]
  })
  const rows = [header, ...measured]
  const widths = header.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)))
  const aligned = (c: string, i: number, cells: string[]) =>
    i === 0 || i === cells.length - 1 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)
  const line = (cells: string[]) => cells.map((c, i) => aligned(c, i, cells)).join('  ').trimEnd()
  const skipped = results.filter((r) => r.status === 'skipped').map((r) => `${r.name.padEnd(widths[0]!)}  skipped: ${r.reason}`)
  return [line(header), ...measured.map(line), ...skipped].join('\n')
}

/**
 * --target: the checks, then the rows' warm-up and interleaved rounds against the deployment, the table,
 * and the exit code: 0 when every row ran without a failure, 1 when one failed, 2 when the run could not start.
 */
export async function runTarget (
  url: string,
  options: TargetOptions,
  record: { command: string; commit: string; resultsDir: string | null }
): Promise<number> {
  const startedAt = new Date()
  const log = (line: string) => console.log(line)
  const selected = (name: string) => options.only.length === 0 || options.only.includes(name)
  if (!(options.timeoutSec > 0)) {
    console.error('bench: --timeout takes a number of seconds above 0')
    return 2
  }
  const unknown = options.only.filter((name) => !TARGET_ROWS.includes(name))
  if (unknown.length > 0) {
    console.error(`bench: no row named ${unknown.join(', ')} for --target (rows: ${TARGET_ROWS.join(', ')})`)
    return 2
  }
  const results: Result[] = []
  const members: { scenario: HttpScenario; warmup: LoadCounts; measured: LoadCounts }[] = []
  try {
    const jwt = loadSettings([tokenSigning], { ...process.env, NODE_ENV: process.env.NODE_ENV ?? 'development' }).tokenSigning
    const data = await targetData(url, jwt, signingKey(jwt))
    const wantsSoap = selected('soap-get-user')
    const scenarios = targetScenarios(data, await adHocRefusal(url), wantsSoap ? await soapNamespace(url) : { problem: 'not selected' })
      .filter((s) => selected(s.name))
    const sampled: Sampled[] = []
    for (const scenario of scenarios) {
      const skipped = scenario.unavailable?.()
      if (skipped) {
        results.push({ name: scenario.name, kind: 'scenario', store: scenario.store, description: scenario.description, status: 'skipped', reason: skipped })
        continue
      }
      const row = await sampleRow(url, scenario)
      if (typeof row === 'string') throw new TargetRefusal(`${url} answered the ${scenario.name} row wrongly before any load: ${row}`)
      sampled.push(row)
    }
    const refused = budgetRefusal(url, sampled, data, options)
    if (refused) throw new TargetRefusal(refused)
    for (const { scenario } of sampled) members.push({ scenario, warmup: emptyCounts(), measured: emptyCounts() })
    log(`bench --target ${url}: ${members.map((m) => m.scenario.name).join(', ')}; ${data.users.length} users; ` +
      `${options.rounds} interleaved rounds of ${(options.durationSec / options.rounds).toFixed(1)} s × ${options.connections} connections; ` +
      `an answer later than ${options.timeoutSec} s is a failure`)
  } catch (err) {
    if (!(err instanceof TargetRefusal || err instanceof ConfigError)) throw err
    console.error(`bench: ${err.message.replace(/\s*\n\s*/g, ' ')}`)
    return 2
  }
  const load = { connections: options.connections, timeoutMs: options.timeoutSec * 1000 }
  for (const m of members) {
    // Failures in the warm-up are failures: an error is an error whenever it happens.
    if (options.warmupSec > 0) m.warmup = await loadRound(url, m.scenario, { ...load, seconds: options.warmupSec })
  }
  for (let i = 0; i < options.rounds; i++) {
    const rates: string[] = []
    for (const m of members) {
      const round = await loadRound(url, m.scenario, { ...load, seconds: options.durationSec / options.rounds })
      m.measured = addCounts(m.measured, round)
      rates.push(`${m.scenario.name} ${Math.round(round.ok / round.seconds)}${round.ok < round.sent ? ` (${round.sent - round.ok} failed)` : ''}`)
    }
    log(`    round ${i + 1}/${options.rounds}: ${rates.join(', ')} ok req/s`)
  }
  results.push(...members.map((m) => rowResult(m.scenario, m.measured, m.warmup, options.connections)))
  results.sort((a, b) => TARGET_ROWS.indexOf(a.name) - TARGET_ROWS.indexOf(b.name))
  log('')
  log(targetTable(results))
  if (record.resultsDir) {
    const report: RunReport = {
      startedAt: startedAt.toISOString(),
      finishedAt: new Date().toISOString(),
      command: record.command,
      commit: record.commit,
      smoke: false,
      machine: { cpus: 0, cpuModel: 'not this machine', node: process.versions.node, platform: `${process.platform}-${process.arch}` },
      options: { ...options, target: url },
      notes: [
        `Against ${url}, a deployment this run did not start: req/s and latency as this machine's load generator saw them; no server CPU.`,
        'Every request sent ends once: ok (2xx and its full check passed), non-2xx, wrong (2xx failing the check) or without an answer (none within --timeout, or the connection failed); req/s counts ok answers only, latency every answer.'
      ],
      results
    }
    mkdirSync(record.resultsDir, { recursive: true })
    const file = join(record.resultsDir, `target-${report.startedAt.replace(/[:.]/g, '-')}.json`)
    writeFileSync(file, JSON.stringify(report, null, 2) + '\n')
    log(`written: ${file}`)
  }
  return results.some((r) => r.status === 'failed') ? 1 : 0
}
