// Changes made beside the service reach the response cache: what the store reports through its change
// feed (Store.watchChanges: PostgreSQL's change log, the embedded file's data version) is dropped
// from the cache like a write of the service's own. Writes through the service do not wait for this:
// they tell the cache themselves before they are acknowledged (app/core/domain/store-tags.ts).
//
// This instance's cache answers only while nothing reported is left unapplied: while the feed is down,
// or the cache could not be told of a change (Redis unreachable), its requests execute and it keeps
// nothing. Once the feed is back it reports what it missed (the change log is read from where it ended),
// which is dropped like any change, and the instance serves again: an instance starting or reconnecting
// never empties the cache the other instances share.
import type { ChangeWatch, Store } from '../store/types.ts'
import type { ResponseCache } from './response-cache.ts'

/** Tags told to the cache in one call at most (the change log names a table instead of more per statement). */
const BATCH_TAGS = 1000
/** A failed application is tried again after this long, doubling up to the last. */
const RETRY_MS = [100, 5000] as const

export interface StoreChangesOptions {
  /** Told of a change the cache could not be told of (it is retried): log it. */
  onError?: (err: unknown) => void
}

export interface StoreChangesFollower extends ChangeWatch {
  /**
   * Resolves once the cache serves (the feed is live, and what it reported first is applied), or after
   * `timeoutMs` with false: a starting instance waits for it before it says it is ready.
   */
  serving (timeoutMs: number): Promise<boolean>
}

export function followStoreChanges (
  store: Store,
  cache: ResponseCache,
  options: StoreChangesOptions = {}
): StoreChangesFollower {
  const onError = options.onError ?? (() => {})
  let live = false
  let pending: Set<string> | 'all' = new Set()
  let applying = false
  let retryMs: number = RETRY_MS[0]
  let retry: NodeJS.Timeout | null = null
  let stopped = false
  /** Where the feed had read up to when it told the changes pending now: recorded once they are applied. */
  let toldUpTo: string | undefined

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
      const batch = pending === 'all' ? 'all' : takeBatch(pending)
      if (batch === 'all') pending = new Set()
      try {
        if (batch === 'all') await cache.invalidateAll()
        else await cache.invalidate(batch)
      } catch (err) {
        onError(err)
        pending = merge(pending, batch)
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
    const position = toldUpTo
    toldUpTo = undefined
    if (position !== undefined) cache.recordChangesApplied(position).catch(onError)
  }

  const watch = store.watchChanges({
    changed (tags, position) {
      pending = merge(pending, tags)
      if (position !== undefined) toldUpTo = position
      schedule()
    },
    // A feed that starts reads from where the shared cache has applied changes up to.
    resumeFrom: () => cache.changesApplied(),
    watching (isLive) {
      live = isLive
      if (!live) cache.serve(false)
      else if (!hasPending() && !applying && !retry) cache.serve(true)
      else schedule()
    }
  })
  return {
    async serving (timeoutMs) {
      const deadline = Date.now() + timeoutMs
      while (!cache.stats().serving) {
        if (Date.now() > deadline || stopped) return false
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      return true
    },
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
  return into
}

/** Up to BATCH_TAGS of the pending tags, taken out of the set. */
function takeBatch (pending: Set<string>): string[] {
  const batch: string[] = []
  for (const tag of pending) {
    batch.push(tag)
    pending.delete(tag)
    if (batch.length === BATCH_TAGS) break
  }
  return batch
}
