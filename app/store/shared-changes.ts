// One watch of a store's changes per instance, shared by everything that follows them (the response
// cache, the app deployments): one PostgreSQL connection, one read of the change log per heartbeat,
// whatever the number of listeners. A listener that joins later is told at once whether the feed is live.
import type { ChangeListener, ChangeWatch, Store } from './types.ts'

/** `store`, its watchChanges shared: the first listener starts the store's watch, the last to stop ends it. */
export function sharingChanges (store: Store): Store {
  const listeners = new Set<ChangeListener>()
  let watch: ChangeWatch | null = null
  let live = false
  const fanOut: ChangeListener = {
    changed (tags, position) { for (const listener of listeners) listener.changed(tags, position) },
    async resumeFrom () {
      for (const listener of listeners) {
        const position = await listener.resumeFrom?.()
        if (position) return position
      }
      return null
    },
    watching (isLive) {
      live = isLive
      for (const listener of listeners) listener.watching(isLive)
    }
  }
  // Every method its own, calling the store's as it is at each call (a test may replace one), so code that
  // walks a store's methods (app/domain/store-tags.ts) sees them all.
  const shared: Record<string, unknown> = { kind: store.kind }
  for (const [name, value] of Object.entries(store)) {
    if (typeof value === 'function') {
      const method = name as keyof Store
      shared[name] = (...args: unknown[]) => (store[method] as (...a: unknown[]) => unknown).apply(store, args)
    }
  }
  shared.watchChanges = (listener: ChangeListener): ChangeWatch => {
    listeners.add(listener)
    if (watch) listener.watching(live)
    else watch = store.watchChanges(fanOut)
    return {
      async stop () {
        if (!listeners.delete(listener) || listeners.size > 0 || !watch) return
        const stopping = watch
        watch = null
        await stopping.stop()
      }
    }
  }
  return shared as unknown as Store
}
