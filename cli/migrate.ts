// npm run migrate [-- --dry-run]
// Brings the configured store's schema (DATABASE_URL, else SQLITE_PATH) up to this version of the
// service, as every instance does when it starts (on PostgreSQL under an advisory lock, so this may run
// beside instances starting): a release can migrate before its instances roll out (a Kubernetes Job, a
// deploy step), and --dry-run says what would be applied without changing anything.
import { readCommandLine } from '../app/core/command-line.ts'
import { loadSettingsOrExit, SERVICE_AREAS, withoutCredentials, type Config } from '../app/core/config/index.ts'
import { openStore } from '../app/core/store/index.ts'
import { MIGRATIONS as POSTGRES_MIGRATIONS, postgresSchemaVersion } from '../app/core/store/postgres.ts'
import { MIGRATIONS as SQLITE_MIGRATIONS, sqliteSchemaVersion } from '../app/core/store/sqlite.ts'

const USAGE = `usage: npm run migrate [-- --dry-run]
Applies the schema migrations this version of the service needs to the configured store (DATABASE_URL and
DATABASE_SCHEMA, else the embedded file SQLITE_PATH), as an instance does at start (on PostgreSQL under an
advisory lock, so instances may be starting meanwhile). --dry-run prints the store's version and the
migrations it would apply, and changes nothing.`

/** Where the store is and what it is at, in words, and the migrations this version has for it. */
interface Target { where: string; version: number | null; migrations: string[] }

async function target (config: Config): Promise<Target> {
  if (config.store.databaseUrl) {
    const schema = config.store.databaseSchema
    return {
      where: `PostgreSQL ${withoutCredentials(config.store.databaseUrl)}${schema ? ` (schema ${schema})` : ''}`,
      version: await postgresSchemaVersion(config.store.databaseUrl, schema),
      migrations: POSTGRES_MIGRATIONS
    }
  }
  return { where: `SQLite ${config.store.sqlitePath}`, version: sqliteSchemaVersion(config.store.sqlitePath), migrations: SQLITE_MIGRATIONS }
}

/** A migration in one line: its version and the first line of its SQL. */
const summary = (migrations: string[], version: number) =>
  `  ${version}: ${migrations[version - 1]!.trim().split('\n')[0]!.trim().slice(0, 100)}`

/** The versions after `from` up to the last one. */
const pendingAfter = (from: number, migrations: string[]) =>
  Array.from({ length: Math.max(0, migrations.length - from) }, (_, i) => from + i + 1)

if (import.meta.main) {
  const { values } = readCommandLine(USAGE, { options: { 'dry-run': { type: 'boolean', default: false } } })
  // The service's whole configuration: run beside a deployment, the command refuses what the service would.
  const config = loadSettingsOrExit(SERVICE_AREAS)
  try {
    const before = await target(config)
    const at = before.version ?? 0
    const last = before.migrations.length
    if (at > last) {
      console.error(`${before.where} is at version ${at}, newer than this service's ${last}: run the newer release's migrate`)
      process.exit(1)
    }
    const pending = pendingAfter(at, before.migrations)
    const state = before.version === null ? 'does not exist yet' : `is at version ${at} of ${last}`
    if (pending.length === 0) {
      console.log(`${before.where} ${state}: nothing to apply`)
    } else if (values['dry-run']) {
      console.log(`${before.where} ${state}; would apply ${pending.length} migration(s) (dry run, nothing changed):`)
      for (const version of pending) console.log(summary(before.migrations, version))
    } else {
      // Opening the store applies what is missing, as the service does at start.
      const store = await openStore(config)
      await store.close()
      const after = (await target(config)).version
      console.log(`${before.where} ${state}; applied ${pending.length} migration(s), now at version ${after}:`)
      for (const version of pending) console.log(summary(before.migrations, version))
    }
  } catch (err) {
    console.error(`migrate: ${withoutCredentials((err as Error).message)}`)
    process.exit(1)
  }
}
