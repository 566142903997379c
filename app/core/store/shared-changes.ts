// One watch of a store's changes per store, shared by everything that follows them (the response cache,
// the app deployments): one PostgreSQL connection, one read of the change log per heartbeat, whatever the
// number of listeners. A listener that joins later is told at once whether the feed is live.
import type { ChangeListener, ChangeWatch } from './types.ts'

type Watch = (listener: ChangeListener) => ChangeWatch

/** A store's watchChanges from `watch`, which the first listener starts and the last to stop ends. */
export function sharedChanges (watch: Watch): Watch {
  const listeners = new Set<ChangeListener>()
  let running: ChangeWatch | null = null
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
  return (listener) => {
    listeners.add(listener)
    if (running) listener.watching(live)
    else running = watch(fanOut)
    return {
      async stop () {
        if (!listeners.delete(listener) || listeners.size > 0 || !running) return
        const stopping = running
        running = null
        await stopping.stop()
      }
    }
  }
}
