// The deployed topology of the benchmark: PostgreSQL and Redis, as docker-compose.yml runs the service
// (and test/cluster/ starts it), for the rows named `<row>-deployed`. PostgreSQL gets a schema of this
// run's own holding the very data the embedded rows read (the seeded SQLite file, copied row for row, so
// ids, tokens and answers are the same), and every deployed row keeps its Redis keys under a prefix of
// this run's own; both are removed at the end.
import pg from 'pg'
import { Redis } from 'ioredis'
import { openPostgresStore } from '../app/core/store/postgres.ts'
import { openSqliteStore } from '../app/core/store/sqlite.ts'
import type { MessageRow, Store, UserRow } from '../app/core/store/types.ts'

export interface Deployed {
  databaseUrl: string
  redisUrl: string
  /** The PostgreSQL schema of this run. */
  schema: string
  /** Every Redis key of this run starts with it. */
  redisPrefix: string
  /** What a deployed row's server gets on top of the benchmark's base settings. */
  env: Record<string, string>
}

/** PostgreSQL and Redis as DATABASE_URL and REDIS_URL give them, or this machine's (the tests' own). */
export function deployedSettings (runId: string): Deployed {
  const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
  const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
  const schema = `bench_${runId}`
  const redisPrefix = `bench:${runId}:`
  return {
    databaseUrl,
    redisUrl,
    schema,
    redisPrefix,
    env: {
      DATABASE_URL: databaseUrl,
      DATABASE_SCHEMA: schema,
      DATABASE_POOL_SIZE: process.env.DATABASE_POOL_SIZE ?? '10',
      REDIS_URL: redisUrl,
      REDIS_PREFIX: redisPrefix
    }
  }
}

/** Why the deployed rows cannot run (a server not answering), or null. */
export async function deployedUnavailable (deployed: Deployed): Promise<string | null> {
  const client = new pg.Client({ connectionString: deployed.databaseUrl, connectionTimeoutMillis: 3000 })
  try {
    await client.connect()
  } catch (err) {
    return `PostgreSQL does not answer at ${withoutPassword(deployed.databaseUrl)} (set DATABASE_URL): ${(err as Error).message}`
  } finally {
    await client.end().catch(() => {})
  }
  const redis = new Redis(deployed.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 3000 })
  redis.on('error', () => {})
  try {
    await redis.connect()
    await redis.ping()
  } catch (err) {
    return `Redis does not answer at ${withoutPassword(deployed.redisUrl)} (set REDIS_URL): ${(err as Error).message}`
  } finally {
    redis.disconnect()
  }
  return null
}

const withoutPassword = (url: string) => url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@')

/** Pages through a store's reader `read(from, size)` (keyset, oldest first) until it answers a short page. */
type Reader<T> = (from: T | null, size: number) => Promise<T[]>

async function * pages<T extends { createdAt: string; id: string }> (read: Reader<T>) {
  let from: T | null = null
  for (;;) {
    const page = await read(from, 1000)
    if (page.length > 0) yield page
    if (page.length < 1000) return
    from = page.at(-1)!
  }
}

/**
 * Opens the deployed schema (migrating it) and copies the embedded store's users, messages and the
 * partner logins given into it, ids and times included: every deployed row reads what its embedded twin
 * reads, and a partner signs in with the same password. The command-line tools' way in (no instance
 * lock; changes published to running instances: none runs yet).
 */
export async function copySeed (
  sqlitePath: string, deployed: Deployed, rooms: readonly string[], logins: readonly string[]
): Promise<Store> {
  const from = openSqliteStore(sqlitePath)
  const to = await openPostgresStore({ url: deployed.databaseUrl, poolSize: 4, schema: deployed.schema })
  try {
    for await (const users of pages<UserRow>((position, size) => from.usersAfter(position, size))) {
      await to.insertUsers(users)
    }
    for (const room of rooms) {
      const inRoom: Reader<MessageRow> = (position, size) => from.messagesPage(room, 'after', position, size)
      for await (const messages of pages(inRoom)) {
        // (A message's id is the store's own: PostgreSQL numbers them anew, in the same order.)
        await to.insertMessages(messages.map(({ id: _id, ...message }) => message))
      }
    }
    for (const login of logins) {
      const partner = await from.findCredentials(login)
      if (partner) await to.setCredentials(partner.userId, login, partner.passwordHash, partner.passwordSecret)
    }
  } catch (err) {
    await to.close()
    throw err
  } finally {
    await from.close()
  }
  return to
}

/** Drops the run's schema and its Redis keys. */
export async function removeDeployed (deployed: Deployed): Promise<void> {
  const client = new pg.Client({ connectionString: deployed.databaseUrl })
  await client.connect()
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(deployed.schema)} CASCADE`)
  } finally {
    await client.end()
  }
  const redis = new Redis(deployed.redisUrl, { maxRetriesPerRequest: 1 })
  try {
    for await (const keys of redis.scanStream({ match: `${deployed.redisPrefix}*`, count: 1000 })) {
      if ((keys as string[]).length > 0) await redis.del(...(keys as string[]))
    }
  } finally {
    redis.disconnect()
  }
}
