// The load generator of `npm run bench -- --target URL`: `connections` loops, each sending a row's next
// request on a keep-alive connection and waiting for its answer before the next, for a round's seconds.
// It tells the truth about a deployment it did not start, so every request ends in exactly one of:
// - ok: a 2xx answer that passes the row's full check (scenario.verify: the right user, the right shape);
// - non-2xx: any other status (a 429 is a failure, never throughput);
// - wrong: a 2xx answer that fails the check (`{"user":null}`, another user's record, not JSON);
// - no answer: none within the timeout (the request is abandoned), or the connection failed or closed.
// A round ends once every request it sent has ended: a request still waiting when the round's time is
// up is waited for (up to the timeout) and counted like any other, never dropped. req/s counts the ok
// answers over the round's whole time; latency is measured on every answer, whatever it was.
import http from 'node:http'
import type { HttpScenario, RequestSpec, Sample } from './scenarios.ts'

export interface LoadOptions {
  connections: number
  seconds: number
  /** An answer not complete this long after its request was sent counts as no answer. */
  timeoutMs: number
}

export interface LoadCounts {
  sent: number
  ok: number
  non2xx: number
  wrong: number
  noAnswer: number
  /** Milliseconds from sending to the answer's last byte, for every answer (ok, non-2xx and wrong). */
  latenciesMs: number[]
  /** From the first request sent until the last one ended. */
  seconds: number
  /** The first failure of each kind, for the report. */
  firstFailure: { non2xx?: string; wrong?: string; noAnswer?: string }
}

export const emptyCounts = (): LoadCounts =>
  ({ sent: 0, ok: 0, non2xx: 0, wrong: 0, noAnswer: 0, latenciesMs: [], seconds: 0, firstFailure: {} })

/** Adds `more` to `total` (rounds of one row). */
export function addCounts (total: LoadCounts, more: LoadCounts): LoadCounts {
  return {
    sent: total.sent + more.sent,
    ok: total.ok + more.ok,
    non2xx: total.non2xx + more.non2xx,
    wrong: total.wrong + more.wrong,
    noAnswer: total.noAnswer + more.noAnswer,
    latenciesMs: total.latenciesMs.concat(more.latenciesMs),
    seconds: total.seconds + more.seconds,
    firstFailure: { ...more.firstFailure, ...total.firstFailure }
  }
}

export type Sent = { answer: Required<Sample>; ms: number } | { failure: string }

/** One request on `agent`: its answer and how long it took, or why there was none. */
export function send (url: string, request: RequestSpec, timeoutMs: number, agent?: http.Agent): Promise<Sent> {
  return new Promise((resolve) => {
    const started = performance.now()
    const headers = request.body === undefined
      ? request.headers
      : { ...request.headers, 'content-length': String(Buffer.byteLength(request.body)) }
    const outgoing = http.request(url + request.path, { method: request.method, headers, agent }, (incoming) => {
      const chunks: Buffer[] = []
      incoming.on('data', (chunk: Buffer) => chunks.push(chunk))
      incoming.on('end', () => {
        clearTimeout(timer)
        resolve({
          ms: performance.now() - started,
          answer: {
            status: incoming.statusCode ?? 0,
            contentType: incoming.headers['content-type'] ?? '',
            headers: Object.fromEntries(Object.entries(incoming.headers).map(([k, v]) => [k, String(v)])),
            body: Buffer.concat(chunks).toString('utf8')
          }
        })
      })
      incoming.on('error', (err) => { clearTimeout(timer); resolve({ failure: err.message }) })
    })
    const timer = setTimeout(() => outgoing.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs)
    outgoing.on('error', (err) => {
      clearTimeout(timer)
      const code = (err as NodeJS.ErrnoException).code
      resolve({ failure: code ? `${code} ${err.message}` : err.message })
    })
    outgoing.end(request.body)
  })
}

/** Sends the row's requests from `connections` loops for `seconds`, then waits for the last ones to end. */
export async function loadRound (url: string, scenario: HttpScenario, options: LoadOptions): Promise<LoadCounts> {
  scenario.beforeRound?.()
  const agent = new http.Agent({ keepAlive: true, maxSockets: options.connections })
  const counts = emptyCounts()
  const started = performance.now()
  const end = started + options.seconds * 1000
  const loop = async () => {
    while (performance.now() < end) {
      const request = scenario.next()
      counts.sent++
      const sent = await send(url, request, options.timeoutMs, agent)
      if ('failure' in sent) {
        counts.noAnswer++
        counts.firstFailure.noAnswer ??= sent.failure
        continue
      }
      counts.latenciesMs.push(sent.ms)
      const { answer } = sent
      if (answer.status < 200 || answer.status > 299) {
        counts.non2xx++
        counts.firstFailure.non2xx ??= `HTTP ${answer.status} ${answer.body.slice(0, 200)}`
        continue
      }
      const wrong = scenario.verify(request, answer)
      if (wrong) {
        counts.wrong++
        counts.firstFailure.wrong ??= wrong
      } else {
        counts.ok++
      }
    }
  }
  await Promise.all(Array.from({ length: options.connections }, loop))
  counts.seconds = (performance.now() - started) / 1000
  agent.destroy()
  return counts
}

/** The p-th percentile (0-100) of `values`, sorted in place; null when there are none. */
export function percentile (values: number[], p: number): number | null {
  if (values.length === 0) return null
  values.sort((a, b) => a - b)
  return values[Math.min(values.length - 1, Math.ceil((p / 100) * values.length) - 1)] ?? values[0]!
}
