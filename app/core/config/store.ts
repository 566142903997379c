// Where the data lives: the embedded node:sqlite file, or PostgreSQL when DATABASE_URL is set.
import { area, optional } from './area.ts'
import { urlProblem } from './urls.ts'

export const store = area({
  key: 'store',
  title: 'Store',
  about: 'The embedded node:sqlite file by default; PostgreSQL when `DATABASE_URL` is set.',
  settings: {
    DATABASE_URL: { type: 'string', doc: 'PostgreSQL instead of the embedded node:sqlite store (`postgres://user@host:5432/db`, or `postgres:///db?host=/socket/dir`; anything else fails the start naming the setting); migrations run on start under an advisory lock' },
    DATABASE_POOL_SIZE: { type: 'integer', minimum: 1, default: 10, doc: 'PostgreSQL connections per instance' },
    DATABASE_SCHEMA: { type: 'string', doc: 'a schema of its own (created if missing)' },
    DATABASE_APPLICATION_NAME: { type: 'string', default: 'graphql-query-service', doc: 'shown in pg_stat_activity for this service\'s connections' },
    SQLITE_PATH: { type: 'string', default: 'data/service.db', doc: 'the embedded store\'s file (without `DATABASE_URL`). One service per file: the service holds a lock on `<file>.instance-lock` while it runs, and a second one on the same file is refused at start (each would keep its own response cache; instances that share data run on PostgreSQL and Redis). Command-line tools take no lock: their writes reach the running service\'s cache within 200 ms' },
    DEMO_DATA: { type: 'boolean', shownDefault: 'true; false in production', doc: 'a new embedded store starts with the demo data set' }
  },
  read: (e, { production, problems }) => {
    const databaseUrl = optional(e.DATABASE_URL)
    // A malformed URL would otherwise fail later in a driver's words (getaddrinfo ENOTFOUND base).
    const problem = urlProblem('DATABASE_URL', databaseUrl, ['postgres:', 'postgresql:'], 'postgres://user:password@host:5432/database')
    if (problem) problems.push(problem)
    return {
      databaseUrl,
      databasePoolSize: e.DATABASE_POOL_SIZE,
      /** null keeps the connection's search_path. */
      databaseSchema: optional(e.DATABASE_SCHEMA),
      databaseApplicationName: e.DATABASE_APPLICATION_NAME,
      sqlitePath: e.SQLITE_PATH,
      demoData: e.DEMO_DATA ?? !production
    }
  }
})
