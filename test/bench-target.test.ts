// `npm run bench -- --target URL` tells the truth about a deployment it did not start:
// - against a listening service at its default limits it says at once, before any load, that the limits
//   would refuse its callers and which settings to raise (exit 2), and the service sees only its probes;
// - with the limits raised every row runs, SOAP included (in the namespace the service's WSDL declares:
//   its default URN here), and rows the service cannot run (ad-hoc POSTs on a persisted-only service)
//   print one line saying why;
// - against fake targets that drop requests, answer after the timeout, answer 429 or answer wrongly (a
//   null user, another user's record, the wrong shape), every request is counted once, as the fake
//   served it: req/s counts the correct answers only, latency every answer, and the run exits 1;
// - a wrong URL, refused tokens or unknown operations stop the run with one line (exit 2).
import { test } from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { createServer, type ServerResponse } from 'node:http'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY, type TestLike } from './helpers/app.ts'
import { REPO, freePort, startService } from './helpers/server-process.ts'
import { MANIFEST_FILE, manifest } from './persisted/helpers.ts'

function scratch (t: TestLike): string {
  const dir = mkdtempSync(join(tmpdir(), 'bench-target-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** A production service on a file of its own: the defaults, with `env` on top. */
async function service (t: TestLike, env: Record<string, string> = {}) {
  const sqlite = join(scratch(t), 'service.db')
  const started = await startService(t, {
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    // Given, so a service at warn (no address logged) is found by its /health/live.
    PORT: String(await freePort()),
    LOG_LEVEL: 'info',
    SQLITE_PATH: sqlite,
    DEMO_DATA: 'true',
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    PERSISTED_MANIFEST: MANIFEST_FILE,
    ...env
  })
  return { ...started, sqlite }
}

/** Limits out of the load's reach, as docs/operations.md tells an operator to set them for the run. */
const RAISED = { RATE_LIMIT_REQUESTS: '100000000', RATE_LIMIT_COST: '10000000000' }

interface Run { status: number | null; stdout: string; stderr: string }

/** The bench against `url`, a short run; asynchronous, so a fake target in this process can answer it. */
function benchTarget (url: string, args: string[] = [], env: Record<string, string> = {}): Promise<Run> {
  const child = spawn(process.execPath, [
    'bench/run.ts', '--target', url, '--duration', '1', '--rounds', '1', '--warmup', '0', '--connections', '4', ...args
  ], { cwd: REPO, env: { PATH: process.env.PATH ?? '', JWT_SECRET: TEST_JWT_SECRET, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d) => { stdout += d })
  child.stderr.on('data', (d) => { stderr += d })
  const timer = setTimeout(() => child.kill('SIGKILL'), 90_000)
  return new Promise((resolve) => child.on('exit', (status) => { clearTimeout(timer); resolve({ status, stdout, stderr }) }))
}

const requestsSeen = (out: string) => out.split('\n').filter((line) => line.includes('"msg":"request completed"')).length

test('a service at its default limits: the run is refused before any load, saying which settings to raise', async (t) => {
  const target = await service(t)
  const run = await benchTarget(target.url, ['--duration', '10'])
  t.equal(run.status, 2, run.stdout + run.stderr)
  t.equal(run.stdout, '', 'no round, no table')
  const lines = run.stderr.trim().split('\n')
  t.equal(lines.length, 1, 'one line')
  t.match(lines[0], new RegExp(`^bench: ${target.url} would refuse this run with 429 RATE_LIMITED: persisted-get would send about \\d+ requests per caller \\(each of 5 users\\) before the budget window resets in \\d+ s, and the target allows \\d+ more requests \\(x-ratelimit-limit: 100 per caller\\)\\. Raise the target's RATE_LIMIT_REQUESTS and RATE_LIMIT_COST for the run`))
  t.match(lines[0], /docs\/operations\.md#load-testing-a-deployment$/)
  // Let the access lines of the probes reach standard output (written in batches every 200 ms).
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.ok(requestsSeen(target.stdout()) <= 12, `the service saw the probes only (${requestsSeen(target.stdout())} requests)`)
})

test('limits raised: every row runs, SOAP in the WSDL\'s namespace; a persisted-only service\'s POST rows are one line each', async (t) => {
  const target = await service(t, { ...RAISED, LOG_LEVEL: 'warn' })
  const partner = spawnSync(process.execPath, ['cli/create-partner.ts', '--login', 'loadtest', '--password', 'load-test-password'], {
    cwd: REPO, env: { PATH: process.env.PATH ?? '', SQLITE_PATH: target.sqlite, PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY }, encoding: 'utf8'
  })
  t.equal(partner.status, 0, partner.stderr)
  const wsdl = await (await fetch(`${target.url}/v1/UserService?wsdl`)).text()
  t.match(wsdl, /targetNamespace="urn:graphql-query-service:soap\/v1\/UserService"/, 'the service runs its default namespace')

  const run = await benchTarget(target.url, [], { BENCH_SOAP_LOGIN: 'loadtest', BENCH_SOAP_PASSWORD: 'load-test-password' })
  t.equal(run.status, 0, run.stdout + run.stderr)
  t.match(run.stdout, /^row\s+ok req\/s\s+sent\s+ok\s+non-2xx\s+wrong\s+no answer\s+p50 ms\s+p99 ms\s+max ms\s+result$/m, 'the table')
  for (const row of ['persisted-get', 'persisted-users-list', 'soap-get-user']) {
    t.match(run.stdout, new RegExp(`^${row}\\s+\\d+\\s+(\\d+)\\s+\\1\\s+0\\s+0\\s+0\\s+\\d+\\.\\d\\s+\\d+\\.\\d\\s+\\d+\\.\\d\\s+ok$`, 'm'), `${row}: every request sent answered ok`)
  }
  for (const row of ['user-by-id', 'users-list']) {
    t.match(run.stdout, new RegExp(`^${row}\\s+skipped: the service refuses ad-hoc queries \\(PERSISTED_QUERY_REQUIRED\\): it takes persisted operations only$`, 'm'), `${row}: one line`)
  }
  t.notMatch(run.stdout, /–/, 'no columns of dashes')

  const adHoc = await service(t, { ...RAISED, LOG_LEVEL: 'warn', PERSISTED_ONLY: 'false' })
  const posts = await benchTarget(adHoc.url, ['--only', 'user-by-id', '--only', 'users-list'])
  t.equal(posts.status, 0, posts.stdout + posts.stderr)
  t.match(posts.stdout, /^user-by-id\s+\d+\s+(\d+)\s+\1\s+0\s+0\s+0\s.*ok$/m)
  t.match(posts.stdout, /^users-list\s+\d+\s+(\d+)\s+\1\s+0\s+0\s+0\s.*ok$/m)
})

/** Which misbehaviour the fake shows for the n-th UserById request of the load (after the first HEALTHY). */
const MISBEHAVIOURS = ['ok', 'drop', 'delay', 'null', 'other', 'shape', 'refuse', 'ok', 'ok', 'ok'] as const
type Served = (typeof MISBEHAVIOURS)[number]
/** The probes' requests (the token check and three samples) and a few more are answered well. */
const HEALTHY = 10

/**
 * A fake deployment: the persisted Users and UserById operations of five users, with generous budget
 * headers, refusing ad-hoc POSTs. Past its first HEALTHY reads of a user it misbehaves in turn: never
 * answers, answers after 3 s, answers a null user, another user's record, a user without its name, or 429.
 */
async function fakeTarget (t: TestLike) {
  const users = ['1', '2', '3', '4', '5'].map((id) => ({ id, name: `User ${id}`, createdAt: '2026-01-01T00:00:00.000Z' }))
  const byName = (name: string) => manifest.operations.find((o) => o.name === name)!.id
  const served: Record<Served, number> = { ok: 0, drop: 0, delay: 0, null: 0, other: 0, shape: 0, refuse: 0 }
  const held: ServerResponse[] = []
  let reads = 0
  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-ratelimit-limit': '100000000', 'x-ratelimit-remaining': '99999999', 'x-ratelimit-reset': '60' })
    res.end(JSON.stringify(body))
  }
  const server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://fake')
    if (req.method === 'POST') return json(res, 200, { errors: [{ message: 'persisted only', extensions: { code: 'PERSISTED_QUERY_REQUIRED' } }] })
    const queryId = url.searchParams.get('queryId')?.replace('sha256:', '')
    const variables = JSON.parse(url.searchParams.get('variables') ?? '{}')
    if (queryId === byName('Users')) return json(res, 200, { data: { users: users.slice(0, variables.limit) } })
    if (queryId !== byName('UserById')) return json(res, 404, { errors: [{ message: 'unknown', extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' } }] })
    const user = users.find((u) => u.id === variables.id)!
    const kind: Served = ++reads <= HEALTHY ? 'ok' : MISBEHAVIOURS[reads % MISBEHAVIOURS.length]!
    served[kind]++
    if (kind === 'ok') return json(res, 200, { data: { user: { id: user.id, name: user.name } } })
    if (kind === 'drop') return held.push(res)
    if (kind === 'delay') return setTimeout(() => json(res, 200, { data: { user: { id: user.id, name: user.name } } }), 3000)
    if (kind === 'null') return json(res, 200, { data: { user: null } })
    if (kind === 'other') return json(res, 200, { data: { user: users.find((u) => u.id !== user.id) } })
    if (kind === 'shape') return json(res, 200, { data: { user: { id: user.id } } })
    json(res, 429, { errors: [{ message: 'Rate limit exceeded', extensions: { code: 'RATE_LIMITED' } }] })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const res of held) res.destroy()
    server.closeAllConnections()
    server.close()
  })
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, served }
}

test('fake targets that drop, delay and answer wrongly: every request counted once, as it was served', async (t) => {
  const fake = await fakeTarget(t)
  const results = scratch(t)
  const run = await benchTarget(fake.url, ['--only', 'persisted-get', '--results-dir', results])
  t.equal(run.status, 1, `the run fails: ${run.stderr}`)
  const { served } = fake
  for (const kind of ['drop', 'delay', 'null', 'other', 'shape', 'refuse'] as const) t.ok(served[kind] > 0, `the fake ${kind}ed some requests (${served[kind]})`)
  const [file] = readdirSync(results)
  const row = (JSON.parse(readFileSync(join(results, file!), 'utf8')) as { results: any[] }).results.find((r) => r.name === 'persisted-get')
  const probes = 4 // the token check and three samples, before the load
  t.same(row.details, {
    ...row.details,
    sent: served.ok - probes + served.drop + served.delay + served.null + served.other + served.shape + served.refuse,
    ok: served.ok - probes,
    non2xx: served.refuse,
    wrong: served.null + served.other + served.shape,
    noAnswer: served.drop + served.delay
  }, 'dropped and late requests have no answer; null, another user\'s record and the wrong shape are wrong; 429s are non-2xx')
  t.equal(row.details.answered, row.details.ok + row.details.wrong + row.details.non2xx, 'latency covers every answer, whatever it was')
  t.equal(Math.round(row.rps * row.durationSec), row.details.ok, 'req/s counts the correct answers only')
  t.ok(row.durationSec >= 2, `the round lasted until its last request ended: the late ones waited for (${row.durationSec} s)`)
  t.equal(row.status, 'failed')
  t.match(row.reason, /non-2xx \(first: HTTP 429 .*RATE_LIMITED/)
  t.match(row.reason, /wrong answers \(first: (asked for user \d, got .*)\)/)
  t.match(row.reason, /without an answer \(first: no answer within 2 s\)/)
  t.match(run.stdout, new RegExp(`^persisted-get\\s+\\d+\\s+${row.details.sent}\\s+${row.details.ok}\\s+${row.details.non2xx}\\s+${row.details.wrong}\\s+${row.details.noAnswer}\\s.*FAILED: \\d+ of ${row.details.sent} requests failed`, 'm'), 'the table says the same')
})

test('a wrong URL, refused tokens, or unknown operations: one line saying which, and exit 2', async (t) => {
  const closed = `http://127.0.0.1:${await freePort()}`
  const nobody = await benchTarget(closed)
  t.equal(nobody.status, 2)
  t.equal(nobody.stderr.trim(), `bench: ${closed} does not answer: ECONNREFUSED`)
  t.equal(nobody.stdout.trim(), '', 'no table of zeros')

  const { url } = await service(t, RAISED)
  const wrongKey = await benchTarget(url, [], { JWT_SECRET: 'another-secret-that-is-also-long-enough-0123456' })
  t.equal(wrongKey.status, 2)
  t.match(wrongKey.stderr.trim(), /^bench: http:\/\/127\.0\.0\.1:\d+ refused the token signed with JWT_SECRET \(HS256\) \(UNAUTHENTICATED: [^\n]+\): give the key it verifies with/)
  t.equal(wrongKey.stderr.trim().split('\n').length, 1, 'one line, no stack trace')

  const noManifest = await service(t, { ...RAISED, PERSISTED_MANIFEST: '' })
  const unknown = await benchTarget(noManifest.url)
  t.equal(unknown.status, 2)
  t.match(unknown.stderr.trim(), /^bench: http:\/\/127\.0\.0\.1:\d+ answered the persisted Users operation \(sha256:[0-9a-f]{12}…\) with PERSISTED_QUERY_NOT_FOUND: .*: give the service persisted\/manifest\.json/)

  const badTimeout = await benchTarget(url, ['--timeout', '0'])
  t.equal(badTimeout.status, 2)
  t.equal(badTimeout.stderr.trim(), 'bench: --timeout takes a number of seconds above 0')
})
