import type { Config } from '../config/index.ts'
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

/** Where the store is: the store's settings (config.store), the application name optional. */
export type StoreLocation = Pick<Config['store'], 'databaseUrl' | 'databasePoolSize' | 'databaseSchema' | 'sqlitePath'> &
  Partial<Pick<Config['store'], 'databaseApplicationName'>>

/**
 * PostgreSQL when DATABASE_URL is set, otherwise the embedded node:sqlite file. `config` is the service's
 * configuration or a command's (anything with the store's settings, and the response cache's when it has one).
 */
export async function openStore (
  config: { store: StoreLocation, responseCache?: Pick<Config['responseCache'], 'ttlMs'> },
  options: OpenOptions = {}
): Promise<Store> {
  const { store } = config
  if (store.databaseUrl) {
    return openPostgresStore({
      url: store.databaseUrl,
      poolSize: store.databasePoolSize,
      schema: store.databaseSchema,
      applicationName: store.databaseApplicationName,
      ownWrites: options.service,
      // The change log must cover what a cached answer may still hold: its TTL, and a minute more.
      changesKeepMs: Math.max(CHANGES_KEEP_MS, (config.responseCache?.ttlMs ?? 0) + 60_000)
    })
  }
  return openSqliteStore(store.sqlitePath, { instanceLock: options.service })
}
