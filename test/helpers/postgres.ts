// PostgreSQL for tests: the machine's server (127.0.0.1:5432, database test) with a schema of the
// test's own, dropped afterwards. Fails with a clear message when the server is missing.
import pg from 'pg'
import { randomBytes } from 'node:crypto'
import type { TestLike } from './app.ts'

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'

/** A fresh schema name, and its removal when the test ends. */
export async function freshSchema (t: TestLike, label: string): Promise<string> {
  const schema = `t_${label}_${randomBytes(4).toString('hex')}`
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL, connectionTimeoutMillis: 3000 })
  try {
    await client.connect()
  } catch (err) {
    throw new Error(`PostgreSQL is required for this test at ${TEST_DATABASE_URL} (set TEST_DATABASE_URL): ${(err as Error).message}`)
  }
  await client.end()
  t.teardown(async () => {
    const c = new pg.Client({ connectionString: TEST_DATABASE_URL })
    await c.connect()
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    await c.end()
  })
  return schema
}
