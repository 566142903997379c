// Changes made beside the service reach the response cache: what the store reports through its change
// feed (Store.watchChanges: PostgreSQL's notifications, the embedded file's data version) is dropped
// from the cache like a write of the service's own. Writes through the service do not wait for this:
// they tell the cache themselves before they are acknowledged (app/domain/store-tags.ts).
//
// The cache answers only while nothing reported is left unapplied: while the feed is down, or the
// cache could not be told of a change (Redis unreachable), every request executes and nothing is
// kept; once the feed is back, everything is dropped (what it missed cannot be known), then served.
import type { ChangeWatch, Store } from '../store/types.ts'
import type { ResponseCache } from './response-cache.ts'

/** Past this many tags waiting, dropping everything is cheaper than naming each (a bulk load, a seed). */
const MAX_PENDING_TAGS = 1000
/** A failed application is tried again after this long, doubling up to the last. */
const RETRY_MS = [100, 5000] as const

export interface StoreChangesOptions {
  /** Told of a change the cache could not be told of (it is retried): log it. */
  onError?: (err: unknown) => void
}

export function followStoreChanges (
  store: Store,
  cache: ResponseCache,
  options: StoreChangesOptions = {}
): ChangeWatch {
  const onError = options.onError ?? (() => {})
  let live = false
  let pending: Set<string> | 'all' = new Set()
  let applying = false
  let retryMs: number = RETRY_MS[0]
  let retry: NodeJS.Timeout | null = null
  let stopped = false

  const hasPending = () => pending === 'all' || pending.size > 0

  // Batched: the changes reported in one turn of the event loop (one transaction's rows) are one call.
  const schedule = () => {
    if (!applying && !retry && !stopped) {
      applying = true
      setImmediate(apply)
    }
  }

  async function apply (): Promise<void> {
    while (hasPending()) {
      if (stopped) return
      const batch = pending
      pending = new Set()
      try {
        if (batch === 'all') await cache.invalidateAll()
        else await cache.invalidate([...batch])
      } catch (err) {
        onError(err)
        pending = merge(batch, pending)
        cache.serve(false)
        applying = false
        retry = setTimeout(() => {
          retry = null
          schedule()
        }, retryMs).unref()
        retryMs = Math.min(retryMs * 2, RETRY_MS[1])
        return
      }
    }
    retryMs = RETRY_MS[0]
    applying = false
    cache.serve(live)
  }

  const watch = store.watchChanges({
    changed (tags) {
      pending = merge(pending, tags)
      schedule()
    },
    watching (isLive) {
      live = isLive
      if (!live) cache.serve(false)
      else if (!hasPending() && !applying && !retry) cache.serve(true)
      else schedule()
    }
  })
  return {
    async stop () {
      stopped = true
      if (retry) clearTimeout(retry)
      await watch.stop()
    }
  }
}

function merge (into: Set<string> | 'all', tags: Iterable<string> | 'all'): Set<string> | 'all' {
  if (into === 'all' || tags === 'all') return 'all'
  for (const tag of tags) into.add(tag)
  return into.size > MAX_PENDING_TAGS ? 'all' : into
}
