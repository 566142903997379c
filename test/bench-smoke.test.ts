// The benchmark suite in CI: a short smoke of every scenario (tiny rounds, thresholds not checked)
// proving each one runs against the real service and gets correct responses, plus the checks that
// keep a fast error from ever counting as throughput.
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t0, { test } from 'tap'
import { mintToken } from '../cli/mint-token.ts'
import { runFanout } from '../bench/fanout.ts'
import { startServer } from '../bench/processes.ts'
import { checkThresholds, fanoutTextTable, svgChart, textTable, type Result, type RunReport } from '../bench/report.ts'
import { guardedScenarios, serviceScenarios, type BenchData } from '../bench/scenarios.ts'

const REPO = new URL('..', import.meta.url).pathname
const data: BenchData = { users: [{ id: 'u1', token: 't1' }], adminToken: 'a', rooms: ['general'], runId: 'x' }

test('a response carrying GraphQL errors fails the scenario, whatever its HTTP status', async (t) => {
  const scenarios = serviceScenarios(data)
  const usersList = scenarios.find((s) => s.name === 'users-list')
  const userById = scenarios.find((s) => s.name === 'user-by-id')
  const errorBody = '{"data":null,"errors":[{"message":"Rate limit exceeded","extensions":{"code":"RATE_LIMITED"}}]}'
  t.notOk(usersList!.quickCheck(errorBody), 'the per-response check refuses an errors entry')
  t.notOk(
    usersList!.quickCheck('{"data":{"users":[]},"errors":[{"message":"x"}]}'),
    'partial data with errors is refused too'
  )
  t.match(
    usersList!.verify(usersList!.next(), { status: 200, contentType: 'application/json', body: errorBody }),
    /errors/
  )
  t.match(
    usersList!.verify(usersList!.next(), { status: 503, contentType: 'application/json', body: '{}' }),
    /HTTP 503/
  )
  const request = userById!.next()
  const wrongUser = '{"data":{"user":{"id":"u2","name":"A","email":"a@example.com"}}}'
  t.match(
    userById!.verify(request, { status: 200, contentType: 'application/json', body: wrongUser }),
    /asked for user u1/
  )
  const hiddenEmail = '{"data":{"user":{"id":"u1","name":"A","email":null}}}'
  t.match(
    userById!.verify(request, { status: 200, contentType: 'application/json', body: hiddenEmail }),
    /email not visible/
  )
  t.equal(
    userById!.verify(request, {
      status: 200,
      contentType: 'application/json; charset=utf-8',
      body: '{"data":{"user":{"id":"u1","name":"A","email":"a@example.com"}}}'
    }),
    null
  )
})

function report (results: Partial<Result>[]): RunReport {
  return {
    startedAt: '2026-01-01T00:00:00.000Z',
    finishedAt: '',
    command: '',
    commit: 'abc',
    smoke: false,
    machine: { cpus: 2, cpuModel: '', node: '24', platform: '' },
    options: {},
    notes: [],
    results: results.map((r) => ({ name: 'x', kind: 'scenario', store: 'sqlite', description: '', status: 'ok', ...r }))
  }
}

test('bench:check fails under a floor or on a failed scenario, and passes at the floors', async (t) => {
  const floors = { 'users-list': 0.5, 'user-by-id': 0.45 }
  t.ok(
    checkThresholds(
      report([
        { name: 'users-list', ratioToRest: 0.5 },
        { name: 'user-by-id', ratioToRest: 0.9 }
      ]),
      floors
    ).ok
  )
  const under = checkThresholds(
    report([
      { name: 'users-list', ratioToRest: 0.49 },
      { name: 'user-by-id', ratioToRest: 0.9 }
    ]),
    floors
  )
  t.notOk(under.ok)
  t.match(under.lines.join('\n'), /FAIL users-list: 0\.490 × rest < floor 0\.50/)
  // A ratio just under its floor must not read as equal to it.
  const justUnder = checkThresholds(
    report([
      { name: 'users-list', ratioToRest: 0.4996 },
      { name: 'user-by-id', ratioToRest: 0.9 }
    ]),
    floors
  )
  t.notOk(justUnder.ok)
  t.match(
    justUnder.lines.join('\n'),
    /FAIL users-list: 0\.499 × rest < floor 0\.50/,
    'shown truncated: 0.499, not 0.500'
  )
  const failed = checkThresholds(
    report([
      { name: 'users-list', ratioToRest: 2 },
      { name: 'create-user', status: 'failed', reason: '3 non-2xx responses' }
    ]),
    floors
  )
  t.notOk(failed.ok, 'a fast error is never throughput')
  t.match(failed.lines.join('\n'), /skip user-by-id: not measured/)
  // A guarded floor reads the ratio to the guarded row.
  const guarded = [
    { name: 'users-list', ratioToRest: 0.9, guardedBaseline: 'guarded-list', ratioToGuarded: 0.7 },
    { name: 'user-by-id', ratioToRest: 0.9 }
  ]
  const underGuarded = checkThresholds(report(guarded), floors, { guardedFloors: { 'users-list': 0.8 } })
  t.notOk(underGuarded.ok)
  t.match(underGuarded.lines.join('\n'), /FAIL users-list: 0\.700 × guarded-list < floor 0\.80/)
  t.ok(checkThresholds(report(guarded), floors, { guardedFloors: { 'users-list': 0.7 } }).ok)
  // And by server CPU per request.
  const byCpu = checkThresholds(report([{ ...guarded[0]!, cpuRatioToGuarded: 0.6 }, guarded[1]!]), floors, {
    cpuGuardedFloors: { 'users-list': 0.65 }
  })
  t.notOk(byCpu.ok)
  t.match(byCpu.lines.join('\n'), /FAIL users-list: 0\.600 × guarded-list by CPU µs\/req < floor 0\.65/)
})

test('the table shows each row against rest and against its guarded row, by req/s and by server CPU, with how busy each side was', async (t) => {
  const table = textTable(
    report([
      {
        name: 'rest-user',
        kind: 'baseline',
        rps: 20000,
        cpuMicrosPerRequest: 50,
        serverBusy: 0.97,
        clientBusy: 0.99,
        clientCpuMicrosPerRequest: 49
      },
      {
        name: 'guarded-user',
        kind: 'guarded',
        rps: 16000,
        ratioToRest: 0.8,
        cpuRatioToRest: 0.75,
        cpuMicrosPerRequest: 66,
        serverBusy: 0.98,
        clientBusy: 0.8,
        clientCpuMicrosPerRequest: 50
      },
      {
        name: 'user-by-id',
        rps: 10000,
        ratioToRest: 0.5,
        cpuRatioToRest: 0.45,
        guardedBaseline: 'guarded-user',
        ratioToGuarded: 0.625,
        cpuRatioToGuarded: 0.6,
        cpuMicrosPerRequest: 110,
        serverSystemShare: 0.3,
        serverBusy: 0.99,
        clientBusy: 0.5,
        clientCpuMicrosPerRequest: 50
      }
    ])
  )
  t.match(table, /scenario\s+req\/s\s+× rest\s+CPU × rest\s+× guarded\s+CPU × guarded\s+× limit/)
  t.match(table, /guarded-user\s+16000\s+0\.80\s+0\.75\s+–/)
  t.match(table, /user-by-id\s+10000\s+0\.50\s+0\.45\s+0\.63\s+0\.60\s+–\s+–\s+–\s+110\s+0\.30\s+0\.99\s+50\s+0\.50/)
})

test("a guarded row pays the service's protections: JWT, request and cost budgets with their headers, request id", async (t) => {
  const logDir = mkdtempSync(join(tmpdir(), 'bench-guarded-'))
  const secret = randomBytes(32).toString('hex')
  // A cost window of 5 units and a price of 3 per request: the second request of one caller is over it.
  const server = await startServer({
    name: 'guarded-test',
    script: 'bench/guarded-server.ts',
    env: {
      NODE_ENV: 'production',
      JWT_SECRET: secret,
      PARTNER_SECRET_KEY: randomBytes(32).toString('hex'),
      SQLITE_PATH: join(logDir, 'db.sqlite'),
      DEMO_DATA: 'true',
      RATE_LIMIT_COST: '5',
      GUARDED_COST_USER: '3',
      GUARDED_COST_LIST: '3'
    },
    logDir
  })
  t.teardown(async () => {
    await server.stop()
    rmSync(logDir, { recursive: true, force: true })
  })
  const jwt = {
    algorithms: ['HS256'],
    secret,
    publicKey: null,
    privateKey: null,
    issuer: null,
    audience: null,
    clockToleranceSec: 5
  }
  const rows = guardedScenarios({
    users: ['2', '3'].map((id) => ({ id, token: mintToken(jwt, id, 'USER') })),
    adminToken: 'a',
    rooms: [],
    runId: 'x',
    costs: { user: 3, list: 3 }
  })
  const [userGet, userPost] = ['guarded-user-get', 'guarded-user'].map((name) => rows.find((s) => s.name === name)!)
  const call = async (request: { method: string; path: string; headers: Record<string, string>; body?: string }) => {
    const response = await fetch(server.url + request.path, {
      method: request.method,
      headers: request.headers,
      body: request.body
    })
    return {
      status: response.status,
      contentType: response.headers.get('content-type') ?? '',
      headers: Object.fromEntries(response.headers),
      body: await response.text()
    }
  }
  const first = userGet!.next()
  const answer = await call(first)
  t.equal(userGet!.verify(first, answer), null, "the rest route's answer, to its user")
  t.equal(answer.headers['x-ratelimit-remaining'], '99', "the request budget's headers (production: 100 a window)")
  t.ok(answer.headers['x-request-id'], 'a request id')
  t.equal((await call(first)).status, 429, 'the cost budget is spent once per request, at the given price (3 + 3 > 5)')
  t.equal((await call(userPost!.next())).status, 429, 'the same caller by POST: the same cost budget')
  const post = userPost!.next()
  t.equal(
    post.body,
    JSON.stringify({ query: 'query UserById($id: ID!) { user(id: $id) { id name email } }', variables: { id: '3' } }),
    "the POST carries user-by-id's body"
  )
  const posted = await call(post)
  t.equal(userPost!.verify(post, posted), null, 'another caller has a budget of its own')
  t.equal(
    (await call({ ...post, headers: { ...post.headers, authorization: 'Bearer a.b.c' } })).status,
    401,
    'a bad token is refused: the JWT is checked'
  )
  t.equal(
    (await call({ ...post, headers: { authorization: post.headers.authorization! } })).status,
    415,
    'a POST without a JSON Content-Type is refused, as /graphql refuses it'
  )
})

test('the chart shows each ratio and its change since the previous result', async (t) => {
  const previous = report([{ name: 'users-list', ratioToRest: 0.6, ratioToLimit: 0.2 }])
  const svg = svgChart(report([{ name: 'users-list', ratioToRest: 0.7, ratioToLimit: 0.25 }]), previous, {
    'users-list': 0.5
  })
  t.match(svg, /^<svg /)
  t.match(svg, /users-list/)
  t.match(svg, /0\.70 \(\+0\.10\) · 0\.25/)
})

test('the fan-out table shows each row against the targets', async (t) => {
  const table = fanoutTextTable(
    report([
      {
        name: 'ws-broadcast',
        kind: 'baseline',
        connections: 10,
        rps: 1000,
        latencyMs: { p50: 1, p99: 2 },
        cpuMicrosPerRequest: 2,
        rssPerSubscriberBytes: 10240
      },
      {
        name: 'subscription-fanout',
        connections: 10,
        rps: 600,
        ratioToRest: 0.6,
        restBaseline: 'ws-broadcast',
        latencyMs: { p50: 2, p99: 3 },
        p99Ratio: 1.5,
        cpuMicrosPerRequest: 4,
        rssPerSubscriberBytes: 20480
      },
      {
        name: 'subscription-fanout-mixed',
        connections: 10,
        rps: 400,
        ratioToRest: 0.4,
        latencyMs: { p50: 2, p99: 5 },
        p99Ratio: 2.5,
        rssPerSubscriberBytes: 40960
      }
    ])
  )!
  t.match(table, /ws-broadcast\s+10\s+1000\s+2\.0\s+2\.0\s+10\.0\s+baseline/)
  t.match(table, /subscription-fanout\s+10\s+600\s+0\.60\s+3\.0\s+1\.50\s+4\.0\s+2\.00\s+20\.0\s+met/)
  t.match(table, /subscription-fanout-mixed .*missed: deliveries\/s, p99, RSS/)
  t.equal(
    fanoutTextTable(report([{ name: 'users-list', ratioToRest: 1 }])),
    null,
    'no fan-out table without fan-out rows'
  )
})

test('the mixed fan-out fails when every caller gets the same payload (ws-broadcast sends everyone the same bytes)', async (t) => {
  const logDir = mkdtempSync(join(tmpdir(), 'bench-fanout-'))
  // An anonymous caller's view: email null, with the field's error. The poster (subscriber 0) must see the email.
  const sample = JSON.stringify({
    data: { messageAdded: { id: '1', content: 'x', author: { name: 'A', email: null } } },
    errors: [
      {
        message: 'Authentication required',
        path: ['messageAdded', 'author', 'email'],
        extensions: { code: 'UNAUTHENTICATED' }
      }
    ]
  })
  const server = await startServer({
    name: 'ws-broadcast-test',
    script: 'bench/fanout-baseline-server.ts',
    env: { FANOUT_SAMPLE: sample },
    logDir
  })
  t.teardown(async () => {
    await server.stop()
    rmSync(logDir, { recursive: true, force: true })
  })
  const users = Array.from({ length: 4 }, (_, i) => ({ id: `u${i}`, token: `t${i}` }))
  const fanoutData: BenchData = { users, adminToken: 'a', rooms: ['general'], runId: 'test' }
  const options = {
    subscribers: 4,
    messages: 3,
    selection: 'mixed' as const,
    anonymousHalf: true,
    rssBytes: () => server.rssBytes(),
    cpuMicros: () => server.cpuMicros(),
    log: () => {}
  }
  const unchecked = await runFanout(server.url, fanoutData, { ...options, checkVisibility: false })
  t.equal(unchecked.status, 'ok', `the lean clients take ws-broadcast's messages: ${unchecked.reason ?? ''}`)
  t.equal(unchecked.requests, 12, 'every delivery counted')
  t.type(unchecked.rssPerSubscriberBytes, 'number', 'RSS per subscriber read from /proc')
  const checked = await runFanout(server.url, fanoutData, { ...options, checkVisibility: true })
  t.equal(checked.status, 'failed')
  t.match(
    checked.reason,
    /3 deliveries showed the author's email to another caller or hid it from its owner/,
    'the poster, a subscriber, never saw its own email'
  )
})

/**
 * The smoke starts every row's server (about forty: the service in its settings, embedded and deployed,
 * the baselines, the peers with and without their caches, two instances behind nginx) and measures each
 * for half a second: 110-150 s on a 2-CPU machine with another test file running beside it (tap runs
 * two), more when the machine is busier. It checks that every row runs and answers correctly, not how
 * fast, so it gets room beyond tap's 120 s per file.
 */
const SMOKE_TIMEOUT_MS = 300_000
t0.setTimeout(SMOKE_TIMEOUT_MS + 40_000)

test('npm run bench -- --smoke: every scenario runs against the real service and answers correctly', async (t) => {
  const out = mkdtempSync(join(tmpdir(), 'bench-smoke-'))
  t.teardown(() => rmSync(out, { recursive: true, force: true }))
  const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
  const run = spawnSync(process.execPath, ['bench/run.ts', '--smoke', '--results-dir', out], {
    cwd: REPO,
    env: { ...process.env, DATABASE_URL: databaseUrl },
    encoding: 'utf8',
    timeout: SMOKE_TIMEOUT_MS
  })
  const output = `${run.stdout}\n${run.stderr}`
  t.equal(run.status, 0, `the smoke run exits 0 (PostgreSQL must answer at ${databaseUrl}):\n${output}`)
  const file = readdirSync(out).find((n) => n.endsWith('.json'))
  if (!file) return t.fail(`no results JSON written:\n${output}`)
  const written = JSON.parse(readFileSync(join(out, file), 'utf8')) as RunReport
  const byName = new Map(written.results.map((r) => [r.name, r]))
  for (const name of [
    'limit',
    'rest-list',
    'rest-user',
    'rest-messages',
    'rest-create',
    'rest-list-postgres',
    'rest-user-postgres',
    'guarded-list',
    'guarded-user-get',
    'guarded-user',
    'users-list',
    'users-page-50',
    'user-by-id',
    'messages-authors',
    'create-user',
    'users-list-deployed',
    'user-by-id-deployed',
    'persisted-get-deployed',
    'cached-mixed-deployed',
    'soap-get-user-deployed',
    // The partners' rows: each way a partner authenticates (the signed one's messages made before each
    // round and each accepted once), ListUsers paging, and node-soap answering the same envelopes.
    'soap-get-user-text',
    'soap-get-user-signed',
    'soap-list-users',
    'node-soap-get-user',
    'cached-persisted-get-deployed-x2',
    'apollo-users-list',
    'yoga-users-list',
    'apollo-user-by-id',
    'yoga-user-by-id',
    // Each sampled answer of these was checked to come from the peer's own cache (in memory, on Redis)
    // or the service's (Age).
    'apollo-cached-user-get',
    'yoga-cached-user-get',
    'apollo-cached-user-get-deployed',
    'yoga-cached-user-get-deployed',
    'cached-persisted-get-deployed'
  ]) {
    const r = byName.get(name)
    t.equal(r?.status, 'ok', `${name} ran and answered correctly${r?.reason ? `: ${r.reason}` : ''}`)
    t.ok((r?.requests ?? 0) > 0, `${name} served requests`)
    t.equal(r?.non2xx, 0, `${name}: no non-2xx`)
  }
  // Scenarios whose transport lands separately either run cleanly or say why they are skipped.
  for (const name of [
    'persisted-get',
    // Each sampled answer checked to be a hit of the service's response cache (Age).
    'cached-persisted-get',
    'cached-mixed',
    'soap-get-user',
    'ws-broadcast',
    'subscription-fanout',
    'ws-broadcast-mixed',
    'subscription-fanout-mixed'
  ]) {
    const r = byName.get(name)
    t.ok(
      r?.status === 'ok' || (r?.status === 'skipped' && /transport not available yet/.test(r.reason ?? '')),
      `${name}: ${r?.status} ${r?.reason ?? ''}`
    )
  }
  for (const name of ['subscription-fanout', 'subscription-fanout-mixed']) {
    const r = byName.get(name)!
    if (r.status !== 'ok') continue
    t.ok(r.ratioToRest! > 0 && r.p99Ratio! > 0, `${name}: deliveries/s and p99 as ratios to its ws-broadcast row`)
    t.type(r.rssPerSubscriberBytes, 'number', `${name}: server RSS per subscriber`)
  }
  t.match(output, /fan-out row\s+subscribers\s+deliveries\/s/, 'the fan-out table is printed')
  for (const name of ['cached-persisted-get', 'apollo-cached-user-get', 'yoga-cached-user-get']) {
    t.type(byName.get(name)!.cacheHitRatio, 'number', `${name}: its hit ratio over the measured round`)
  }
  t.match(
    output,
    /cached-persisted-get ÷ persisted-get\s+\d+\.\d+\s+\d+\.\d+\s+≥ 2: /,
    "the response cache's table: the issue's ratios with their targets"
  )
  t.match(output, /cached-persisted-get-deployed ÷ cached-persisted-get\s+\d+\.\d+\s+\d+\.\d+\s+≥ 0\.87: /,
    "the deployed table: the issue's ratios by CPU, with their targets")
  t.match(output, /soap-get-user ÷ node-soap-get-user\s+\d+\.\d+\s+\d+\.\d+\s+≥ 1\.50: /,
    "the SOAP table: the issue's ratios by CPU, with their targets")
  t.type(byName.get('cached-persisted-get-deployed-x2')!.details?.ratioToOneInstance, 'number', 'two instances against one')
  t.ok(byName.get('users-list')!.ratioToRest! > 0, 'ratios are computed from the same run')
  for (const [name, guarded] of [
    ['users-list', 'guarded-list'],
    ['user-by-id', 'guarded-user'],
    ['apollo-user-by-id', 'guarded-user']
  ]) {
    const r = byName.get(name)!
    t.equal(r.guardedBaseline, guarded, `${name} is compared with ${guarded}`)
    t.ok(
      r.ratioToGuarded! > 0 && r.cpuRatioToGuarded! > 0 && r.cpuRatioToRest! > 0,
      `${name}: ratios to its guarded row and by CPU`
    )
  }
  t.ok(byName.get('guarded-user')!.ratioToRest! > 0, 'a guarded row is compared with rest')
  t.ok(byName.get('rest-user')!.clientBusy! > 0, "the load generator's CPU is measured")
  t.match(output, /scenario\s+req\/s\s+× rest\s+CPU × rest\s+× guarded/, 'the table is printed')
  t.ok(
    readdirSync(out).some((n) => n.endsWith('.svg')),
    'the chart is written'
  )
})
