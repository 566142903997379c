// Per-request batching loaders (one set per request, never shared: a shared cache would leak one
// caller's rows to another). Both transports use this one factory. Each loader is made on first use:
// most requests need one of them, and a request pays for what it uses. (What a request reads is
// recorded by its store, not here: store-tags.ts.)
import DataLoader from 'dataloader'
import type { MessageRow, Store, UserRow } from '../store/types.ts'

export interface Loaders {
  readonly userById: DataLoader<string, UserRow | null>
  /** Key: [roomId, limit]. */
  readonly messagesByRoom: DataLoader<readonly [string, number], MessageRow[], string>
  /** Rows this request has read (a page of users): `userById` answers them without reading them again. */
  rememberUsers (rows: readonly UserRow[]): void
  /** A user deleted by this request: forgotten by `userById` (cache and remembered rows). */
  forgetUser (id: string): void
}

class RequestLoaders implements Loaders {
  readonly #store: Store
  #userById: Loaders['userById'] | undefined
  #messagesByRoom: Loaders['messagesByRoom'] | undefined
  // Pages remembered as they were read, indexed only if the user loader runs a batch: a list costs one
  // push, where priming the loader cost a DataLoader and a promise per row (2% of a users list's CPU).
  readonly #remembered: (readonly UserRow[])[] = []
  readonly #forgotten = new Set<string>()

  constructor (store: Store) {
    this.#store = store
  }

  get userById (): Loaders['userById'] {
    const store = this.#store
    return (this.#userById ??= new DataLoader(async (ids) => {
      const byId = this.#rememberedById()
      const missing = byId.size === 0 ? ids : ids.filter((id) => !byId.has(id))
      if (missing.length > 0) for (const row of await store.usersByIds(missing)) byId.set(row.id, row)
      return ids.map((id) => byId.get(id) ?? null)
    }))
  }

  rememberUsers (rows: readonly UserRow[]): void {
    if (rows.length > 0) this.#remembered.push(rows)
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
      (keys) => Promise.all(keys.map(([roomId, limit]) => store.messagesByRoom(roomId, limit))),
      { cacheKeyFn: ([roomId, limit]) => `${limit}:${roomId}` }
    ))
  }
}

export function createLoaders (store: Store): Loaders {
  return new RequestLoaders(store)
}
