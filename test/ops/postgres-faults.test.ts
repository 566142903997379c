// PostgreSQL faults as a client sees them through a listening server, and the fault table of docs/guarantees.md
// checked against what is observed here: a connection killed under a query (pg_terminate_backend) and
// an unreachable server and a database refusing connections all answer SERVICE_UNAVAILABLE, and the
// service recovers by itself.
import { test } from 'tap'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import pg from 'pg'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { buildApp } from '../../app/app.ts'
import { capturedLog, gql, listenTestApp, testConfig } from '../helpers/app.ts'
import { freshSchema, postgresRelay, TEST_DATABASE_URL } from '../helpers/postgres.ts'
import { REPO } from '../helpers/server-process.ts'

/** The code the fault table of docs/guarantees.md gives for the row starting with `phase`. */
function documentedCodes (phase: string): string[] {
  const row = readFileSync(`${REPO}/docs/guarantees.md`, 'utf8')
    .split('\n')
    .find((line) => line.startsWith(`| ${phase}`))
  if (!row) throw new Error(`docs/guarantees.md: no fault table row for "${phase}"`)
  return [...row.matchAll(/`([A-Z_]{3,})`/g)].map((m) => m[1]!)
}

// The faults are the store's, so every read must reach it: the response cache (off on PostgreSQL without
// Redis in any real deployment, where DATABASE_URL is set; here the store is handed in) stays out.
const NO_RESPONSE_CACHE = { RESPONSE_CACHE: 'false' }

const code = (body: { errors?: { extensions?: { code?: string } }[] }) => body.errors?.[0]?.extensions?.code

test('a PostgreSQL connection killed under a query: SERVICE_UNAVAILABLE, then served on a fresh connection', async (t) => {
  const schema = await freshSchema(t, 'killed')
  const applicationName = `gqs-killed-${randomBytes(4).toString('hex')}`
  const store = await openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 2, schema, applicationName })
  t.teardown(() => store.close())
  await loadDemoData(store)
  const { url } = await listenTestApp(t, NO_RESPONSE_CACHE, { store, demo: false })
  t.equal(code((await gql(url, '{ users(limit: 1) { id } }')).body), undefined, 'served before the fault')

  // A lock holds the service's query in PostgreSQL while its connection is terminated.
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL })
  await admin.connect()
  t.teardown(() => admin.end())
  await admin.query('BEGIN')
  await admin.query(`LOCK TABLE ${schema}.users IN ACCESS EXCLUSIVE MODE`)
  const pending = gql(url, '{ users(limit: 1) { id } }')
  for (let i = 0; i < 100; i++) {
    const { rows } = await admin.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
      [applicationName]
    )
    if (rows[0].n > 0) break
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  const { rows } = await admin.query(
    'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1',
    [applicationName]
  )
  t.ok(rows[0].n > 0, 'the service\'s connections were terminated')
  await admin.query('ROLLBACK')

  const killed = await pending
  t.equal(code(killed.body), 'SERVICE_UNAVAILABLE', 'the query on the killed connection')
  t.equal(killed.body.errors[0].message, 'The database is unavailable; retry shortly')
  t.equal(
    code((await gql(url, '{ users(limit: 1) { id } }')).body),
    undefined,
    'the next one is served on a fresh connection'
  )
  t.same(documentedCodes('PostgreSQL connections killed'), ['SERVICE_UNAVAILABLE'], 'docs/guarantees.md says the same')
})

test('PostgreSQL unreachable: SERVICE_UNAVAILABLE and readiness 503, served again when it returns', async (t) => {
  const relay = await postgresRelay(t)
  const store = await openPostgresStore({ url: relay.url, poolSize: 2, schema: await freshSchema(t, 'unreachable') })
  t.teardown(() => store.close())
  await loadDemoData(store)
  const { url } = await listenTestApp(t, NO_RESPONSE_CACHE, { store, demo: false })

  relay.cut()
  t.equal(code((await gql(url, '{ users(limit: 1) { id } }')).body), 'SERVICE_UNAVAILABLE')
  t.equal((await fetch(`${url}/health/ready`)).status, 503)
  t.same(documentedCodes('PostgreSQL unreachable'), ['SERVICE_UNAVAILABLE'], 'docs/guarantees.md says the same')

  await relay.restore()
  t.equal(code((await gql(url, '{ users(limit: 1) { id } }')).body), undefined, 'served again, by itself')
})

test('a PostgreSQL database that refuses connections (55000): SERVICE_UNAVAILABLE, no stack logged, served again', async (t) => {
  // A throwaway database of the test's own, so refusing its connections disturbs no other test.
  const database = `t_refusing_${randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL })
  await admin.connect()
  t.teardown(async () => {
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
    await admin.end()
  })
  await admin.query(`CREATE DATABASE ${database}`)
  const applicationName = `gqs-refusing-${randomBytes(4).toString('hex')}`
  const databaseUrl = new URL(TEST_DATABASE_URL)
  databaseUrl.pathname = `/${database}`
  const store = await openPostgresStore({ url: databaseUrl.href, poolSize: 2, applicationName })
  t.teardown(() => store.close())
  await loadDemoData(store)
  const { lines, stream } = capturedLog()
  const app = await buildApp(testConfig({ LOG_LEVEL: 'info', ...NO_RESPONSE_CACHE }), { store, logger: { stream } })
  t.teardown(() => app.close())
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  t.equal(code((await gql(url, '{ users(limit: 1) { id } }')).body), undefined, 'served before the fault')

  // New connections are refused ("database … is not currently accepting connections"), open ones ended.
  await admin.query(`ALTER DATABASE ${database} ALLOW_CONNECTIONS false`)
  await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [applicationName])
  for (let i = 0; i < 3; i++) {
    const refused = await gql(url, '{ users(limit: 1) { id } }')
    t.equal(code(refused.body), 'SERVICE_UNAVAILABLE', `call ${i + 1} while connections are refused`)
    t.equal(refused.body.errors?.[0]?.message, 'The database is unavailable; retry shortly')
  }
  t.equal((await fetch(`${url}/health/ready`)).status, 503, 'readiness reports it')
  t.same(lines.filter((line) => /"stack"|"level":50/.test(line)), [], 'no error or stack logged per call')

  await admin.query(`ALTER DATABASE ${database} ALLOW_CONNECTIONS true`)
  t.equal(code((await gql(url, '{ users(limit: 1) { id } }')).body), undefined, 'served again, by itself')
})
