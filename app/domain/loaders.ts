// Per-request batching loaders (one set per request, never shared: a shared cache would leak one
// caller's rows to another). Both transports use this one factory.
import DataLoader from 'dataloader'
import type { MessageRow, Store, UserRow } from '../store/types.ts'

export interface Loaders {
  userById: DataLoader<string, UserRow | null>
  /** Key: [roomId, limit]. */
  messagesByRoom: DataLoader<readonly [string, number], MessageRow[], string>
}

export function createLoaders (store: Store): Loaders {
  return {
    userById: new DataLoader(async (ids) => {
      const rows = await store.usersByIds(ids)
      const byId = new Map(rows.map((row) => [row.id, row]))
      return ids.map((id) => byId.get(id) ?? null)
    }),
    messagesByRoom: new DataLoader(
      (keys) => Promise.all(keys.map(([roomId, limit]) => store.messagesByRoom(roomId, limit))),
      { cacheKeyFn: ([roomId, limit]) => `${limit}:${roomId}` }
    )
  }
}
