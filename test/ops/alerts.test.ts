// The dashboard and the alerts (deploy/grafana/dashboard.json, deploy/prometheus/): Prometheus's own
// promtool checks the rules and the configuration, runs each alert on series written here (firing when it
// should, quiet when it should not), and parses every query of the dashboard; and every metric the rules
// and the dashboard name is one a listening service exports.
import { test } from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parse, stringify } from 'yaml'
import { gql, listenTestApp } from '../helpers/app.ts'
import { REPO } from '../helpers/server-process.ts'

const RULES = join(REPO, 'deploy/prometheus/alerts.yml')
const dashboard = JSON.parse(readFileSync(join(REPO, 'deploy/grafana/dashboard.json'), 'utf8'))
const rules = (parse(readFileSync(RULES, 'utf8')) as { groups: { rules: { alert: string; expr: string }[] }[] }).groups
  .flatMap((g) => g.rules)

function promtool (...args: string[]) {
  const found = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' })
  if (found.status !== 0) throw new Error('promtool is not installed: apt-get install -y prometheus (.ci/system-deps.sh installs it)')
  return spawnSync(found.stdout.trim(), args, { encoding: 'utf8', cwd: REPO })
}

function scratch (t: { teardown (fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'alerts-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Every query of the dashboard, with Grafana's variables given values Prometheus can parse. */
const dashboardQueries: string[] = (dashboard.panels as { targets?: { expr: string }[] }[])
  .flatMap((panel) => panel.targets ?? [])
  .map((target) => target.expr)
  .concat((dashboard.templating.list as { query: unknown }[]).flatMap((v) => {
    const query = (v.query as { query?: string })?.query
    return typeof query === 'string' ? [query] : []
  }))
const asPromQL = (expr: string) => expr
  .replace(/label_values\(([^,]+),\s*\w+\)/, '$1')
  .replaceAll('$__rate_interval', '5m')
  .replaceAll('$job', 'graphql-query-service')
  .replaceAll('$instance', '.*')

/** Metric names a PromQL expression reads: identifiers outside label matchers, ranges, strings and grouping. */
export function metricNames (expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
  const keywords = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'inf', 'nan'])
  return [...bare.matchAll(/([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?/g)]
    .filter((m) => !m[2] && !keywords.has(m[1]!.toLowerCase()))
    .map((m) => m[1]!)
}

test('promtool accepts the rules, the configuration that loads them, and every query of the dashboard', async (t) => {
  const checked = promtool('check', 'rules', RULES)
  t.equal(checked.status, 0, checked.stdout + checked.stderr)
  const config = promtool('check', 'config', join(REPO, 'deploy/prometheus/prometheus.yml'))
  t.equal(config.status, 0, config.stdout + config.stderr)

  // The dashboard's queries, as recording rules: promtool parses each one.
  const dir = scratch(t)
  const asRules = { groups: [{ name: 'dashboard', rules: dashboardQueries.map((expr, i) => ({ record: `dashboard:query_${i}`, expr: asPromQL(expr) })) }] }
  writeFileSync(join(dir, 'dashboard-queries.yml'), stringify(asRules))
  const queries = promtool('check', 'rules', join(dir, 'dashboard-queries.yml'))
  t.equal(queries.status, 0, queries.stdout + queries.stderr)
  t.ok(dashboardQueries.length >= 20, `${dashboardQueries.length} queries`)
})

test('the dashboard: importable JSON, every panel on the datasource variable, the job and instance selected', async (t) => {
  t.equal(dashboard.uid, 'graphql-query-service')
  const variables = (dashboard.templating.list as { name: string }[]).map((v) => v.name)
  t.same(variables, ['datasource', 'job', 'instance'])
  type Panel = { type: string; title: string; datasource?: { uid: string }; targets?: { expr: string }[] }
  // Grafana's reference to the datasource variable, written as Grafana writes it.
  const chosenDatasource = '$' + '{datasource}'
  for (const panel of dashboard.panels as Panel[]) {
    if (panel.type === 'row') continue
    t.equal(panel.datasource?.uid, chosenDatasource, `${panel.title}: the chosen Prometheus`)
    for (const { expr } of panel.targets!) t.match(expr, /job="\$job", instance=~"\$instance"/, `${panel.title}: one job's chosen instances`)
  }
})

const JOB = 'graphql-query-service'
const at = (labels: Record<string, string>) => `{${Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(',')}}`
/** A series that grows by `perMinute` every minute for an hour (one sample a minute). */
const counter = (name: string, labels: Record<string, string>, perMinute: number) =>
  ({ series: `${name}${at(labels)}`, values: `0+${perMinute}x60` })
const a = { job: JOB, instance: 'a:9464' }
const quiet = { job: 'quiet', instance: 'q:9464' }
const requests = (labels: Record<string, string>, status: string, perMinute: number, route = '/graphql') =>
  counter('http_requests_total', { ...labels, method: 'POST', route, status_code: status }, perMinute)
const buckets = (labels: Record<string, string>, route: string, counts: Record<string, number>) =>
  Object.entries(counts).map(([le, perMinute]) => counter('http_request_duration_seconds_bucket', { ...labels, method: 'GET', route, le }, perMinute))

/** Each alert on series that fire it, beside series that must not. */
const unitTests = [
  {
    name: 'an instance whose scrape fails',
    input_series: [{ series: `up${at(a)}`, values: '1 1 0 0 0 0 0' }, { series: `up${at({ ...a, instance: 'b:9464' })}`, values: '1 1 1 1 1 1 1' }],
    alert_rule_test: [{
      eval_time: '6m',
      alertname: 'GraphQLServiceDown',
      exp_alerts: [{
        exp_labels: { ...a, severity: 'page' },
        exp_annotations: {
          summary: 'Instance a:9464 is not answering its metrics scrape',
          description: 'Prometheus could not scrape a:9464 for 2 minutes: the process is down or its METRICS_PORT unreachable.'
        }
      }]
    }]
  },
  {
    name: '10% of requests answered 5xx (and 1% in another job)',
    input_series: [
      requests(a, '200', 540), requests(a, '503', 60),
      requests(quiet, '200', 594), requests(quiet, '500', 6)
    ],
    alert_rule_test: [
      { eval_time: '4m', alertname: 'GraphQLServiceHighErrorRatio', exp_alerts: [] },
      {
        eval_time: '15m',
        alertname: 'GraphQLServiceHighErrorRatio',
        exp_alerts: [{
          exp_labels: { job: JOB, severity: 'page' },
          exp_annotations: {
            summary: '10% of requests answered 5xx',
            description: 'More than 5% of requests have been answered with a 5xx status for 5 minutes: see the error codes panel and the instances\' warn/error log lines.'
          }
        }]
      }
    ]
  },
  {
    name: 'a p99 between 1 and 2.5 s; health probes do not count',
    input_series: [
      ...buckets(a, '/graphql', { 0.5: 0, 1: 0, 2.5: 60, '+Inf': 60 }),
      ...buckets(quiet, '/graphql', { 0.5: 60, 1: 60, 2.5: 60, '+Inf': 60 }),
      ...buckets(quiet, '/health/ready', { 0.5: 0, 1: 0, 2.5: 0, '+Inf': 60 })
    ],
    alert_rule_test: [{
      eval_time: '20m',
      alertname: 'GraphQLServiceSlowRequests',
      exp_alerts: [{
        exp_labels: { job: JOB, severity: 'warn' },
        exp_annotations: {
          summary: 'p99 request duration 2.485s',
          description: 'The 99th percentile of request durations has been over 1 s for 10 minutes: the store, Redis or CPU is saturated.'
        }
      }]
    }]
  },
  {
    name: '20% of requests refused by the budgets (5% in another job)',
    input_series: [
      requests(a, '200', 480), requests(a, '429', 120), counter('rate_limit_rejections_total', { ...a, route: '/graphql' }, 120),
      requests(quiet, '200', 570), requests(quiet, '429', 30), counter('rate_limit_rejections_total', { ...quiet, route: '/graphql' }, 30)
    ],
    alert_rule_test: [{
      eval_time: '25m',
      alertname: 'GraphQLServiceBudgetRefusals',
      exp_alerts: [{
        exp_labels: { job: JOB, severity: 'warn' },
        exp_annotations: {
          summary: '20% of requests refused by the budgets',
          description: 'More than 10% of requests have been refused 429 for 10 minutes: a client over RATE_LIMIT_REQUESTS / RATE_LIMIT_COST, or budgets too tight for real traffic.'
        }
      }]
    }]
  },
  {
    name: 'a 10% hit ratio on 10 reads a second; a low ratio on too little traffic to judge is quiet',
    input_series: [
      counter('graphql_response_cache_hits_total', a, 60), counter('graphql_response_cache_misses_total', a, 540),
      counter('graphql_response_cache_hits_total', quiet, 6), counter('graphql_response_cache_misses_total', quiet, 24)
    ],
    alert_rule_test: [{
      eval_time: '50m',
      alertname: 'GraphQLServiceCacheHitRatioLow',
      exp_alerts: [{
        exp_labels: { job: JOB, severity: 'warn' },
        exp_annotations: {
          summary: 'Response cache hit ratio 10%',
          description: 'Fewer than 30% of cacheable reads have been answered from the response cache for 30 minutes: entries expire before they are read again (RESPONSE_CACHE_TTL_MS), writes invalidate them, or the cache is bypassed (see GraphQLServiceChangeFeedDown).'
        }
      }]
    }]
  },
  {
    name: 'an instance whose change feed is down',
    input_series: [
      { series: `graphql_response_cache_serving${at({ ...a, store: 'redis' })}`, values: '1 1 0 0 0 0' },
      { series: `graphql_response_cache_serving${at({ ...a, instance: 'b:9464', store: 'redis' })}`, values: '1 1 1 1 1 1' }
    ],
    alert_rule_test: [{
      eval_time: '5m',
      alertname: 'GraphQLServiceChangeFeedDown',
      exp_alerts: [{
        exp_labels: { ...a, store: 'redis', severity: 'warn' },
        exp_annotations: {
          summary: 'Response cache bypassed on a:9464: the change feed is down',
          description: 'For 2 minutes a:9464 could not see or apply changes made beside the service, so its response cache answers nothing (correct, but every read executes). Check the instance\'s LISTEN connection to PostgreSQL (direct, not through a transaction pooler) and Redis.'
        }
      }]
    }]
  },
  {
    name: 'an instance without its event bus',
    input_series: [
      { series: `event_bus_connected${at(a)}`, values: '1 0 0 0' },
      { series: `event_bus_connected${at({ ...a, instance: 'b:9464' })}`, values: '1 1 1 1' }
    ],
    alert_rule_test: [{
      eval_time: '3m',
      alertname: 'GraphQLServiceEventBusDown',
      exp_alerts: [{
        exp_labels: { ...a, severity: 'page' },
        exp_annotations: {
          summary: 'Event bus down on a:9464',
          description: 'a:9464 has had no Redis pub/sub connection for a minute: subscriptions there receive no events from other instances, and its own events reach no other instance.'
        }
      }]
    }]
  },
  {
    name: 'log lines dropped, then none',
    input_series: [
      { series: `log_lines_dropped_total${at(a)}`, values: '0 0 0 120 120 120 120 120 120 120 120 120' },
      { series: `log_lines_dropped_total${at({ ...a, instance: 'b:9464' })}`, values: '0 0 0 0 0 0 0 0 0 0 0 0' }
    ],
    alert_rule_test: [
      {
        eval_time: '4m',
        alertname: 'GraphQLServiceLogLinesDropped',
        exp_alerts: [{
          exp_labels: { ...a, severity: 'warn' },
          exp_annotations: {
            summary: 'a:9464 dropped log lines',
            description: 'Standard output was not read fast enough and 16 MiB of log lines were waiting: lines were dropped rather than grow the process. Check the log collector.'
          }
        }]
      },
      { eval_time: '11m', alertname: 'GraphQLServiceLogLinesDropped', exp_alerts: [] }
    ]
  }
]

test('promtool test rules: each alert fires on the series written here, and stays quiet where it should', async (t) => {
  const tested = new Set(unitTests.flatMap((u) => u.alert_rule_test.map((r) => r.alertname)))
  t.same([...tested].sort(), rules.map((r) => r.alert).sort(), 'every alert is tested')
  const dir = scratch(t)
  const file = join(dir, 'alerts.test.yml')
  writeFileSync(file, stringify({ rule_files: [RULES], evaluation_interval: '1m', tests: unitTests.map((u) => ({ interval: '1m', ...u })) }))
  const run = promtool('test', 'rules', file)
  t.equal(run.status, 0, run.stdout + run.stderr)
  t.match(run.stdout, /SUCCESS/)
})

test('every metric the rules and the dashboard name is exported by the service', async (t) => {
  const { url } = await listenTestApp(t)
  // A query and a SOAP fault, so that the request histogram has a series (families without samples print no TYPE).
  t.equal((await gql(url, '{ users { id } }')).status, 200)
  await fetch(`${url}/v1/UserService`, { method: 'POST', headers: { 'content-type': 'text/xml' }, body: '<x/>' })
  const exposition = await (await fetch(`${url}/metrics`)).text()
  const exported = new Set<string>()
  for (const [, name, type] of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    exported.add(name!)
    if (type === 'histogram' || type === 'summary') for (const suffix of ['_bucket', '_sum', '_count']) exported.add(name! + suffix)
  }
  // Written by Prometheus itself for every target it scrapes.
  const prometheusOwn = new Set(['up'])
  const named = new Map<string, string>()
  for (const rule of rules) for (const name of metricNames(rule.expr)) named.set(name, `alert ${rule.alert}`)
  for (const expr of dashboardQueries) for (const name of metricNames(asPromQL(expr))) named.set(name, 'the dashboard')
  t.ok(named.size >= 20, `${named.size} metrics named`)
  for (const [name, where] of named) {
    if (prometheusOwn.has(name)) continue
    t.ok(exported.has(name), `${name} (${where}) is exported`)
  }
  t.same(metricNames('sum by (job, le) (rate(x_bucket{route!~"/health/.*"}[5m])) / on(job) y > 0.5 and z == bool 1'), ['x_bucket', 'y', 'z'],
    'the names are read from the queries, not from their functions, labels or ranges')
})
