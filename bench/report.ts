// The benchmark's report: the table (printed and as Markdown for the README), the JSON record in
// bench/results/, the SVG chart of the ratios and of how they moved since the previous result, and the
// threshold check.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { StoreKind } from './scenarios.ts'

/** What a deployed row cost the shared Redis, per request. */
export interface RedisUse {
  /** Redis's CPU time per request over the measured rounds, µs. */
  cpuMicrosPerRequest: number
  /** Every call Redis processed per request (a script's own calls included). */
  callsPerRequest: number
  /** Commands the service sent per request (a script is one), from a sample watched with MONITOR. */
  commandsPerRequest: number | null
  /** Calls its scripts made per request, from the same sample. */
  scriptCallsPerRequest: number | null
  commandsByName: Record<string, number>
  /** Requests a second one Redis core would serve at that cost: the fleet's ceiling. */
  ceilingRps: number | null
}

export interface Result {
  name: string
  /** guarded: a rest route's work behind the service's per-request protections (bench/guarded-server.ts). */
  kind: 'baseline' | 'guarded' | 'scenario'
  store: StoreKind
  description: string
  status: 'ok' | 'failed' | 'skipped'
  /** Why it failed or was skipped. */
  reason?: string
  connections?: number
  durationSec?: number
  requests?: number
  /** Requests per second (deliveries per second for subscription-fanout). */
  rps?: number
  latencyMs?: { p50: number; p99: number }
  non2xx?: number
  /** Connection errors, timeouts and responses failing the body check. */
  errors?: number
  peakRssBytes?: number | null
  /**
   * CPU time (user + system) of the server process per request served, in µs. Not a guard: it is how
   * much work a request costs, which other load on a shared machine changes far less than req/s.
   */
  cpuMicrosPerRequest?: number | null
  restBaseline?: string | null
  ratioToRest?: number | null
  /**
   * The rest row's server CPU µs/req over this row's (median over rounds): the ratio by cost, whatever paced
   * the round.
   */
  cpuRatioToRest?: number | null
  /** The guarded row of the same transport shape, and the ratios to it (req/s, and by server CPU per request). */
  guardedBaseline?: string
  ratioToGuarded?: number | null
  cpuRatioToGuarded?: number | null
  /** Server CPU seconds per second over the measured rounds (1 = its core saturated). */
  serverBusy?: number | null
  /**
   * The runner's (autocannon's) CPU seconds per second over the measured rounds: near 1, the load generator
   * set the pace.
   */
  clientBusy?: number | null
  /** The runner's CPU time per request, in µs. */
  clientCpuMicrosPerRequest?: number | null
  /** The kernel's share of the server's CPU time over the measured rounds. */
  serverSystemShare?: number | null
  /** Server and runner CPU seconds per second in each measured round, in order. */
  roundBusy?: { server: number | null; client: number }[]
  ratioToLimit?: number | null
  /** Fan-out rows: p99 delivery latency over ws-broadcast's p99 (same run). */
  p99Ratio?: number | null
  /** Fan-out rows: server RSS with the subscribers connected minus before they connected, per subscriber. */
  rssPerSubscriberBytes?: number | null
  /** Cached rows: the share of their cached reads answered from the cache over the measured rounds. */
  cacheHitRatio?: number | null
  /** Deployed rows: what Redis spent on them (bench/redis-meter.ts). */
  redis?: RedisUse | null
  details?: Record<string, unknown>
  /** req/s of each measured round, in order. */
  rounds?: number[]
  /** Set while the runner prints progress. */
  logged?: boolean
}

export interface RunReport {
  startedAt: string
  finishedAt: string
  command: string
  commit: string
  smoke: boolean
  machine: { cpus: number; cpuModel: string; node: string; platform: string }
  options: Record<string, unknown>
  notes: string[]
  results: Result[]
}

export type Thresholds = Record<string, number>

const fixed = (value: number | null | undefined, digits: number): string =>
  value == null || !Number.isFinite(value) ? '–' : value.toFixed(digits)
const mb = (bytes: number | null | undefined): string => (bytes == null ? '–' : `${Math.round(bytes / 1024 / 1024)}`)

function rowOf (r: Result): string[] {
  const outcome = r.status === 'ok' ? 'ok' : `${r.status.toUpperCase()}${r.reason ? `: ${r.reason}` : ''}`
  const compared = r.kind !== 'baseline'
  return [
    r.name,
    r.rps === undefined ? '–' : Math.round(r.rps).toString(),
    compared ? fixed(r.ratioToRest, 2) : '',
    compared ? fixed(r.cpuRatioToRest, 2) : '',
    r.guardedBaseline ? fixed(r.ratioToGuarded, 2) : '',
    r.guardedBaseline ? fixed(r.cpuRatioToGuarded, 2) : '',
    fixed(r.ratioToLimit, 2),
    fixed(r.latencyMs?.p50, 1),
    fixed(r.latencyMs?.p99, 1),
    fixed(r.cpuMicrosPerRequest, 0),
    fixed(r.serverSystemShare, 2),
    fixed(r.serverBusy, 2),
    fixed(r.clientCpuMicrosPerRequest, 0),
    fixed(r.clientBusy, 2),
    r.non2xx === undefined ? '–' : `${r.non2xx}/${r.errors ?? 0}`,
    mb(r.peakRssBytes),
    outcome
  ]
}

const HEADER = [
  'scenario',
  'req/s',
  '× rest',
  'CPU × rest',
  '× guarded',
  'CPU × guarded',
  '× limit',
  'p50 ms',
  'p99 ms',
  'CPU µs/req',
  'sys share',
  'server busy',
  'client µs/req',
  'client busy',
  'non2xx/err',
  'peak RSS MB',
  'result'
]

export function textTable (report: RunReport): string {
  const rows = [HEADER, ...report.results.map(rowOf)]
  const widths = HEADER.map((_, i) => Math.max(...rows.map((r) => (i === HEADER.length - 1 ? 0 : r[i]!.length))))
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === 0 || i === cells.length - 1 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd()
  // A skipped row measured nothing: its name and why, in one line, instead of a line of dashes.
  const skipped = (r: Result) => `${r.name.padEnd(widths[0]!)}  skipped: ${r.reason ?? ''}`.trimEnd()
  return [
    line(rows[0]!),
    widths.map((w) => '-'.repeat(Math.max(w, 6))).join('  '),
    ...report.results.map((r, i) => (r.status === 'skipped' ? skipped(r) : line(rows[i + 1]!)))
  ].join('\n')
}

/** The issue's targets for the fan-out against ws-broadcast; shown, not checked by bench:check. */
export const FANOUT_TARGETS = { deliveriesRatio: 0.5, p99Ratio: 2, rssPerSubscriberBytes: 30 * 1024 }

const FANOUT_HEADER = [
  'fan-out row',
  'subscribers',
  'deliveries/s',
  `× ws-broadcast (≥ ${FANOUT_TARGETS.deliveriesRatio})`,
  'p99 ms',
  `p99 × ws-broadcast (≤ ${FANOUT_TARGETS.p99Ratio})`,
  'CPU µs/delivery',
  'CPU × ws-broadcast',
  `RSS/subscriber KB (≤ ${FANOUT_TARGETS.rssPerSubscriberBytes / 1024})`,
  'targets'
]

/** The fan-out rows (those with an RSS per subscriber) against the issue's targets; null when none ran. */
function fanoutRows (report: RunReport): string[][] | null {
  const rows = report.results.filter((r) => r.rssPerSubscriberBytes !== undefined)
  if (rows.length === 0) return null
  return rows.map((r) => {
    // CPU per delivery moves far less with other load than deliveries/s: the steadier view of the same ratio.
    const base = report.results.find((b) => b.name === r.restBaseline && b.status === 'ok')
    const cpuRatio =
      r.cpuMicrosPerRequest != null && base?.cpuMicrosPerRequest
        ? r.cpuMicrosPerRequest / base.cpuMicrosPerRequest
        : null
    const missed: string[] = []
    if (r.kind === 'scenario' && r.status === 'ok') {
      if (!(r.ratioToRest! >= FANOUT_TARGETS.deliveriesRatio)) missed.push('deliveries/s')
      if (!(r.p99Ratio! <= FANOUT_TARGETS.p99Ratio)) missed.push('p99')
      if (!(r.rssPerSubscriberBytes! <= FANOUT_TARGETS.rssPerSubscriberBytes)) missed.push('RSS')
    }
    const targets =
      r.status !== 'ok'
        ? r.status
        : r.kind === 'baseline'
          ? 'baseline'
          : missed.length === 0
            ? 'met'
            : `missed: ${missed.join(', ')}`
    return [
      r.name,
      String(r.connections ?? '–'),
      r.rps === undefined ? '–' : Math.round(r.rps).toString(),
      r.kind === 'scenario' ? fixed(r.ratioToRest, 2) : '',
      fixed(r.latencyMs?.p99, 1),
      r.kind === 'scenario' ? fixed(r.p99Ratio, 2) : '',
      fixed(r.cpuMicrosPerRequest, 1),
      r.kind === 'scenario' ? fixed(cpuRatio, 2) : '',
      fixed(r.rssPerSubscriberBytes == null ? null : r.rssPerSubscriberBytes / 1024, 1),
      targets
    ]
  })
}

export const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/**
 * The issue's targets for the response cache ("A read is computed once"), each a ratio of two rows of one
 * group (req/s); shown, not checked by bench:check. cached-mixed has no target: it shows what writes cost.
 */
export const CACHE_TARGETS: { row: string; against: string; target: number | null }[] = [
  { row: 'cached-persisted-get', against: 'persisted-get', target: 2 },
  { row: 'cached-persisted-get', against: 'guarded-user-get', target: 0.9 },
  { row: 'cached-persisted-get', against: 'apollo-cached-user-get', target: 1.5 },
  { row: 'cached-persisted-get', against: 'yoga-cached-user-get', target: 1.5 },
  { row: 'cached-mixed', against: 'persisted-get', target: null },
  { row: 'cached-mixed', against: 'cached-persisted-get', target: null }
]

/**
 * `row` over `against`, as the group's other ratios are taken: the median over rounds measured back to back
 * of req/s, and of the server CPU per request (against's over row's, so higher is better here too).
 */
function roundRatios (row: Result, against: Result): { rps: number | null; cpu: number | null } {
  const n = row.rounds?.length ?? 0
  if (n === 0 || against.rounds?.length !== n) return { rps: null, cpu: null }
  const rps = median(row.rounds!.map((r, i) => r / against.rounds![i]!))
  const cpuPerRequest = (r: Result, i: number) => {
    const busy = r.roundBusy?.[i]?.server
    return busy == null || !r.rounds![i] ? null : busy / r.rounds![i]!
  }
  const cpu = row.rounds!.map((_, i) => {
    const [mine, theirs] = [cpuPerRequest(row, i), cpuPerRequest(against, i)]
    return mine && theirs ? theirs / mine : null
  })
  return { rps, cpu: cpu.every((x) => x !== null) ? median(cpu as number[]) : null }
}

const CACHE_HEADER = ['response cache', 'hit ratio', '× req/s', 'CPU ×', 'target']

/**
 * The deployed topology's targets (issue: the hot path as deployed), each judged by the server's CPU per
 * request: `against`'s CPU µs/req over `row`'s, the median over rounds measured back to back, at least
 * `target` (a cost of at most 1/target times `against`'s). Shown, not checked by bench:check.
 */
export const DEPLOYED_TARGETS: { row: string; against: string; target: number; what: string }[] = [
  { row: 'cached-persisted-get-deployed', against: 'cached-persisted-get', target: 1 / 1.15, what: 'a deployed hit costs ≤ 1.15 × an embedded hit' },
  { row: 'persisted-get-deployed', against: 'persisted-get', target: 1 / 1.4, what: 'a deployed miss costs ≤ 1.4 × an embedded miss' },
  { row: 'cached-persisted-get-deployed', against: 'persisted-get-deployed', target: 2, what: 'a deployed hit costs ≤ 0.5 × a deployed miss' },
  { row: 'guarded-user-get', against: 'rest-user', target: 0.9, what: 'the protections: guarded-user-get ≥ 0.9 × rest-user' },
  { row: 'cached-persisted-get', against: 'persisted-get', target: 2, what: 'an embedded hit ≥ 2 × an embedded execution' },
  { row: 'cached-persisted-get-deployed', against: 'apollo-cached-user-get-deployed', target: 1.5, what: "≥ 1.5 × Apollo's hit on Redis" },
  { row: 'cached-persisted-get-deployed', against: 'yoga-cached-user-get-deployed', target: 1.5, what: "≥ 1.5 × Yoga's hit on Redis" }
]

/**
 * The SOAP binding's targets (issue: partners at wire speed), judged like the deployed ones: `against`'s
 * CPU µs/req over `row`'s, the median over rounds measured back to back. Shown, not checked by bench:check.
 */
export const SOAP_TARGETS: typeof DEPLOYED_TARGETS = [
  { row: 'soap-get-user', against: 'node-soap-get-user', target: 1.5, what: 'with every check on, ≥ 1.5 × node-soap with none' },
  { row: 'soap-get-user', against: 'rest-user', target: 0.6, what: 'a SOAP GetUser ≥ 0.6 × the plain route' },
  { row: 'soap-get-user-signed', against: 'soap-get-user', target: 0.5, what: 'the signed GetUser ≥ 0.5 × the unsigned one' }
]

const TARGET_HEADER = ['', '× req/s', 'CPU ×', 'target (CPU ×)', 'verdict']

/** The targets of `targets` that both rows of ran: row ÷ against, req/s and CPU, and the verdict. */
function targetRows (report: RunReport, targets: typeof DEPLOYED_TARGETS): string[][] {
  const ok = (name: string) => report.results.find((r) => r.name === name && r.status === 'ok')
  return targets.flatMap(({ row, against, target, what }) => {
    const [a, b] = [ok(row), ok(against)]
    if (!a || !b) return []
    const { rps, cpu } = roundRatios(a, b)
    return [[`${row} ÷ ${against}`, fixed(rps, 2), fixed(cpu, 2), `≥ ${target.toFixed(2)}: ${what}`,
      cpu === null ? '–' : cpu >= target ? 'met' : 'missed']]
  })
}

/** The deployed targets that both rows of ran, and the two-instance row against one instance; null when none. */
function deployedRows (report: RunReport): string[][] | null {
  const ok = (name: string) => report.results.find((r) => r.name === name && r.status === 'ok')
  const rows = targetRows(report, DEPLOYED_TARGETS)
  const cluster = ok('cached-persisted-get-deployed-x2')
  if (cluster) {
    const each = (cluster.details?.instanceCpuMicrosPerRequest as (number | null)[] | undefined) ?? []
    rows.push([
      'cached-persisted-get-deployed-x2 ÷ cached-persisted-get-deployed',
      fixed(cluster.details?.ratioToOneInstance as number | null | undefined, 2),
      '',
      `reported: two instances behind nginx; instance CPU µs per request served ${each.map((c) => fixed(c, 0)).join(' + ')}`,
      ''
    ])
  }
  return rows.length > 0 ? rows : null
}

const headed = (title: string) => [title, ...TARGET_HEADER.slice(1)]

export function deployedTextTable (report: RunReport): string | null {
  const body = deployedRows(report)
  return body ? alignedTable(headed('deployed'), body) : null
}

export function deployedMarkdownTable (report: RunReport): string | null {
  const body = deployedRows(report)
  return body ? markdownOf(headed('deployed'), body) : null
}

/**
 * The shared Redis's targets (issue: the fleet's shared engine): commands per cached GET and per miss,
 * Redis CPU per cached GET against Apollo's Redis-backed hit and against what it cost before (14-21 µs,
 * measured on 2026-12-01: a quarter of the lower end).
 */
const REDIS_TARGETS = {
  hit: 'cached-persisted-get-deployed',
  miss: 'persisted-get-deployed',
  apollo: 'apollo-cached-user-get-deployed',
  before: 14
}

const REDIS_HEADER = ['Redis', 'CPU µs/req', 'commands/req', 'script calls/req', 'all calls/req', 'ceiling req/s (one core)']

/** Each deployed row's cost to Redis, then the targets; null when no deployed row ran. */
function redisRows (report: RunReport): string[][] | null {
  const measured = report.results.filter((r) => r.status === 'ok' && r.redis)
  if (measured.length === 0) return null
  const rows = measured.map(({ name, redis }) => [
    name,
    fixed(redis!.cpuMicrosPerRequest, 2),
    fixed(redis!.commandsPerRequest, 2),
    fixed(redis!.scriptCallsPerRequest, 2),
    fixed(redis!.callsPerRequest, 2),
    fixed(redis!.ceilingRps, 0)
  ])
  const use = (name: string) => measured.find((r) => r.name === name)?.redis
  const verdict = (ok: boolean | null) => (ok === null ? '–' : ok ? 'met' : 'missed')
  const [hit, miss, apollo] = [use(REDIS_TARGETS.hit), use(REDIS_TARGETS.miss), use(REDIS_TARGETS.apollo)]
  if (hit) {
    rows.push([`target: ${REDIS_TARGETS.hit} ≤ 1 command`, '', verdict(hit.commandsPerRequest === null ? null : hit.commandsPerRequest <= 1.05), '', '', ''])
    const quarter = REDIS_TARGETS.before / 4
    rows.push([`target: ${REDIS_TARGETS.hit} ≤ ${quarter} µs (a quarter of before)`, verdict(hit.cpuMicrosPerRequest <= quarter), '', '', '', ''])
    if (apollo) {
      const ratio = hit.cpuMicrosPerRequest / apollo.cpuMicrosPerRequest
      rows.push([`target: ${REDIS_TARGETS.hit} ≤ 1.5 × ${REDIS_TARGETS.apollo}`, `${fixed(ratio, 2)} × : ${verdict(ratio <= 1.5)}`, '', '', '', ''])
    }
  }
  if (miss) rows.push([`target: ${REDIS_TARGETS.miss} ≤ 2 commands`, '', verdict(miss.commandsPerRequest === null ? null : miss.commandsPerRequest <= 2.05), '', '', ''])
  return rows
}

export function redisTextTable (report: RunReport): string | null {
  const body = redisRows(report)
  return body ? alignedTable(REDIS_HEADER, body) : null
}

export function redisMarkdownTable (report: RunReport): string | null {
  const body = redisRows(report)
  return body ? markdownOf(REDIS_HEADER, body) : null
}

export function soapTextTable (report: RunReport): string | null {
  const body = targetRows(report, SOAP_TARGETS)
  return body.length > 0 ? alignedTable(headed('SOAP'), body) : null
}

export function soapMarkdownTable (report: RunReport): string | null {
  const body = targetRows(report, SOAP_TARGETS)
  return body.length > 0 ? markdownOf(headed('SOAP'), body) : null
}

/** The cached rows' hit ratios and their comparisons against the issue's targets; null when none ran. */
function cacheRows (report: RunReport): string[][] | null {
  const ok = (name: string) => report.results.find((r) => r.name === name && r.status === 'ok')
  const cached = report.results.filter((r) => r.cacheHitRatio !== undefined)
  if (cached.length === 0) return null
  const hits = cached.map((r) => [r.name, r.status === 'ok' ? fixed(r.cacheHitRatio, 3) : r.status, '', '', ''])
  const comparisons = CACHE_TARGETS.flatMap(({ row, against, target }) => {
    const [a, b] = [ok(row), ok(against)]
    if (!a || !b) return []
    const { rps, cpu } = roundRatios(a, b)
    const verdict = target === null ? '' : `≥ ${target}: ${rps !== null && rps >= target ? 'met' : 'missed'}`
    return [[`${row} ÷ ${against}`, '', fixed(rps, 2), fixed(cpu, 2), verdict]]
  })
  return [...hits, ...comparisons]
}

export function cacheTextTable (report: RunReport): string | null {
  const body = cacheRows(report)
  return body ? alignedTable(CACHE_HEADER, body) : null
}

export function cacheMarkdownTable (report: RunReport): string | null {
  const body = cacheRows(report)
  return body ? markdownOf(CACHE_HEADER, body) : null
}

/** A small table for the terminal: the first and last columns aligned left, the figures between right. */
function alignedTable (header: string[], body: string[][]): string {
  const rows = [header, ...body]
  const widths = header.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)))
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === 0 || i === cells.length - 1 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd()
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n')
}

function markdownOf (header: string[], body: string[][]): string {
  return [
    `| ${header.join(' | ')} |`,
    `| ${header.map((_, i) => (i === 0 || i === header.length - 1 ? '---' : '---:')).join(' | ')} |`,
    ...body.map((r) => `| ${r.join(' | ')} |`)
  ].join('\n')
}

export function fanoutTextTable (report: RunReport): string | null {
  const body = fanoutRows(report)
  return body ? alignedTable(FANOUT_HEADER, body) : null
}

export function fanoutMarkdownTable (report: RunReport): string | null {
  const body = fanoutRows(report)
  return body ? markdownOf(FANOUT_HEADER, body) : null
}

export function markdownTable (report: RunReport): string {
  const rows = report.results.map(rowOf)
  return [
    `| ${HEADER.join(' | ')} |`,
    `| ${HEADER.map((_, i) => (i === 0 || i === HEADER.length - 1 ? '---' : '---:')).join(' | ')} |`,
    ...rows.map((r) => `| ${r.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`)
  ].join('\n')
}

/** The newest earlier full result in `dir` (not a smoke, not an --only subset), to compare with. */
export function previousReport (dir: string, before: string): RunReport | null {
  let names: string[]
  try {
    names = readdirSync(dir)
      .filter((n) => /^\d{4}-.*\.json$/.test(n) && n < before)
      .sort()
      .reverse()
  } catch {
    return null
  }
  for (const name of names) {
    try {
      const report = JSON.parse(readFileSync(join(dir, name), 'utf8')) as RunReport
      if (!report.smoke && !(report.options.only as string[] | undefined)?.length) return report
    } catch {
      // an unreadable file is not a baseline
    }
  }
  return null
}

export interface CheckOutcome {
  ok: boolean
  lines: string[]
}

/** Floors on a scenario's ratios to its guarded row: by req/s, and by server CPU per request. */
export interface GuardedFloors {
  guardedFloors?: Thresholds
  cpuGuardedFloors?: Thresholds
}

/**
 * Every scenario with a floor must have run cleanly at or above it (its ratio to its baseline row; with a
 * guarded floor, also its ratio to its guarded row, by req/s or by CPU); failures fail whatever the floor.
 */
export function checkThresholds (report: RunReport, thresholds: Thresholds, guarded: GuardedFloors = {}): CheckOutcome {
  const lines: string[] = []
  let ok = true
  for (const r of report.results) {
    if (r.status === 'failed') {
      ok = false
      lines.push(`FAIL ${r.name}: ${r.reason}`)
    }
  }
  const check = (floors: Thresholds, against: (r: Result) => [ratio: number | null | undefined, baseline: string]) => {
    for (const [name, floor] of Object.entries(floors)) {
      const r = report.results.find((x) => x.name === name)
      if (!r || r.status === 'skipped') {
        lines.push(
          `skip ${name}: not measured${r?.reason ? ` (${r.reason})` : ''}; floor ${floor.toFixed(2)} not checked`
        )
      } else if (r.status === 'ok') {
        const [measured, baseline] = against(r)
        const ratio = measured ?? 0
        const pass = ratio >= floor
        if (!pass) ok = false
        // Truncated, not rounded, when under: a failing ratio never reads as its floor ("0.45 < 0.45").
        const shown = pass ? ratio.toFixed(3) : (Math.floor(ratio * 1000) / 1000).toFixed(3)
        lines.push(
          `${pass ? 'pass' : 'FAIL'} ${name}: ${shown} × ${baseline} ${pass ? '>=' : '<'} floor ${floor.toFixed(2)}`
        )
      }
    }
  }
  check(thresholds, (r) => [r.ratioToRest, r.restBaseline ?? 'rest'])
  check(guarded.guardedFloors ?? {}, (r) => [r.ratioToGuarded, r.guardedBaseline ?? 'guarded'])
  check(guarded.cpuGuardedFloors ?? {}, (r) => [r.cpuRatioToGuarded, `${r.guardedBaseline ?? 'guarded'} by CPU µs/req`])
  return { ok, lines }
}

const escapeXml = (s: string) =>
  s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!)

/**
 * A horizontal bar chart: for each scenario its ratio to its `rest` route and to `limit`, the floor
 * (red tick) and the previous result's ratio to `rest` (black tick, with the change as a number).
 */
export function svgChart (report: RunReport, previous: RunReport | null, thresholds: Thresholds): string {
  const rows = report.results.filter((r) => r.kind === 'scenario' && r.ratioToRest != null)
  const prevOf = (name: string) => previous?.results.find((r) => r.name === name && r.status === 'ok')
  const max = Math.max(
    1,
    ...rows.flatMap((r) => [r.ratioToRest ?? 0, r.ratioToLimit ?? 0, prevOf(r.name)?.ratioToRest ?? 0])
  )
  const left = 190
  const width = 860
  const plot = width - left - 150
  const rowHeight = 46
  const top = 64
  const height = top + rows.length * rowHeight + 40
  const x = (v: number) => left + (v / max) * plot
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="12" y="22" font-size="15" font-weight="bold">Throughput ratios per scenario (${escapeXml(report.startedAt)}, ${escapeXml(report.commit)})</text>`,
    '<rect x="12" y="34" width="12" height="10" fill="#3b6fd8"/><text x="28" y="43">× rest (same store reads, no GraphQL)</text>',
    '<rect x="270" y="34" width="12" height="10" fill="#9ec5a8"/><text x="286" y="43">× limit (prebuilt bytes)</text>',
    '<line x1="450" y1="32" x2="450" y2="46" stroke="#d33" stroke-width="3"/><text x="456" y="43">floor</text>',
    `<line x1="510" y1="32" x2="510" y2="46" stroke="#000" stroke-width="2"/><text x="516" y="43">previous × rest${previous ? ` (${escapeXml(previous.startedAt)})` : ': none'}</text>`
  ]
  for (let v = 0; v <= max + 1e-9; v += max > 2 ? 0.5 : 0.25) {
    out.push(
      `<line x1="${x(v)}" y1="${top - 6}" x2="${x(v)}" y2="${height - 34}" stroke="#eee"/>`,
      `<text x="${x(v)}" y="${height - 20}" text-anchor="middle" fill="#666">${v.toFixed(2)}</text>`
    )
  }
  rows.forEach((r, i) => {
    const y = top + i * rowHeight
    const rest = r.ratioToRest ?? 0
    const limit = r.ratioToLimit ?? 0
    const prev = prevOf(r.name)?.ratioToRest
    const floor = thresholds[r.name]
    out.push(
      `<text x="${left - 8}" y="${y + 18}" text-anchor="end">${escapeXml(r.name)}${r.status === 'failed' ? ' (FAILED)' : ''}</text>`,
      `<rect x="${left}" y="${y + 4}" width="${x(rest) - left}" height="16" fill="#3b6fd8"/>`,
      `<rect x="${left}" y="${y + 22}" width="${x(limit) - left}" height="10" fill="#9ec5a8"/>`
    )
    if (floor !== undefined) { out.push(`<line x1="${x(floor)}" y1="${y}" x2="${x(floor)}" y2="${y + 36}" stroke="#d33" stroke-width="3"/>`) }
    if (prev != null) { out.push(`<line x1="${x(prev)}" y1="${y + 2}" x2="${x(prev)}" y2="${y + 22}" stroke="#000" stroke-width="2"/>`) }
    const delta = prev != null ? ` (${rest - prev >= 0 ? '+' : ''}${(rest - prev).toFixed(2)})` : ''
    out.push(
      `<text x="${Math.max(x(rest), x(limit), prev != null ? x(prev) : 0, floor !== undefined ? x(floor) : 0) + 6}" y="${y + 17}">${rest.toFixed(2)}${delta} · ${fixed(r.ratioToLimit, 2)}</text>`
    )
  })
  out.push('</svg>')
  return out.join('\n') + '\n'
}
