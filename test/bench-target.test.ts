// `npm run bench -- --target URL` against a service the benchmark did not start (a listening process of
// the test's own, production profile): the table of a clean run, a run whose failures are counted (a
// request limit the load runs into), and the one line that stops a run against a wrong URL, a service
// refusing the minted tokens, or one that does not know the operations.
import { test } from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY, type TestLike } from './helpers/app.ts'
import { REPO, freePort, startService } from './helpers/server-process.ts'
import { MANIFEST_FILE } from './persisted/helpers.ts'

async function service (t: TestLike, env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-target-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return startService(t, {
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'info',
    SQLITE_PATH: join(dir, 'service.db'),
    DEMO_DATA: 'true',
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    PERSISTED_MANIFEST: MANIFEST_FILE,
    RATE_LIMIT_REQUESTS: '1000000',
    RATE_LIMIT_COST: '100000000',
    ...env
  })
}

/** The bench against `url`, a short run of the persisted rows, signing with `secret`. */
function benchTarget (url: string, secret = TEST_JWT_SECRET) {
  const run = spawnSync(process.execPath, [
    'bench/run.ts', '--target', url, '--duration', '1', '--rounds', '1', '--warmup', '0', '--connections', '4',
    '--only', 'persisted-get', '--only', 'persisted-users-list'
  ], { cwd: REPO, env: { PATH: process.env.PATH ?? '', JWT_SECRET: secret }, encoding: 'utf8', timeout: 60_000 })
  return { status: run.status, stdout: run.stdout, stderr: run.stderr }
}

test('a deployment it did not start: the same table, every row ok, latency percentiles', async (t) => {
  const { url } = await service(t)
  const run = benchTarget(url)
  t.equal(run.status, 0, run.stdout + run.stderr)
  t.match(run.stdout, /scenario\s+req\/s\s+× rest/, 'the table')
  t.match(run.stdout, /^persisted-get\s+\d+ .* ok$/m)
  t.match(run.stdout, /^persisted-users-list\s+\d+ .* ok$/m)
  t.match(run.stdout, /p50 ms\s+p99 ms/)
  t.match(run.stdout, /^persisted-get\s+\d+(\s+–)+\s+\d+\.\d+\s+\d+\.\d+\s/m, 'p50 and p99 of the row')
})

test('a run whose answers fail is counted: every non-2xx is a failure, and the run exits 1', async (t) => {
  const { url } = await service(t, { RATE_LIMIT_REQUESTS: '300' })
  const run = benchTarget(url)
  t.equal(run.status, 1)
  t.match(run.stdout, /FAILED: \d+ non-2xx answers, 0 connection errors, timeouts or wrong answers; first: HTTP 429 .*RATE_LIMITED/)
  t.match(run.stdout, /\s[1-9]\d*\/0\s/, 'the non-2xx column counts them')
})

test('a wrong URL, refused tokens, or unknown operations: one line saying which, and exit 2', async (t) => {
  const closed = `http://127.0.0.1:${await freePort()}`
  const nobody = benchTarget(closed)
  t.equal(nobody.status, 2)
  t.equal(nobody.stderr.trim(), `bench: ${closed} does not answer: ECONNREFUSED`)
  t.equal(nobody.stdout.trim(), '', 'no table of zeros')

  const { url } = await service(t)
  const wrongKey = benchTarget(url, 'another-secret-that-is-also-long-enough-0123456')
  t.equal(wrongKey.status, 2)
  t.match(wrongKey.stderr.trim(), /^bench: http:\/\/127\.0\.0\.1:\d+ refused the token signed with JWT_SECRET \(HS256\) \(UNAUTHENTICATED: [^\n]+\): give the key it verifies with/)
  t.equal(wrongKey.stderr.trim().split('\n').length, 1, 'one line, no stack trace')

  const noManifest = await service(t, { PERSISTED_MANIFEST: '' })
  const unknown = benchTarget(noManifest.url)
  t.equal(unknown.status, 2)
  t.match(unknown.stderr.trim(), /^bench: http:\/\/127\.0\.0\.1:\d+ answered the persisted Users operation \(sha256:[0-9a-f]{12}…\) with PERSISTED_QUERY_NOT_FOUND: .*: give the service persisted\/manifest\.json/)
})
