import { test } from 'tap'
import { Writable } from 'node:stream'
import { buildApp } from '../app/app.ts'
import {
  environment, loadConfig, loadSettings, tokenSigning, withoutCredentials, type ConfigError
} from '../app/core/config/index.ts'
import { APP_COMMAND_AREAS } from '../cli/app-deployments.ts'
import { openSqliteStore } from '../app/core/store/sqlite.ts'
import { testConfig } from './helpers/app.ts'
import { spawnService } from './helpers/server-process.ts'

const SECRET = 'a-production-secret-of-at-least-32-characters'

/** The problems loadConfig reports for `env` (none when it loads). */
function problems (env: Record<string, string>): string[] {
  try {
    loadConfig(env)
    return []
  } catch (err) {
    return (err as ConfigError).problems
  }
}

test('development profile: open for building, fixed development secret, embedded store', async (t) => {
  const config = loadConfig({})
  t.equal(config.profile, 'development')
  t.equal(config.server.host, '127.0.0.1')
  t.equal(config.server.port, 3000)
  t.ok(config.jwt.secret && config.jwt.secret.length >= 32)
  t.same(config.jwt.algorithms, ['HS256'])
  t.equal(config.schemaDiscovery.introspection, true)
  t.equal(config.schemaDiscovery.queryUi, true)
  t.equal(config.persisted.only, false)
  t.equal(config.store.databaseUrl, null)
  t.equal(config.store.demoData, true, 'a new embedded store starts with the demo data set')
  t.equal(config.redis.address, null)
  t.same(config.budgets.maxOperationCost, { anonymous: 1000, USER: 10000, ADMIN: 100000, SERVICE: 100000 })
  t.equal(config.document.maxDepth, 10)
  t.equal(config.execution.timeoutMs, 10000)
  t.equal(config.input.maxStringLength, 1000)
  t.match(config.budgets, { requestsPerWindow: 100, costUnitsPerWindow: 100000, windowMs: 60000 })
})

test('production profile: safe defaults, secrets required', async (t) => {
  t.throws(() => loadConfig({ NODE_ENV: 'production' }), /set JWT_SECRET \(HS256\) or JWT_PUBLIC_KEY/)
  t.throws(() => loadConfig({ NODE_ENV: 'production', JWT_SECRET: 'short', PARTNER_SECRET_KEY: 'x'.repeat(64) }), /at least 32 characters/)
  const config = loadConfig({ NODE_ENV: 'production', JWT_SECRET: SECRET, PARTNER_SECRET_KEY: 'ab'.repeat(32) })
  t.equal(config.profile, 'production')
  t.equal(config.server.host, '0.0.0.0')
  t.equal(config.schemaDiscovery.introspection, false)
  t.equal(config.schemaDiscovery.queryUi, false)
  t.equal(config.persisted.only, true)
  t.equal(config.server.logLevel, 'info')
  t.equal(config.store.demoData, false, 'no demo data in a new production store')
})

test('every value is configurable and typed; bad values are refused clearly', async (t) => {
  const config = loadConfig({
    MAX_DEPTH: '7',
    COST_BUDGET_USER: '5000',
    TRUST_PROXY: '10.0.0.1, 10.0.0.2',
    PERSISTED_ONLY: 'true',
    JWT_ALGORITHMS: 'HS384'
  })
  t.equal(config.document.maxDepth, 7)
  t.equal(config.budgets.maxOperationCost.USER, 5000)
  t.same(config.server.trustProxy, ['10.0.0.1', '10.0.0.2'])
  t.equal(config.persisted.only, true)
  t.same(config.jwt.algorithms, ['HS384'])
  t.throws(() => loadConfig({ MAX_DEPTH: 'deep' }), /MAX_DEPTH/)
  t.throws(() => loadConfig({ PORT: '70000' }), /PORT/)
  t.equal(loadConfig({}).server.metricsPort, null, 'development: /metrics on the API port')
  t.equal(
    loadConfig({ NODE_ENV: 'production', JWT_SECRET: SECRET, PARTNER_SECRET_KEY: SECRET }).server.metricsPort,
    0,
    'production: not served'
  )
  t.equal(loadConfig({ METRICS_PORT: '9464' }).server.metricsPort, 9464)
  t.throws(() => loadConfig({ PORT: '9464', METRICS_PORT: '9464' }), /METRICS_PORT must differ from PORT/)
  t.same(loadConfig({ TRUST_PROXY: 'loopback, 10.0.0.0/8, fd00::1' }).server.trustProxy, ['loopback', '10.0.0.0/8', 'fd00::1'])
  t.throws(() => loadConfig({ TRUST_PROXY: '10.0.0.1, lb.internal, 10.0.0.0/33' }), /TRUST_PROXY entry "lb.internal"[^]*TRUST_PROXY entry "10.0.0.0\/33"/)
})

test('only the given environment is read (nothing leaks in from process.env)', async (t) => {
  process.env.DATABASE_URL = 'postgres://leaked@127.0.0.1:5432/test'
  t.teardown(() => { delete process.env.DATABASE_URL })
  t.equal(loadConfig({}).store.databaseUrl, null)
  t.equal(loadConfig().store.databaseUrl, 'postgres://leaked@127.0.0.1:5432/test', 'the default is process.env itself')
})

test('.env is read from the project root only: one planted in the working directory is ignored', async (t) => {
  const dir = t.testdir({
    '.env': `JWT_SECRET=${'planted-secret-from-another-directory-'.repeat(2)}\nPARTNER_SECRET_KEY=${'planted-partner-key-0123456789-'.repeat(2)}\n`
  })
  // A production start needs both secrets: found only in the planted file, it must refuse to start.
  const service = spawnService(t, { NODE_ENV: 'production', PORT: '0', SQLITE_PATH: `${dir}/service.db` }, { cwd: dir })
  t.equal(await service.exited, 1, 'no start on secrets from the working directory')
  t.match(service.stderr(), /Configuration: set JWT_SECRET/)
  t.equal(environment(`${dir}/.env`).JWT_SECRET?.startsWith('planted'), true, 'the file itself is readable when named')
})

test('TRUST_PROXY=0.0.0.0/0 (trust everyone) is refused with a clear line at start, like every bad setting', async (t) => {
  const problems = (value: string) => {
    try {
      loadConfig({ TRUST_PROXY: value })
      return []
    } catch (err) {
      return (err as ConfigError).problems
    }
  }
  t.match(problems('0.0.0.0/0'), [/TRUST_PROXY entry "0\.0\.0\.0\/0" trusts every address/])
  t.match(problems('10.0.0.0/8, ::/0'), [/TRUST_PROXY entry "::\/0" trusts every address/])
  t.same(problems('10.0.0.0/8, loopback'), [])
  const service = spawnService(t, { TRUST_PROXY: '0.0.0.0/0', PORT: '0' })
  t.equal(await service.exited, 1)
  t.equal(
    service.stderr().trim(),
    'Configuration: TRUST_PROXY entry "0.0.0.0/0" trusts every address: list the load balancers\' addresses or subnets (a prefix of 1 or more)',
    'one clear line, no stack trace'
  )
})

test('withoutCredentials: the user and password of every URL in a message are hidden, the rest kept', async (t) => {
  const cases: [string, string][] = [
    ['Redis at redis://default:s3cret@cache:6379 is down', 'Redis at redis://***@cache:6379 is down'],
    ['redis://:s3cret@127.0.0.1:6379/0', 'redis://***@127.0.0.1:6379/0'],
    // Unencoded @ and / in a password (an invalid URL that still reaches a message).
    ['postgres://app:p@ss/w0rd@db:5432/app', 'postgres://***@db:5432/app'],
    ['a http://u:1@a and https://v:2@b/c', 'a http://***@a and https://***@b/c'],
    ['"tracesUrl":"http://otel:k3y@collector:4318/v1/traces","x":"a@b"', '"tracesUrl":"http://***@collector:4318/v1/traces","x":"a@b"'],
    ['postgres://db:5432/app and mail admin@example.com', 'postgres://db:5432/app and mail admin@example.com']
  ]
  for (const [text, shown] of cases) t.equal(withoutCredentials(text), shown, text)
})

test('a logged error that quotes a URL setting shows it without credentials', async (t) => {
  const lines: string[] = []
  const stream = new Writable({
    write (chunk, _enc, cb) {
      lines.push(String(chunk))
      cb()
    }
  })
  const store = openSqliteStore(':memory:')
  const app = await buildApp(testConfig({ LOG_LEVEL: 'info' }), { store, logger: { stream } })
  t.teardown(async () => { await app.close(); await store.close() })
  app.log.error({ err: new Error('lost redis://default:s3cret@cache:6379') }, 'a driver failed')
  const line = lines.find((l) => l.includes('a driver failed')) ?? ''
  t.match(line, 'redis://***@cache:6379', 'the message and stack name the URL…')
  t.notMatch(line, 's3cret', '…without its password')
})

test('a malformed DATABASE_URL or REDIS_URL names its setting at start, with the other problems, without its value', async (t) => {
  for (const value of ['database', 'postgres//user:s3cret@db/app', 'postgres://user:s3cret@data base/app', 'mysql://user@db/app', 'localhost:5432/app']) {
    const found = problems({ DATABASE_URL: value })
    t.match(found, [/^DATABASE_URL .*postgres:\/\/user:password@host:5432\/database/], `DATABASE_URL=${value}`)
    t.notMatch(found.join('\n'), 's3cret', 'the value (it may hold a password) is not quoted')
  }
  for (const value of ['redis//cache:6379', 'http://cache:6379', 'redis://']) {
    t.match(problems({ REDIS_URL: value }), [/^REDIS_URL .*redis:\/\/:password@host:6379/], `REDIS_URL=${value}`)
  }
  for (const value of ['postgres://app:s3cret@db:5432/app', 'postgresql://db/app', 'postgres:///app?host=/var/run/postgresql']) {
    t.same(problems({ DATABASE_URL: value }), [], `DATABASE_URL=${value} is accepted`)
  }
  for (const value of ['redis://cache:6379', 'rediss://:s3cret@cache:6380/1']) {
    t.same(problems({ REDIS_URL: value }), [], `REDIS_URL=${value} is accepted`)
  }
  t.equal(problems({ DATABASE_URL: 'database', REDIS_URL: 'cache', PORT: 'x' }).length, 3, 'reported with the others, at once')
  // Redis Sentinel: the sentinels' URLs, with REDIS_URL naming the master group.
  const sentinels = 'redis://10.0.0.5:26379,redis://10.0.0.6:26379'
  t.same(problems({ REDIS_URL: 'redis://:s3cret@mymaster/0', REDIS_SENTINELS: sentinels }), [], 'sentinels and a master group')
  t.same(loadConfig({ REDIS_URL: 'redis://mymaster', REDIS_SENTINELS: sentinels }).redis.address,
    { urls: ['redis://mymaster'], cluster: false, sentinels: ['redis://10.0.0.5:26379', 'redis://10.0.0.6:26379'] })
  t.match(problems({ REDIS_SENTINELS: sentinels }), [/^REDIS_SENTINELS needs REDIS_URL naming the master group/])
  t.match(problems({ REDIS_CLUSTER_NODES: 'redis://a:6379', REDIS_SENTINELS: sentinels }), [/^REDIS_SENTINELS watches one master/])
  t.match(problems({ REDIS_URL: 'redis://mymaster', REDIS_SENTINELS: 'sentinel:26379' }), [/^REDIS_SENTINELS .*redis:\/\/sentinel-1:26379/])

  const service = spawnService(t, { DATABASE_URL: 'postgres//user:s3cret@db/app', PORT: '0' })
  t.equal(await service.exited, 1)
  t.match(service.stderr().trim(), /^Configuration: DATABASE_URL [^\n]+$/, 'one line naming the setting (was: getaddrinfo ENOTFOUND base)')
  t.notMatch(service.stderr(), 's3cret')
})

test('each invalid variable is one line in Ajv\'s words, and the other checks still run on the valid ones', async (t) => {
  t.same(problems({
    PORT: 'x',
    BODY_LIMIT_BYTES: '10',
    READINESS_CACHE_MS: '60001',
    WSSE_ALLOW_SHA1: 'yes',
    PRESSURE_MAX_EVENT_LOOP_UTILIZATION: '1.5',
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
    OTEL_TRACES_SAMPLER: 'sometimes',
    JWT_SECRET: 'short'
  }), [
    'PORT must be integer',
    'BODY_LIMIT_BYTES must be >= 1024',
    'READINESS_CACHE_MS must be <= 60000',
    'PRESSURE_MAX_EVENT_LOOP_UTILIZATION must be <= 1',
    'WSSE_ALLOW_SHA1 must be boolean',
    'OTEL_TRACES_SAMPLER must be equal to one of the allowed values',
    'JWT_SECRET must be at least 32 characters'
  ])
  t.same(problems({ PORT: 'x', METRICS_PORT: '3000' }), ['PORT must be integer'], 'an invalid PORT is not compared with METRICS_PORT')
  t.same(problems({ PORT: '3000', METRICS_PORT: '3000' }), ['METRICS_PORT must differ from PORT (metrics get a port of their own)'])
  t.same(problems({ NODE_ENV: 'production', JWT_SECRET: SECRET, PARTNER_SECRET_KEY: SECRET, QUERY_UI: 'true', PORT: '-1' }), [
    'PORT must be >= 0',
    'QUERY_UI cannot be turned on in production (the query UI is for development only)'
  ])
  const typed = loadConfig({ PORT: '8080', WSSE_ALLOW_SHA1: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/', OTEL_TRACES_SAMPLER_ARG: '0.25' })
  t.equal(typed.server.port, 8080, 'numbers are numbers')
  t.equal(typed.soap.allowSha1, true, 'booleans are booleans')
  t.match(typed.tracing, { tracesUrl: 'http://collector:4318/v1/traces', protocol: 'http/protobuf', samplerRatio: 0.25, headers: '' })
})

test('every invalid setting is reported together, the SOAP addresses among them', async (t) => {
  t.same(problems({ SOAP_NAMESPACE_BASE: 'not a uri', SOAP_PUBLIC_URL: 'ftp://partners.example.com', MAX_DEPTH: 'deep' }).sort(), [
    'MAX_DEPTH must be integer',
    'SOAP_NAMESPACE_BASE must be an absolute URI (e.g. urn:example:users or https://example.com/soap)',
    'SOAP_PUBLIC_URL must be an http(s) URL'
  ].sort())
})

test('a command reads the areas it names, and the ones they use: nothing else is required or refused', async (t) => {
  const problemsOf = (load: () => unknown) => {
    try {
      load()
      return []
    } catch (err) {
      return (err as ConfigError).problems
    }
  }
  // The release job (npm run app) in production: no secret, and a setting the service would refuse is not read.
  const job = loadSettings(APP_COMMAND_AREAS, { NODE_ENV: 'production', CORS_ORIGINS: 'not an origin', MAX_DEPTH: '3' })
  t.equal(job.profile, 'production')
  t.equal(job.document.maxDepth, 3)
  t.equal(job.deployments.maxBytes, 268435456)
  t.notOk('jwt' in job || 'soap' in job || 'cors' in job, 'no area it did not name')
  const found = problemsOf(() => loadSettings(APP_COMMAND_AREAS, { DEPLOYMENTS_MAX_BYTES: 'lots', DATABASE_URL: 'db', JWT_SECRET: 'short' }))
  t.match(found, ['DEPLOYMENTS_MAX_BYTES must be integer', /^DATABASE_URL is not a URL/], 'its own problems, all of them…')
  t.equal(found.length, 2, '…and only those (JWT_SECRET is not read)')
  // The token (npm run token): the signing key and the claims, nothing of the store or the server.
  t.same(loadSettings([tokenSigning], { NODE_ENV: 'production', JWT_SECRET: SECRET, DATABASE_URL: 'db', PORT: 'x' }).tokenSigning,
    { algorithms: ['HS256'], secret: SECRET, privateKey: null, issuer: null, audience: null })
  t.same(problemsOf(() => loadSettings([tokenSigning], { NODE_ENV: 'production', PARTNER_SECRET_KEY: SECRET })),
    ['set JWT_PRIVATE_KEY (RS256/ES256) or JWT_SECRET (HS256) to sign tokens in production'])
})
