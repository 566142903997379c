// File descriptors: every connection holds one, and so do the store, Redis, the logs and any file the
// process opens. A listener that accepts until the process runs out fails all of those at once, so
// each listener is capped below the open-files limit, and the errors of running out anyway (accept
// failing with EMFILE) are logged, never thrown: the service answers again once descriptors free up.
import { readFileSync } from 'node:fs'
import type { Server } from 'node:net'

/**
 * Descriptors kept back from the listeners besides the store's pool: Redis, logs, files, Node's own (about 25 at rest).
 */
export const RESERVED_DESCRIPTORS = 128
/** The metrics listener's share of MAX_CONNECTIONS: Prometheus holds one keep-alive connection per scraper. */
export const METRICS_CONNECTIONS = 16

/** The process's soft open-files limit (Linux: /proc/self/limits), or null where it cannot be read. */
export function openFilesLimit (): number | null {
  try {
    const line = /^Max open files\s+(\d+|unlimited)\s/m.exec(readFileSync('/proc/self/limits', 'utf8'))
    return line && line[1] !== 'unlimited' ? Number(line[1]) : null
  } catch {
    return null
  }
}

/**
 * MAX_CONNECTIONS's default: the open-files limit less the reserve and the
 * store's pool (at least half the limit); 0 (no cap) when the limit is unknown.
 */
export function defaultMaxConnections (limit: number | null, poolSize: number): number {
  return limit === null ? 0 : Math.max(Math.floor(limit / 2), limit - RESERVED_DESCRIPTORS - poolSize)
}

/** MAX_CONNECTIONS split between the API listener and, when it has its own port, the metrics listener (0: no cap). */
export function connectionCaps (maxConnections: number, metricsListener: boolean): { api: number; metrics: number } {
  if (maxConnections === 0) return { api: 0, metrics: 0 }
  if (!metricsListener) return { api: maxConnections, metrics: 0 }
  const metrics = Math.max(1, Math.min(METRICS_CONNECTIONS, Math.floor(maxConnections / 8)))
  return { api: Math.max(1, maxConnections - metrics), metrics }
}

/**
 * Calls `log` with how many times `note` ran since it last logged,
 * at most once a second (a flood must not flood the logs).
 */
function everySecond (log: (count: number) => void): () => void {
  let count = 0
  let lastLogged = 0
  return () => {
    count++
    const now = Date.now()
    if (now - lastLogged < 1000) return
    log(count)
    lastLogged = now
    count = 0
  }
}

/** Where the listener's warnings go (the server's logger, or any pino logger). */
export interface WarningLog { warn (details: object, message: string): void }

/**
 * Caps `server`'s open connections at `max` (0: no cap) with Node's server.maxConnections (a connection
 * over it is closed as soon as it is accepted, and 'drop' is emitted), and keeps the server's runtime
 * errors from ending the process: an accept that fails (EMFILE when descriptors run out) emits 'error'
 * on the server, which would throw without a listener. Both are logged at most once a second.
 */
export function guardListener (server: Server, max: number, log: WarningLog, name: string): void {
  if (max > 0) server.maxConnections = max
  const dropped = everySecond((count) =>
    log.warn(
      { listener: name, maxConnections: max, dropped: count },
      'connections over MAX_CONNECTIONS closed unanswered'
    )
  )
  server.on('drop', dropped)
  let lastError: NodeJS.ErrnoException | undefined
  const failed = everySecond((count) =>
    log.warn(
      { listener: name, err: lastError?.message, code: lastError?.code, failures: count },
      'accepting a connection failed; the listener keeps going'
    )
  )
  server.on('error', (err: NodeJS.ErrnoException) => {
    // Errors before listening (EADDRINUSE) belong to listen(), which reports them to its caller.
    if (!server.listening) return
    lastError = err
    failed()
  })
}
