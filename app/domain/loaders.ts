// Per-request batching loaders (one set per request, never shared: a shared cache would leak one
// caller's rows to another). Both transports use this one factory. Each loader is made on first use:
// most requests need one of them, and a request pays for what it uses.
import DataLoader from 'dataloader'
import type { MessageRow, Store, UserRow } from '../store/types.ts'

export interface Loaders {
  readonly userById: DataLoader<string, UserRow | null>
  /** Key: [roomId, limit]. */
  readonly messagesByRoom: DataLoader<readonly [string, number], MessageRow[], string>
}

class RequestLoaders implements Loaders {
  readonly #store: Store
  #userById: Loaders['userById'] | undefined
  #messagesByRoom: Loaders['messagesByRoom'] | undefined

  constructor (store: Store) {
    this.#store = store
  }

  get userById (): Loaders['userById'] {
    const store = this.#store
    return (this.#userById ??= new DataLoader(async (ids) => {
      const rows = await store.usersByIds(ids)
      const byId = new Map(rows.map((row) => [row.id, row]))
      return ids.map((id) => byId.get(id) ?? null)
    }))
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
