// PostgreSQL for tests: the machine's server (127.0.0.1:5432, database test) with a schema of the
// test's own, dropped afterwards. Fails with a clear message when the server is missing.
import pg from 'pg'
import { randomBytes } from 'node:crypto'
import { connect, createServer, type AddressInfo, type Socket } from 'node:net'
import type { TestLike } from './app.ts'

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'

/** A fresh schema name, and its removal when the test ends. */
export async function freshSchema (t: TestLike, label: string): Promise<string> {
  const schema = `t_${label}_${randomBytes(4).toString('hex')}`
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL, connectionTimeoutMillis: 3000 })
  try {
    await client.connect()
  } catch (err) {
    throw new Error(
      `PostgreSQL is required for this test at ${TEST_DATABASE_URL} (set TEST_DATABASE_URL): ${(err as Error).message}`
    )
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

/**
 * A relay between a store and PostgreSQL that a test cuts (the server becomes unreachable: listener
 * closed, open connections dropped) and restores on the same port, or whose one connection it silences
 * (`silence`: bytes stop flowing both ways, the connection stays open, as behind a NAT that forgot it).
 * `url` is TEST_DATABASE_URL through it.
 */
export async function postgresRelay (t: TestLike) {
  const target = new URL(TEST_DATABASE_URL)
  const sockets = new Set<Socket>()
  /** Each relayed connection by the local port of its side towards PostgreSQL (pg_stat_activity's client_port). */
  const byServerSidePort = new Map<number, { client: Socket, upstream: Socket }>()
  const relay = createServer((client) => {
    const upstream = connect(Number(target.port || 5432), target.hostname)
    for (const s of [client, upstream]) {
      sockets.add(s)
      s.on('close', () => sockets.delete(s))
      s.on('error', () => {})
    }
    upstream.once('connect', () => byServerSidePort.set(upstream.localPort!, { client, upstream }))
    client.pipe(upstream).pipe(client)
  })
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve))
  const port = (relay.address() as AddressInfo).port
  t.teardown(() => { relay.close(); for (const s of sockets) s.destroy() })
  return {
    url: TEST_DATABASE_URL.replace(/@[^/]+\//, `@127.0.0.1:${port}/`),
    cut () {
      relay.close()
      for (const s of sockets) s.destroy()
    },
    restore: () => new Promise<void>((resolve) => relay.listen(port, '127.0.0.1', resolve)),
    /** Silences the connection PostgreSQL sees from `clientPort`; false when no such connection is relayed. */
    silence (clientPort: number): boolean {
      const pair = byServerSidePort.get(clientPort)
      if (!pair) return false
      pair.client.unpipe(pair.upstream)
      pair.upstream.unpipe(pair.client)
      pair.client.pause()
      pair.upstream.pause()
      return true
    }
  }
}
