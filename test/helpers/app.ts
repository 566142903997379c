// Builds the app for a test: its own in-memory store (or a PostgreSQL schema of its own), port 0,
// closed when the test ends. Tests run in parallel, so nothing here is shared between files.
import { Writable } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../app/app.ts'
import { loadConfig, type Config } from '../../app/core/config/index.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import type { Store } from '../../app/core/store/types.ts'
import { mintToken } from '../../cli/mint-token.ts'
import type { Role } from '../../app/core/store/types.ts'

export interface TestLike {
  teardown (fn: () => unknown): void
}

export const TEST_JWT_SECRET = 'test-secret-that-is-long-enough-0123456789'
export const TEST_PARTNER_SECRET_KEY = 'test-partner-key-that-is-long-enough-0123456789'

/** A configuration for tests: development profile unless `env` says otherwise, quiet, port 0. */
export function testConfig (env: Record<string, string> = {}): Config {
  // Load shedding is off unless a test turns it on: tests share two cores, and a starved test process
  // would otherwise measure its own event-loop delay and shed the test's requests.
  return loadConfig({
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    PORT: '0',
    LOG_LEVEL: 'silent',
    DEMO_DATA: 'false',
    PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0',
    ...env
  })
}

/** A logger destination that keeps the lines written to it (pass `stream` as buildApp's `logger: { stream }`). */
export function capturedLog (): { lines: string[]; stream: Writable } {
  const lines: string[] = []
  const stream = new Writable({
    write (chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean))
      cb()
    }
  })
  return { lines, stream }
}

export interface TestApp {
  app: FastifyInstance
  store: Store
  config: Config
  token (sub: string, role?: Role): string
}

/** Builds an app on a fresh in-memory store with the demo data set (ids 1 = ADMIN, 2-4 = USER, 5 = SERVICE). */
export async function buildTestApp (
  t: TestLike,
  env: Record<string, string> = {},
  options: { store?: Store; demo?: boolean } = {}
): Promise<TestApp> {
  const config = testConfig(env)
  const store = options.store ?? openSqliteStore(':memory:')
  if (options.demo !== false) await loadDemoData(store)
  const app = await buildApp(config, { store, logger: false })
  t.teardown(async () => {
    await app.close()
    if (!options.store) await store.close()
  })
  return { app, store, config, token: (sub, role = 'USER') => mintToken(config.jwt, sub, role) }
}

/** Same, listening on 127.0.0.1 with an ephemeral port; returns the base URL. */
export async function listenTestApp (
  t: TestLike,
  env: Record<string, string> = {},
  options: { store?: Store; demo?: boolean } = {}
): Promise<TestApp & { url: string }> {
  const built = await buildTestApp(t, env, options)
  const url = await built.app.listen({ host: '127.0.0.1', port: 0 })
  return { ...built, url }
}

/** POSTs a GraphQL request to a listening server with fetch. */
export async function gql (
  url: string,
  query: string,
  variables?: Record<string, unknown>,
  headers: Record<string, string> = {}
) {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ query, variables })
  })
  return { status: response.status, headers: response.headers, body: (await response.json()) as any }
}
