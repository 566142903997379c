// Starting the real process: configuration errors (all at once, one line each, no stack trace), the
// optional .env file, the production profile's empty store (demo data is for development), and no
// credential of a URL setting in what a failed start prints. Each
// process runs in a directory of its own, so a developer's .env in the repository plays no part.
import { test } from 'tap'
import { freePort, REPO, spawnService, startService } from '../helpers/server-process.ts'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { environment, loadConfig } from '../../app/core/config/index.ts'

const USERS_QUERY_ID = 'sha256:208530398fd1690d830741395fe1d351fff92fd45fa1ddc0410b336c598d30a0'

test('bad settings: every problem is reported at once, one line each, without a stack trace', async (t) => {
  const dir = t.testdir()
  const service = spawnService(t, {
    NODE_ENV: 'production', QUERY_UI: 'true', CORS_ORIGINS: 'https://app.example.com/api', PORT: '70000', MAX_DEPTH: 'deep', SQLITE_PATH: `${dir}/service.db`
  }, { cwd: dir })
  t.equal(await service.exited, 1, 'exit code 1')
  const lines = service.stderr().trim().split('\n')
  t.same(
    lines.filter((line) => !line.startsWith('Configuration: ')),
    [],
    `every line names a setting:\n${service.stderr()}`
  )
  for (const setting of ['JWT_SECRET', 'PARTNER_SECRET_KEY', 'QUERY_UI', 'CORS_ORIGINS', 'PORT', 'MAX_DEPTH']) {
    t.ok(lines.some((line) => line.includes(setting)), `${setting} reported`)
  }
  t.equal(lines.length, 6, 'one line per problem')
  t.notMatch(service.stderr(), /^\s+at /m, 'no stack trace')
  t.equal(service.stdout(), '', 'nothing else printed')
})

test('the commands (seed, partner:create, token) report configuration problems the same way', async (t) => {
  for (const command of ['cli/seed.ts', 'cli/create-partner.ts', 'cli/mint-token.ts']) {
    const args = command.endsWith('create-partner.ts')
      ? ['--login', 'acme', '--password', 'a-long-random-password']
      : command.endsWith('mint-token.ts')
        ? ['--sub', '1']
        : []
    const dir = t.testdir()
    const run = spawnService(
      t,
      { NODE_ENV: 'production', SQLITE_PATH: `${dir}/service.db` },
      { command: [process.execPath, `${REPO}/${command}`, ...args], cwd: dir }
    )
    t.equal(await run.exited, 1, `${command}: exit code 1`)
    // The token command needs one secret only, the key it signs with; the others need both.
    const missing = command.endsWith('mint-token.ts') ? ['Configuration:'] : ['Configuration:', 'Configuration:']
    t.same(run.stderr().trim().split('\n').map((line) => line.replace(/ .*/, '')), missing, `${command}: one line per missing secret:\n${run.stderr()}`)
  }
})

test('no credential of a URL setting appears in what a failed start prints (REDIS_URL, DATABASE_URL, OTLP, CORS_ORIGINS)', async (t) => {
  const dir = t.testdir()
  const closed = await freePort()
  const base = {
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    PORT: '0',
    LOG_LEVEL: 'info',
    SQLITE_PATH: `${dir}/service.db`
  }
  const runs = {
    // Redis that never answers (a closed port): the start fails after its wait, with tracing on meanwhile.
    redis: spawnService(t, {
      ...base,
      REDIS_URL: `redis://default:redis-pa55word@127.0.0.1:${closed}`,
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://collector:otlp-pa55word@127.0.0.1:${closed}`
    }, { cwd: dir }),
    postgres: spawnService(t, { ...base, DATABASE_URL: `postgres://postgres:pg-pa55word@127.0.0.1:${closed}/test` }, { cwd: dir }),
    configuration: spawnService(t, { ...base, CORS_ORIGINS: 'https://someone:cors-pa55word@app.example.com/api' }, { cwd: dir })
  }
  for (const [name, run] of Object.entries(runs)) {
    t.equal(await run.exited, 1, `${name}: exit code 1`)
    const output = run.stdout() + run.stderr()
    t.notMatch(output, /pa55word/, `${name}: no password printed:\n${output}`)
    t.match(run.stderr(), /^(Could not start|Configuration): /, `${name}: the failure is still reported`)
  }
  t.match(runs.redis.stderr(), `127.0.0.1:${closed}`, 'the Redis address is still named')
  t.match(runs.redis.stdout(), /"tracing on \(OTLP\)"/, 'the OTLP endpoint was logged (without its password)')
})

test('a start that fails after the configuration (a missing manifest) says so in one line', async (t) => {
  const dir = t.testdir()
  const service = spawnService(
    t,
    {
      JWT_SECRET: TEST_JWT_SECRET,
      PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
      PORT: '0',
      LOG_LEVEL: 'warn',
      SQLITE_PATH: `${dir}/service.db`,
      PERSISTED_MANIFEST: `${dir}/no-such-manifest.json`
    },
    { cwd: dir }
  )
  t.equal(await service.exited, 1)
  t.match(service.stderr(), /^Could not start: .*no-such-manifest\.json/)
  t.equal(service.stderr().trim().split('\n').length, 1, service.stderr())
  t.notMatch(service.stderr(), /^\s+at /m, 'no stack trace')
})

test('.env (read from the project root, never the working directory) has the format of .env.example; the environment wins over it', async (t) => {
  const secret = 'a-secret-that-only-the-dotenv-file-holds-0123456789'
  const dir = t.testdir({
    '.env': [
      '# a copy of .env.example, edited',
      'NODE_ENV=production',
      `JWT_SECRET=${secret}                 # the production key`,
      `PARTNER_SECRET_KEY="${TEST_PARTNER_SECRET_KEY}"`,
      'HOST=127.0.0.1',
      'PORT=1                                # overridden by the environment',
      'LOG_LEVEL=info',
      ''
    ].join('\n')
  })
  // The file is read by path (the project root's by default: a test must not write there, others read it).
  process.env.PORT = '0'
  t.teardown(() => { delete process.env.PORT })
  const config = loadConfig(environment(`${dir}/.env`))
  t.equal(config.profile, 'production', 'the production profile, from the file')
  t.equal(config.jwt.secret, secret, 'the secret, without its comment')
  t.equal(config.soap.partnerSecretKey, TEST_PARTNER_SECRET_KEY, 'a quoted value')
  t.equal(config.server.port, 0, 'the environment wins over the file')
  // That a .env in the working directory is not read: test/config.test.ts.
})

test('production: a new embedded store starts empty (DEMO_DATA is on by default in development only)', async (t) => {
  const dir = t.testdir()
  const env = {
    NODE_ENV: 'production',
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'info',
    PERSISTED_MANIFEST: `${REPO}/persisted/manifest.json`
  }
  const users = async (url: string) => {
    const response = await fetch(`${url}/graphql?queryId=${USERS_QUERY_ID}&variables=%7B%7D`, {
      headers: { 'apollo-require-preflight': 'true' }
    })
    return ((await response.json()) as { data: { users: { name: string }[] } }).data.users
  }
  const production = await startService(t, { ...env, SQLITE_PATH: `${dir}/production.db` }, { cwd: dir })
  t.same(await users(production.url), [], 'no demo users')
  const withDemo = await startService(t, { ...env, SQLITE_PATH: `${dir}/demo.db`, DEMO_DATA: 'true' }, { cwd: dir })
  t.equal((await users(withDemo.url))[0]?.name, 'Admin', 'DEMO_DATA=true still loads them')
})
