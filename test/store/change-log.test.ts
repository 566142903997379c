// PostgreSQL's change log as one instance follows it (app/core/store/postgres-changes.ts), on the machine's
// PostgreSQL: what an outside write tells, bulk and replica-role writes, transactions that commit out of
// order, a reconnection that catches up instead of dropping everything, and a silent connection found
// within the heartbeat's deadline.
import { test } from 'tap'
import pg from 'pg'
import { setTimeout as sleep } from 'node:timers/promises'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { DEADLINE_MS, followChangeLog, HEARTBEAT_MS } from '../../app/core/store/postgres-changes.ts'
import type { ChangeListener } from '../../app/core/store/types.ts'
import { TEST_DATABASE_URL, freshSchema, postgresRelay } from '../helpers/postgres.ts'
import type { TestLike } from '../helpers/app.ts'

/** A migrated schema of the test's own, and a connection writing to it as an operator's psql would. */
async function database (t: TestLike & { teardown (fn: () => unknown): void }) {
  const schema = await freshSchema(t, 'changelog')
  const store = await openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 1, schema })
  await store.close()
  const outside = new pg.Client({ connectionString: TEST_DATABASE_URL, options: `-c search_path=${schema}` })
  await outside.connect()
  t.teardown(() => outside.end())
  return { schema, outside }
}

const feedOptions = (schema: string) =>
  ({ connection: { connectionString: TEST_DATABASE_URL, options: `-c search_path=${schema}` }, schema, keepMs: 600_000 })

/** What the feed told, in order, with when. */
function recorder () {
  const told: Array<{ at: number; tags?: readonly string[] | 'all'; live?: boolean }> = []
  const listener: ChangeListener = {
    changed (tags) { told.push({ at: performance.now(), tags }) },
    watching (live) { told.push({ at: performance.now(), live }) }
  }
  const tags = () => new Set(told.flatMap((e) => (Array.isArray(e.tags) ? e.tags : [])))
  const until = async (what: string, check: () => boolean, ms = 3000) => {
    const deadline = performance.now() + ms
    while (!check()) {
      if (performance.now() > deadline) throw new Error(`not told within ${ms} ms: ${what} (${JSON.stringify(told)})`)
      await sleep(10)
    }
  }
  const live = () => [...told].reverse().find((e) => e.live !== undefined)?.live ?? false
  return { told, listener, tags, until, live }
}

/** A recorder of the schema's change log, followed until the test ends, once it says it is live. */
async function liveFeed (t: TestLike & { teardown (fn: () => unknown): void }, schema: string) {
  const feed = recorder()
  const watch = followChangeLog(feedOptions(schema), feed.listener)
  t.teardown(() => watch.stop())
  await feed.until('live', feed.live)
  return feed
}

test('outside writes are told by their tags; bulk changes and TRUNCATE by their table; replica-role writes too', async (t) => {
  const { schema, outside } = await database(t)
  const feed = await liveFeed(t, schema)

  await outside.query("INSERT INTO users (id, name, email, created_at) VALUES ('u1', 'One', 'one@example.com', now())")
  await feed.until('the insert', () => feed.tags().has('user:u1'))
  t.ok(feed.tags().has('users'), 'and the lists of users')

  await outside.query("INSERT INTO messages (room_id, content, author_id, created_at) VALUES ('lobby', 'hi', 'u1', now())")
  await feed.until('a message', () => feed.tags().has('room:lobby'))

  // A bulk insert of 1500 users: one row of the log naming the table, not 1500 tags.
  await outside.query(`INSERT INTO users (id, name, email, created_at)
    SELECT 'bulk' || i, 'Bulk', 'bulk' || i || '@example.com', now() FROM generate_series(1, 1500) AS i`)
  await feed.until('the table', () => feed.tags().has('table:users'))
  t.notOk(feed.tags().has('user:bulk1'), 'past 1000 tags, the table instead')

  // Logical replication, pg_restore --data-only, bulk loaders: session_replication_role = replica.
  const before = feed.told.length
  await outside.query('SET session_replication_role = replica')
  await outside.query("UPDATE users SET name = 'Replicated' WHERE id = 'u1'")
  await outside.query('SET session_replication_role = DEFAULT')
  await feed.until('the replica-role update', () => feed.told.slice(before).some((e) => Array.isArray(e.tags) && e.tags.includes('user:u1')))

  // An id longer than NOTIFY's payload limit (8000 bytes) writes and is told.
  const long = 'x'.repeat(9000)
  await outside.query('INSERT INTO users (id, name, email, created_at) VALUES ($1, \'Long\', \'long@example.com\', now())', [long])
  await feed.until('the long id', () => feed.tags().has(`user:${long}`))

  await outside.query('TRUNCATE messages')
  await feed.until('the truncate', () => feed.tags().has('table:messages'))
  t.notOk(feed.told.some((e) => e.tags === 'all'), "nothing was told as 'all'")
})

test('transactions committing out of order are each told once', async (t) => {
  const { schema, outside } = await database(t)
  const other = new pg.Client({ connectionString: TEST_DATABASE_URL, options: `-c search_path=${schema}` })
  await other.connect()
  t.teardown(() => other.end())
  const feed = await liveFeed(t, schema)
  // The first transaction takes its id (its first write) before the second, and commits after it.
  await outside.query('BEGIN')
  await outside.query("INSERT INTO users (id, name, email, created_at) VALUES ('early', 'Early', 'early@example.com', now())")
  await other.query("INSERT INTO users (id, name, email, created_at) VALUES ('late', 'Late', 'late@example.com', now())")
  await feed.until('the second transaction', () => feed.tags().has('user:late'))
  await sleep(3 * HEARTBEAT_MS) // reads in between: the first is still open
  t.notOk(feed.tags().has('user:early'), 'not before it commits')
  await outside.query('COMMIT')
  await feed.until('the first transaction, once committed', () => feed.tags().has('user:early'))
  await sleep(3 * HEARTBEAT_MS)
  const times = feed.told.filter((e) => Array.isArray(e.tags) && e.tags.includes('user:late')).length
  t.equal(times, 1, 'each told once, however many reads saw it')
})

test('a lost connection catches up on what it missed, and a silent one is found within the deadline', async (t) => {
  const { schema, outside } = await database(t)
  const relay = await postgresRelay(t)
  const feed = recorder()
  const applicationName = `feed_${schema}`
  const watch = followChangeLog({
    connection: { connectionString: relay.url, options: `-c search_path=${schema}`, application_name: applicationName },
    schema,
    keepMs: 600_000
  }, feed.listener)
  t.teardown(() => watch.stop())
  await feed.until('live', feed.live)

  // Killed (a failover, pg_terminate_backend): told down, then what was written meanwhile, then live.
  const killed = await outside.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [applicationName])
  t.equal(killed.rowCount, 1)
  await outside.query("INSERT INTO users (id, name, email, created_at) VALUES ('while-down', 'Down', 'down@example.com', now())")
  await feed.until('back', () => feed.tags().has('user:while-down') && feed.live())
  t.ok(feed.told.some((e) => e.live === false), 'told down meanwhile')
  t.notOk(feed.told.some((e) => e.tags === 'all'), "caught up by the log, not 'all'")

  // Silenced: bytes stop flowing, nothing closes. Found by the heartbeat's deadline.
  const { rows } = await outside.query<{ port: number }>(
    'SELECT client_port AS port FROM pg_stat_activity WHERE application_name = $1', [applicationName])
  t.ok(relay.silence(rows[0]!.port), 'the connection silenced')
  const silencedAt = performance.now()
  await outside.query("INSERT INTO users (id, name, email, created_at) VALUES ('while-silent', 'Silent', 'silent@example.com', now())")
  await feed.until('down', () => !feed.live(), 2000)
  const noticedMs = feed.told.findLast((e) => e.live === false)!.at - silencedAt
  t.ok(noticedMs <= 1000, `told down ${Math.round(noticedMs)} ms after it went silent`)
  await feed.until('the write made while silent, after a new connection', () => feed.tags().has('user:while-silent') && feed.live())
})

test('away longer than the log keeps: from where the fleet applied it when that covers what was deleted, else all', async (t) => {
  const { schema, outside } = await database(t)
  const relay = await postgresRelay(t)
  const feed = recorder()
  /** Where the fleet's shared cache says it applied the log up to; null: it cannot say. */
  let fleet: string | null = null
  const watch = followChangeLog({
    connection: { connectionString: relay.url, options: `-c search_path=${schema}` },
    schema,
    keepMs: 600_000
  }, { ...feed.listener, resumeFrom: async () => fleet })
  t.teardown(() => watch.stop())
  await feed.until('live', feed.live)

  // Another instance that keeps rows 1 ms and prunes on every read: what the away one missed is deleted.
  const pruner = followChangeLog({ ...feedOptions(schema), keepMs: 1, pruneMs: 0 }, { changed () {}, watching () {} })
  t.teardown(() => pruner.stop())
  const awayAndPruned = async (id: string) => {
    relay.cut()
    await feed.until('down', () => !feed.live())
    await outside.query("INSERT INTO users (id, name, email, created_at) VALUES ($1, 'Away', $1 || '@example.com', now())", [id])
    const deadline = performance.now() + 5000
    for (;;) {
      const { rows } = await outside.query<{ left: number; pruned: string }>(
        'SELECT (SELECT count(*)::int FROM change_log) AS left, (SELECT up_to::text FROM change_log_pruned) AS pruned')
      if (rows[0]!.left === 0 && rows[0]!.pruned !== '0') {
        // Away longer than a heartbeat and its deadline: an absence, not a slow read.
        await sleep(HEARTBEAT_MS + 2 * DEADLINE_MS)
        return rows[0]!.pruned
      }
      if (performance.now() > deadline) throw new Error('the log was not pruned')
      await sleep(50)
    }
  }

  // Nothing covers the deleted rows: what they said is lost, so everything is told changed.
  await awayAndPruned('away-1')
  const before = feed.told.length
  await relay.restore()
  await feed.until("'all' once back", () => feed.told.slice(before).some((e) => e.tags === 'all') && feed.live())

  // The fleet applied the log past them (another instance was listening): read on from there, no 'all'.
  const pruned = await awayAndPruned('away-2')
  fleet = (await outside.query<{ at: string }>('SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS at')).rows[0]!.at
  t.ok(BigInt(fleet) > BigInt(pruned), 'the fleet position is past what was deleted')
  const again = feed.told.length
  await relay.restore()
  await feed.until('live again', () => feed.told.slice(again).some((e) => e.live === true))
  await sleep(HEARTBEAT_MS * 2)
  t.notOk(feed.told.slice(again).some((e) => e.tags === 'all'), "read on from the fleet's position, not 'all'")
})

test('a live reader says nothing is missed while a long transaction holds its position below what is pruned', async (t) => {
  const { schema, outside } = await database(t)
  const feed = await liveFeed(t, schema)
  // A transaction left open (a report, an idle session): every snapshot's xmin stays at its id.
  const open = new pg.Client({ connectionString: TEST_DATABASE_URL, options: `-c search_path=${schema}` })
  await open.connect()
  t.teardown(() => open.end())
  await open.query('BEGIN')
  await open.query('SELECT pg_current_xact_id()')
  t.teardown(() => open.query('ROLLBACK'))
  await outside.query("INSERT INTO users (id, name, email, created_at) VALUES ('during', 'During', 'during@example.com', now())")
  await feed.until('the write made meanwhile', () => feed.tags().has('user:during'))
  // Another instance prunes everything older than 1 ms: what it deletes is above the reader's position.
  const pruner = followChangeLog({ ...feedOptions(schema), keepMs: 1, pruneMs: 0 }, { changed () {}, watching () {} })
  t.teardown(() => pruner.stop())
  const deadline = performance.now() + 5000
  for (;;) {
    const { rows } = await outside.query<{ pruned: string; xmin: string }>(
      'SELECT (SELECT up_to::text FROM change_log_pruned) AS pruned, pg_snapshot_xmin(pg_current_snapshot())::text AS xmin')
    if (BigInt(rows[0]!.pruned) >= BigInt(rows[0]!.xmin)) break
    if (performance.now() > deadline) throw new Error('the log was not pruned past the open transaction')
    await sleep(50)
  }
  await sleep(HEARTBEAT_MS * 4)
  t.notOk(feed.told.some((e) => e.tags === 'all'), "no 'all': the reader was never away")
  t.ok(feed.live(), 'and it stays live')
})
