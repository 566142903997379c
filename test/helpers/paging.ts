// Shared by the paging tests: a store of either kind, filled in bulk through the store itself (fast),
// with created_at values that tie in groups so the id tiebreak of the keyset order is exercised.
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import type { MessageRow, Store } from '../../app/core/store/types.ts'
import type { TestLike } from './app.ts'
import { TEST_DATABASE_URL, freshSchema } from './postgres.ts'

export const STORE_KINDS = ['sqlite', 'postgres'] as const
export type StoreKind = typeof STORE_KINDS[number]

/**
 * An empty store of `kind`: sqlite in memory, or PostgreSQL in a schema of the test's own; closed when the test ends.
 */
export async function emptyStore (t: TestLike, kind: StoreKind, label: string): Promise<Store> {
  const store = kind === 'sqlite'
    ? openSqliteStore(':memory:')
    : await openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 4, schema: await freshSchema(t, label) })
  t.teardown(() => store.close())
  return store
}

// Well in the past: rows created during a test (created_at now) come after every seeded one.
const BASE = Date.parse('2020-01-01T00:00:00.000Z')

/** A timestamp `step` milliseconds after the data set's base, as the stores keep it. */
export function at (step: number): string {
  return new Date(BASE + step).toISOString()
}

/** `n` users, five to a created_at; their ids in insertion order. */
export async function seedUsers (store: Store, n: number, prefix = 'user'): Promise<string[]> {
  const ids: string[] = []
  for (let start = 0; start < n; start += 2000) {
    const batch = Array.from({ length: Math.min(2000, n - start) }, (_, j) => {
      const i = start + j
      return { name: `${prefix} ${i}`, email: `${prefix}-${i}@example.com`, createdAt: at(Math.floor(i / 5)) }
    })
    ids.push(...(await store.insertUsers(batch)).map((u) => u.id))
  }
  return ids
}

/**
 * `n` messages in `roomId`, by the authors in turn (deleting an author deletes their messages all over
 * the room), four to a created_at; the room's rows, in (createdAt, id) order.
 */
export async function seedRoom (
  store: Store,
  roomId: string,
  authorIds: readonly string[],
  n: number
): Promise<MessageRow[]> {
  await store.insertMessages(
    Array.from({ length: n }, (_, i) => ({
      roomId,
      authorId: authorIds[i % authorIds.length]!,
      content: `message ${i}`,
      createdAt: at(Math.floor(i / 4))
    }))
  )
  return store.messagesPage(roomId, 'after', null, n + 1)
}

/** Every value that occurs more than once. */
export function duplicates (values: readonly string[]): string[] {
  const seen = new Set<string>()
  const twice = new Set<string>()
  for (const v of values) (seen.has(v) ? twice : seen).add(v)
  return [...twice]
}
