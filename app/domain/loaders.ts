// Per-request batching loaders (one set per request, never shared: a shared cache would leak one
// caller's rows to another). Both transports use this one factory. Each loader is made on first use:
// most requests need one of them, and a request pays for what it uses.
//
// The loaders also see every read the request makes, so they record it, when asked, as read tags
// (read-tags.ts): what the response cache must drop the answer for when a write changes it.
import DataLoader from 'dataloader'
import type { MessageRow, Store, UserRow } from '../store/types.ts'
import { readTags, type ReadSet } from './read-tags.ts'

export interface Loaders {
  readonly userById: DataLoader<string, UserRow | null>
  /** Key: [roomId, limit]. */
  readonly messagesByRoom: DataLoader<readonly [string, number], MessageRow[], string>
  /** What this request has read, as read tags; null when nobody asked (nothing is recorded). */
  readonly reads: ReadSet | null
  /** Rows this request has read (a page of users): `userById` answers them without reading them again. */
  rememberUsers (rows: readonly UserRow[]): void
  /** A page of a room's messages this request has read from the store itself (pages are not batched). */
  rememberMessages (roomId: string, rows: readonly MessageRow[]): void
  /** A user deleted by this request: forgotten by `userById` (cache and remembered rows). */
  forgetUser (id: string): void
}

class RequestLoaders implements Loaders {
  readonly #store: Store
  readonly reads: ReadSet | null
  #userById: Loaders['userById'] | undefined
  #messagesByRoom: Loaders['messagesByRoom'] | undefined
  // Pages remembered as they were read, indexed only if the user loader runs a batch: a list costs one
  // push, where priming the loader cost a DataLoader and a promise per row (2% of a users list's CPU).
  readonly #remembered: (readonly UserRow[])[] = []
  readonly #forgotten = new Set<string>()

  constructor (store: Store, reads: ReadSet | null) {
    this.#store = store
    this.reads = reads
  }

  get userById (): Loaders['userById'] {
    const store = this.#store
    return (this.#userById ??= new DataLoader(async (ids) => {
      // Every id reaches this batch once per request (found or not, remembered or read): each is recorded.
      if (this.reads) for (const id of ids) this.reads.add(readTags.user(id))
      const byId = this.#rememberedById()
      const missing = byId.size === 0 ? ids : ids.filter((id) => !byId.has(id))
      if (missing.length > 0) for (const row of await store.usersByIds(missing)) byId.set(row.id, row)
      return ids.map((id) => byId.get(id) ?? null)
    }))
  }

  rememberUsers (rows: readonly UserRow[]): void {
    // An empty list too: it is not empty once a user is created.
    this.reads?.add(readTags.users)
    if (rows.length > 0) this.#remembered.push(rows)
  }

  rememberMessages (roomId: string, rows: readonly MessageRow[]): void {
    if (this.reads) recordMessages(this.reads, roomId, rows)
  }

  forgetUser (id: string): void {
    this.#forgotten.add(id)
    this.#userById?.clear(id)
  }

  /** The remembered rows by id (the first read of an id wins, as DataLoader's prime did), less the forgotten. */
  #rememberedById (): Map<string, UserRow> {
    const byId = new Map<string, UserRow>()
    for (const rows of this.#remembered) {
      for (const row of rows) if (!byId.has(row.id) && !this.#forgotten.has(row.id)) byId.set(row.id, row)
    }
    return byId
  }

  get messagesByRoom (): Loaders['messagesByRoom'] {
    const store = this.#store
    return (this.#messagesByRoom ??= new DataLoader(
      (keys) => Promise.all(keys.map(async ([roomId, limit]) => {
        const rows = await store.messagesByRoom(roomId, limit)
        if (this.reads) recordMessages(this.reads, roomId, rows)
        return rows
      })),
      { cacheKeyFn: ([roomId, limit]) => `${limit}:${roomId}` }
    ))
  }
}

/**
 * A room read, and the author of each message read: deleting a user deletes their messages (the store
 * cascades), which changes the room's answer even when it selects no author.
 */
function recordMessages (reads: ReadSet, roomId: string, rows: readonly MessageRow[]): void {
  reads.add(readTags.room(roomId))
  for (const row of rows) reads.add(readTags.user(row.authorId))
}

/** `reads`: a set to record the request's read tags into (a cacheable query), or null (nothing recorded). */
export function createLoaders (store: Store, reads: ReadSet | null = null): Loaders {
  return new RequestLoaders(store, reads)
}
