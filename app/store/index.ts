import type { Config } from '../config.ts'
import { openPostgresStore } from './postgres.ts'
import { openSqliteStore } from './sqlite.ts'
import type { Store } from './types.ts'

export type { Store } from './types.ts'

/** PostgreSQL when DATABASE_URL is set, otherwise the embedded node:sqlite file. */
export async function openStore (
  config: Pick<Config, 'databaseUrl' | 'databasePoolSize' | 'databaseSchema' | 'sqlitePath'> &
    Partial<Pick<Config, 'databaseApplicationName'>>
): Promise<Store> {
  if (config.databaseUrl) {
    return openPostgresStore({
      url: config.databaseUrl,
      poolSize: config.databasePoolSize,
      schema: config.databaseSchema,
      applicationName: config.databaseApplicationName
    })
  }
  return openSqliteStore(config.sqlitePath)
}
