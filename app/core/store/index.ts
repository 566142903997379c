import type { Config } from '../config.ts'
import { CHANGES_KEEP_MS, openPostgresStore } from './postgres.ts'
import { openSqliteStore } from './sqlite.ts'
import type { Store } from './types.ts'

export type { Store } from './types.ts'

export interface OpenOptions {
  /**
   * Opened by the service itself (not a command-line tool): it holds the embedded file's instance lock
   * (one service per file), and its PostgreSQL writes publish no change notifications (it tells the
   * caches itself, before acknowledging them).
   */
  service?: boolean
}

/** PostgreSQL when DATABASE_URL is set, otherwise the embedded node:sqlite file. */
export async function openStore (
  config: Pick<Config, 'databaseUrl' | 'databasePoolSize' | 'databaseSchema' | 'sqlitePath'> &
    Partial<Pick<Config, 'databaseApplicationName' | 'responseCache'>>,
  options: OpenOptions = {}
): Promise<Store> {
  if (config.databaseUrl) {
    return openPostgresStore({
      url: config.databaseUrl,
      poolSize: config.databasePoolSize,
      schema: config.databaseSchema,
      applicationName: config.databaseApplicationName,
      ownWrites: options.service,
      // The change log must cover what a cached answer may still hold: its TTL, and a minute more.
      changesKeepMs: Math.max(CHANGES_KEEP_MS, (config.responseCache?.ttlMs ?? 0) + 60_000)
    })
  }
  return openSqliteStore(config.sqlitePath, { instanceLock: options.service })
}
