// The change feed across real instances on PostgreSQL and Redis (docs/guarantees.md, changes made beside
// the service): an instance starting, losing its feed's connection or stopping never empties the cache
// the others serve from; and an instance whose feed goes silent (a NAT that forgot the connection) stops
// answering from the cache within a second, so a change made meanwhile is never served stale for longer.
import { test } from 'tap'
import { spawnSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { CACHE_TEST_ENV, ageOf, cacheCounters, counted, persistedGet } from '../cache/instances.ts'
import { postgresRelay } from '../helpers/postgres.ts'
import { PG_URL, eventually, requireTool, startInstance, startInstances, terminateBackends, type Instance } from './harness.ts'

/** Reads users 1-4 by persisted GET on each instance, 10 rounds: what each instance's cache counted. */
async function readRound (instances: Instance[]) {
  const before = await Promise.all(instances.map(cacheCounters))
  for (let round = 0; round < 10; round++) {
    for (const instance of instances) {
      for (const id of ['1', '2', '3', '4']) {
        const response = await persistedGet(instance.url, 'UserById', { id })
        if (response.status !== 200) throw new Error(`${instance.name}: ${response.status} ${response.text}`)
      }
    }
  }
  const after = await Promise.all(instances.map(cacheCounters))
  return instances.map((_, i) => counted(before[i]!, after[i]!))
}

test('an instance starting, reconnecting its feed or stopping does not empty the cache of the others', async (t) => {
  const { instances, db, redisEnv } = await startInstances(t, { env: CACHE_TEST_ENV })
  const [a, b] = instances as [Instance, Instance]
  await readRound([a, b]) // fills the cache
  const steady = await readRound([a, b])
  t.same(steady.map((c) => c.misses), [0, 0], `steady state: all hits (${JSON.stringify(steady)})`)

  // A third instance with a name of its own, so that its connections can be ended alone.
  const third = `${db.schema}_c`
  const c = await startInstance(t, 'app-c', {
    DATABASE_URL: db.url,
    DATABASE_SCHEMA: db.schema,
    DATABASE_APPLICATION_NAME: third,
    ...redisEnv,
    ...CACHE_TEST_ENV
  })
  const afterStart = await readRound([a, b])
  t.same(afterStart.map((c) => c.misses), [0, 0], `a third instance started: still all hits (${JSON.stringify(afterStart)})`)

  t.ok(await terminateBackends(third) > 0, "the third instance's connections ended (its feed's included)")
  await eventually('the third instance serving again', async () => (await persistedGet(c.url, 'UserById', { id: '1' })).status === 200)
  await sleep(1500) // its feed reconnected and caught up
  const afterReconnect = await readRound([a, b])
  t.same(afterReconnect.map((c) => c.misses), [0, 0], `its feed reconnected: still all hits (${JSON.stringify(afterReconnect)})`)

  await c.stop()
  const afterStop = await readRound([a, b])
  t.same(afterStop.map((c) => c.misses), [0, 0], 'it stopped: still all hits')
  const listening = await db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'SELECT pg_snapshot_xmin%'",
    [instances[0]!.env.DATABASE_APPLICATION_NAME])
  t.equal(listening.rows[0]!.n, 2, 'one feed connection per instance (two instances left)')
})

test('an instance whose feed goes silent stops answering from the cache within a second', async (t) => {
  const psql = requireTool('psql', 'apt-get install postgresql-client')
  const relay = await postgresRelay(t)
  const { instances, db } = await startInstances(t, { size: 1, env: { ...CACHE_TEST_ENV, DATABASE_URL: relay.url } })
  const [a] = instances as [Instance]
  const nameOnA = async () => {
    const response = await persistedGet(a.url, 'UserById', { id: '2' })
    return { name: JSON.parse(response.text).data.user.name as string, age: ageOf(response) }
  }
  // (Until its feed has read the change log once, a starting instance answers uncached.)
  await eventually('cached', async () => (await nameOnA()).age !== undefined)

  const admin = new pg.Client({ connectionString: PG_URL })
  await admin.connect()
  t.teardown(() => admin.end())
  const { rows } = await admin.query<{ port: number }>(
    "SELECT client_port AS port FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'SELECT pg_snapshot_xmin%'",
    [a.env.DATABASE_APPLICATION_NAME])
  t.equal(rows.length, 1, "the instance's feed connection")
  t.ok(relay.silence(rows[0]!.port), 'silenced: no byte either way, nothing closed')

  const updated = spawnSync(psql, [db.url, '-v', 'ON_ERROR_STOP=1', '-c',
    `SET search_path TO ${db.schema}; UPDATE users SET name = 'Renamed While Deaf' WHERE id = '2'`], { encoding: 'utf8' })
  t.equal(updated.status, 0, `psql: ${updated.stderr}`)
  const committed = Date.now()
  let firstFresh: number | null = null
  while (Date.now() - committed < 3000) {
    const { name } = await nameOnA()
    if (name === 'Renamed While Deaf') firstFresh ??= Date.now() - committed
    else if (firstFresh !== null) t.fail('an old answer after a fresh one')
    await sleep(25)
  }
  t.ok(firstFresh !== null && firstFresh <= 1000, `the change read ${firstFresh} ms after it was committed (at most 1000)`)
  const ready = await fetch(`${a.url}/health/ready`)
  t.equal(ready.status, 200, 'the instance stays ready: it answers, executing until its feed is back')
  await eventually('cached again once the feed is back', async () => (await nameOnA()).age !== undefined)
})
