// Changes made beside the service, read from PostgreSQL's change log (the migration that creates it is in
// postgres.ts): one connection per instance, shared by everything that follows changes (the response
// cache, the app deployments). The log is the record; NOTIFY on the schema's channel only rings the bell,
// and every read is of the log itself, from where the last one ended, so a notification that was lost
// is read by the next read anyway.
//
// - Where a read ends: the xmin of its own snapshot. Every transaction below it had ended when the log was
//   read, so a row not read yet has a transaction id at or above it, whatever order transactions commit
//   in. The rows read that are at or above it are remembered by id and not told twice.
// - A heartbeat: the same read every HEARTBEAT_MS on the same connection. One unanswered after
//   DEADLINE_MS means the connection is silent (a NAT or a firewall that dropped it without a word): the
//   listener is told the feed is down, the connection is dropped and opened again, and reading resumes
//   where it ended. So a change is told within HEARTBEAT_MS + DEADLINE_MS, or the feed says it is down.
// - On start, from where the listener says the fleet's shared cache has applied the log up to (the
//   position is told with each change); when it cannot say, the rows of the last `keepMs` (what a shared
//   cache may still hold from before). An instance starting never empties what the others share.
// - Rows older than `keepMs` are deleted, a bounded batch at a time, by whichever instance gets there,
//   which records the last transaction id it deleted: a read back from an absence that starts at or
//   below it may have missed a deleted row (an instance away longer than the log keeps, none other
//   listening), and says 'all'. (A row deleted during a shorter absence was read before it unless its
//   transaction ran longer than the log keeps rows: that one commit can be missed.)
import pg from 'pg'
import type { ChangeListener, ChangeWatch } from './types.ts'

export interface ChangeLogOptions {
  connection: pg.ClientConfig
  /** The schema whose log and channel to follow; null: the connection's current schema. */
  schema: string | null
  /** How long the log keeps its rows (and how far back a start reads). */
  keepMs: number
  heartbeatMs?: number
  deadlineMs?: number
  /** How often this instance deletes rows older than `keepMs` (PRUNE_MS; tests make it short). */
  pruneMs?: number
}

/** How often the log is read when nothing rings, proving the connection alive. */
export const HEARTBEAT_MS = 250
/** A read unanswered this long: the connection is taken for silent. HEARTBEAT_MS + DEADLINE_MS < 1 s. */
export const DEADLINE_MS = 500
/** How long a lost connection waits before it connects again: doubling from the first to the last. */
const RECONNECT_MS = [100, 5000] as const
/** How often old rows are deleted, and how many at most at a time (a read must stay quick). */
const PRUNE_MS = 60_000
const PRUNE_ROWS = 5000

const READ = (where: string) => `SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS horizon,
  (SELECT up_to::text FROM change_log_pruned) AS pruned,
  COALESCE((SELECT json_agg(json_build_array(id::text, xid::text, tags) ORDER BY id) FROM change_log WHERE ${where}), '[]'::json) AS rows`
const READ_FROM = READ('xid >= $1::xid8')
const READ_RECENT = READ('at > now() - $1::interval')
// What it deletes, it records: a reader whose position is at or below it may have missed a deleted row.
const PRUNE = `WITH gone AS (DELETE FROM change_log WHERE id IN
  (SELECT id FROM change_log WHERE at < now() - $1::interval ORDER BY id LIMIT ${PRUNE_ROWS}) RETURNING xid)
  UPDATE change_log_pruned SET up_to = GREATEST(up_to, (SELECT max(xid) FROM gone)) WHERE EXISTS (SELECT 1 FROM gone)`

type LogRow = [id: string, xid: string, tags: string[]]

export function followChangeLog (options: ChangeLogOptions, listener: ChangeListener): ChangeWatch {
  const heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS
  const deadlineMs = options.deadlineMs ?? DEADLINE_MS
  const pruneMs = options.pruneMs ?? PRUNE_MS
  const keep = `${options.keepMs} milliseconds`
  let stopped = false
  let client: pg.Client | null = null
  let delay: number = RECONNECT_MS[0]
  let retry: NodeJS.Timeout | null = null
  let heartbeat: NodeJS.Timeout | null = null
  /** Where the next read starts (an xid8); null: from the last `keepMs`. */
  let position: string | null = null
  /** Rows read whose transaction id is at or above `position`: the next read finds them again. */
  let told = new Map<string, bigint>()
  /** When a read last answered (performance.now()): a longer gap than a heartbeat's is an absence. */
  let lastRead = -Infinity
  let reading: Promise<void> | null = null
  let readAgain = false
  let lastPrune = performance.now()

  /** One read of the log on `c`, within the deadline; a second request meanwhile reads again after it. */
  function read (c: pg.Client): Promise<void> {
    if (reading) {
      readAgain = true
      return reading
    }
    reading = (async () => {
      try {
        let again = true
        while (again) {
          readAgain = false
          await readOnce(c)
          again = readAgain && client === c
        }
      } finally {
        reading = null
      }
    })()
    return reading
  }

  async function readOnce (c: pg.Client): Promise<void> {
    const query = position === null
      ? c.query<{ horizon: string; pruned: string; rows: LogRow[] }>(READ_RECENT, [keep])
      : c.query<{ horizon: string; pruned: string; rows: LogRow[] }>(READ_FROM, [position])
    const { horizon, pruned, rows } = (await withinDeadline(query, deadlineMs)).rows[0]!
    // Back from an absence (a lost or silent connection), rows at or after where this read starts may
    // have been deleted meanwhile. If the fleet's shared cache applied the log past them, reading on from
    // there misses nothing; otherwise what they said is lost. A reader that has not been away read every
    // row pruned since (pruning takes rows older than keepMs): while a long transaction stays open, the
    // position (its snapshot's xmin) stays below what is pruned, and that is no loss.
    const away = performance.now() - lastRead > heartbeatMs + 2 * deadlineMs
    const missed = away && position !== null && BigInt(pruned) >= BigInt(position)
    if (missed && listener.resumeFrom) {
      const fleet = await withinDeadline(listener.resumeFrom(), deadlineMs).catch(() => null)
      if (fleet !== null && BigInt(fleet) > BigInt(pruned) && client === c) {
        position = fleet
        told = new Map()
        return readOnce(c)
      }
    }
    const floor = BigInt(horizon)
    const tags = new Set<string>()
    const stillAbove = new Map<string, bigint>()
    for (const [id, xid, rowTags] of rows) {
      const transaction = BigInt(xid)
      if (transaction >= floor) stillAbove.set(id, transaction)
      if (told.has(id)) continue
      for (const tag of rowTags) tags.add(tag)
    }
    if (client !== c) return
    told = stillAbove
    position = horizon
    lastRead = performance.now()
    if (missed) listener.changed('all', horizon)
    else if (tags.size > 0) listener.changed([...tags], horizon)
    if (lastRead - lastPrune > pruneMs) {
      lastPrune = lastRead
      await withinDeadline(c.query(PRUNE, [keep]), deadlineMs)
    }
  }

  const lost = (c: pg.Client) => {
    if (stopped || client !== c) return
    client = null
    if (heartbeat) clearInterval(heartbeat)
    heartbeat = null
    c.removeAllListeners()
    c.on('error', () => {})
    // A silent connection may never answer a goodbye: ended without waiting (pg destroys the socket when a
    // query is still out).
    void c.end().catch(() => {})
    listener.watching(false)
    retry = setTimeout(connect, delay).unref()
    delay = Math.min(delay * 2, RECONNECT_MS[1])
  }

  async function connect (): Promise<void> {
    retry = null
    if (stopped) return
    const c = new pg.Client({ ...options.connection, keepAlive: true, keepAliveInitialDelayMillis: 1000 })
    client = c
    c.on('error', () => lost(c))
    c.on('end', () => lost(c))
    c.on('notification', () => { void read(c).catch(() => lost(c)) })
    try {
      await c.connect()
      const schema = options.schema ??
        (await c.query<{ schema: string }>('SELECT current_schema() AS schema')).rows[0]!.schema
      await withinDeadline(c.query(`LISTEN ${pg.escapeIdentifier(`store_changes_${schema}`)}`), deadlineMs * 4)
      // Starting: from where the fleet's shared cache has applied the log up to, when it knows (an
      // instance joining then re-applies nothing the others applied), else the log's whole window.
      if (position === null && listener.resumeFrom) {
        position = await withinDeadline(listener.resumeFrom(), deadlineMs * 4).catch(() => null)
      }
      await read(c)
    } catch {
      lost(c)
      return
    }
    if (stopped || client !== c) return
    delay = RECONNECT_MS[0]
    listener.watching(true)
    heartbeat = setInterval(() => { void read(c).catch(() => lost(c)) }, heartbeatMs).unref()
  }

  listener.watching(false)
  void connect()
  return {
    async stop () {
      stopped = true
      if (retry) clearTimeout(retry)
      if (heartbeat) clearInterval(heartbeat)
      const last = client
      client = null
      if (last) {
        last.removeAllListeners()
        last.on('error', () => {})
        await Promise.race([last.end().catch(() => {}), new Promise((resolve) => setTimeout(resolve, 1000).unref())])
      }
    }
  }
}

/** `promise`, or a rejection once `ms` have passed without its answer. */
function withinDeadline<T> (promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout
  return Promise.race([
    promise,
    new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`PostgreSQL did not answer within ${ms} ms`)), ms)
    })
  ]).finally(() => clearTimeout(timer))
}
