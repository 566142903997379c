// The part of autocannon 9's programmatic API the runner uses (the package ships no types).
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events'

  interface Request {
    method?: string
    path?: string
    headers?: Record<string, string>
    body?: string
    setupRequest?: (request: Request, context: Record<string, unknown>) => Request
    onResponse?: (
      status: number,
      body: string,
      context: Record<string, unknown>,
      headers: Record<string, string>
    ) => void
  }

  interface Options {
    url: string
    connections?: number
    duration?: number
    /** Requests to send in all (instead of a duration). */
    amount?: number
    timeout?: number
    requests?: Request[]
    verifyBody?: (body: string) => boolean
  }

  interface Result {
    duration: number
    requests: { total: number; average: number }
    latency: { p50: number; p99: number; average: number }
    non2xx: number
    errors: number
    timeouts: number
    mismatches: number
  }

  function autocannon (options: Options, callback: (err: Error | null, result: Result) => void): EventEmitter

  export default autocannon
}
