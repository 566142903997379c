// The subscription fan-out rows: N WebSocket subscribers (graphql-transport-ws on /graphql) of one room,
// M messages posted through the postMessage mutation; every delivery is counted (none may be lost,
// duplicated or reordered) and its latency measured from the moment the post was sent.
// - subscription-fanout: every subscriber a USER (its own token), selection `id content author { name }`;
// - subscription-fanout-mixed: every other subscriber anonymous, the rest USERs, selection with
//   `author { name email }`: the email reaches its owner only (the others get null and the service's
//   FORBIDDEN / UNAUTHENTICATED error for that field), so callers' answers differ;
// - ws-broadcast, ws-broadcast-mixed (bench/fanout-baseline-server.ts): the same clients against a bare `ws`
//   process writing prebuilt bytes the size of that row's messages: the machine's ceiling, which each row
//   is reported against.
//
// The N subscribers are lean graphql-transport-ws clients on `ws` (connection_init → connection_ack,
// subscribe, pong to ping): one load-generator process drives 10000 of them, so a delivery must cost it
// little — it scans the message's bytes for what it checks instead of parsing them, and allocates
// nothing of its own. The probe, which also copies the message the baselines send, is graphql-ws's own
// client, so the protocol as real clients speak it is checked once per row.
import type { ExecutionResult } from 'graphql'
import { createClient, type Client } from 'graphql-ws'
import WebSocket from 'ws'
import type { BenchData } from './scenarios.ts'

export const FANOUT_SELECTIONS = {
  plain: 'id content author { name }',
  mixed: 'id content author { name email }'
} as const
export type FanoutSelection = keyof typeof FANOUT_SELECTIONS

const subscriptionQuery = (selection: FanoutSelection) =>
  `subscription Room($roomId: String!) { messageAdded(roomId: $roomId) { ${FANOUT_SELECTIONS[selection]} } }`
const POST =
  'mutation Post($roomId: String!, $content: String!) { postMessage(roomId: $roomId, content: $content) { id } }'
/**
 * Every client holds one subscription, so every client may use the same id (ids are per connection):
 * the baseline can then write one buffer to all, and each client parses a message of the same size.
 */
const SUBSCRIPTION_ID = '00000000-0000-4000-8000-000000000000'
const PROBE = 'probe'
const PREFIX = 'fanout '

interface MessageAdded { id: string; content: string; author: { name: string; email?: string | null } }
type Delivery = ExecutionResult<{ messageAdded: MessageAdded }>

interface Subscriber {
  socket: WebSocket | null
  /** The user this subscriber is (null: anonymous). */
  userId: string | null
  probes: number
  received: number
  lastSeq: number
  duplicatesOrReordered: number
  /** Deliveries whose author email this caller should (not) have seen, and did not (did). */
  wrongVisibility: number
  failure: string | null
}

function wsUrl (url: string): string {
  return url.replace(/^http/, 'ws') + '/graphql'
}

async function post (url: string, token: string, roomId: string, content: string): Promise<string | null> {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: POST, variables: { roomId, content } })
  })
  const text = await response.text()
  return response.status === 200 && text.startsWith('{"data":') && !text.includes('"errors"')
    ? null
    : `HTTP ${response.status}: ${text.slice(0, 200)}`
}

/**
 * Connects one subscriber (anonymous when `token` is null) and resolves once the server acknowledged the connection.
 */
function subscribe (
  url: string,
  token: string | null,
  roomId: string,
  selection: FanoutSelection,
  onDelivery: (delivery: Delivery) => void,
  onError: (reason: string) => void
): Promise<Client> {
  return new Promise((resolve, reject) => {
    const client = createClient({
      url: wsUrl(url),
      webSocketImpl: WebSocket,
      connectionParams: token === null ? {} : { authToken: `Bearer ${token}` },
      lazy: false,
      retryAttempts: 0,
      connectionAckWaitTimeout: 10_000,
      generateID: () => SUBSCRIPTION_ID,
      onNonLazyError: (err) => reject(new Error(describe(err)))
    })
    client.on('connected', () => resolve(client))
    client.subscribe<{ messageAdded: MessageAdded }>(
      { query: subscriptionQuery(selection), variables: { roomId } },
      {
        next: onDelivery,
        error: (err) => {
          onError(describe(err))
          reject(new Error(describe(err)))
        },
        complete: () => {}
      }
    )
  })
}

/** graphql-ws reports Errors, CloseEvents, ErrorEvents or GraphQL error lists. */
function describe (err: unknown): string {
  if (err instanceof Error) return err.message
  if (Array.isArray(err)) return JSON.stringify(err).slice(0, 200)
  const e = err as { code?: number; reason?: string; message?: string; error?: Error; type?: string } | null
  if (e && typeof e.code === 'number') return `WebSocket closed ${e.code} ${e.reason ?? ''}`.trim()
  if (e?.error?.message || e?.message) return `WebSocket ${e.type ?? 'error'}: ${e.error?.message ?? e.message}`
  return String(e?.type ?? err)
}

const bytes = (text: string) => Buffer.from(text)
const NEXT = bytes('"type":"next"')
const CONTENT = bytes('"content":"')
const PROBE_CONTENT = bytes(`${PROBE}"`)
const ERRORS = bytes('"errors":')
const EMAIL_PATH = bytes('"path":["messageAdded","author","email"]')
const EMAIL_SHOWN = bytes('"email":"')
const EMAIL_HIDDEN = bytes('"email":null')
const CONTROL = bytes('{"type":')
const PING = bytes('{"type":"ping"')
const DIGIT_0 = 48

/** What sequenceOf returns for a probe and for anything that is not a `fanout <seq>` or probe message. */
const Seen = { Probe: -1, Unexpected: -2 } as const

/**
 * The sequence number of a `fanout <seq>` message, Seen.Probe for a probe, Seen.Unexpected for anything
 * else (then the caller keeps the text as the failure).
 */
function sequenceOf (data: Buffer): number {
  if (data.indexOf(NEXT) < 0) return Seen.Unexpected
  const at = data.indexOf(CONTENT)
  if (at < 0) return Seen.Unexpected
  const start = at + CONTENT.length
  if (data.indexOf(PROBE_CONTENT, start) === start) return Seen.Probe
  let seq = 0
  let i = start + PREFIX.length
  for (; i < data.length && data[i]! >= DIGIT_0 && data[i]! <= DIGIT_0 + 9; i++) seq = seq * 10 + data[i]! - DIGIT_0
  return i > start + PREFIX.length ? seq : Seen.Unexpected
}

/**
 * Opens one lean subscriber (anonymous when `token` is null): resolves once the server acknowledged the
 * connection and the subscribe message is sent; every later `next` goes to onNext, the rest to onProblem.
 */
function openSubscriber (
  url: string,
  token: string | null,
  roomId: string,
  selection: FanoutSelection,
  onNext: (data: Buffer) => void,
  onProblem: (reason: string) => void
): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(wsUrl(url), 'graphql-transport-ws')
    let acknowledged = false
    socket.on('open', () =>
      socket.send(
        JSON.stringify({ type: 'connection_init', payload: token === null ? {} : { authToken: `Bearer ${token}` } })
      )
    )
    socket.on('message', (data: Buffer) => {
      if (data.indexOf(CONTROL) !== 0) return onNext(data)
      if (data.indexOf(PING) === 0) return socket.send('{"type":"pong"}')
      if (!acknowledged && String(data) === '{"type":"connection_ack"}') {
        acknowledged = true
        socket.send(
          JSON.stringify({
            id: SUBSCRIPTION_ID,
            type: 'subscribe',
            payload: { query: subscriptionQuery(selection), variables: { roomId } }
          })
        )
        return resolve(socket)
      }
      onProblem(`unexpected message: ${String(data).slice(0, 200)}`)
    })
    socket.on('error', (err) => {
      onProblem(err.message)
      reject(err)
    })
    socket.on('close', (code, reason) => {
      const why = `WebSocket closed ${code} ${String(reason)}`.trim()
      if (!acknowledged) reject(new Error(why))
      else if (code !== 1000 && code !== 1005) onProblem(why)
    })
  })
}

export interface FanoutProbe {
  /** Why the fan-out cannot run (the rows are then skipped); null when it can. */
  unavailable: string | null
  /** The `next` payload the service delivered for a post: the baseline writes messages of this shape and size. */
  sample: string | null
}

/**
 * Whether a subscriber can connect and receives a posted message, and what that message looks like for
 * most subscribers of the row: a USER who is not the author (plain), an anonymous caller (mixed).
 */
export async function probeFanout (url: string, data: BenchData, selection: FanoutSelection): Promise<FanoutProbe> {
  const roomId = `fanout-probe-${data.runId}`
  let received: Delivery | null = null
  let client: Client | null = null
  try {
    const token = selection === 'mixed' ? null : data.users[0]!.token
    client = await withTimeout(
      subscribe(
        url,
        token,
        roomId,
        selection,
        (delivery) => {
          received = delivery
        },
        () => {}
      ),
      3000
    )
    for (let i = 0; i < 20 && !received; i++) {
      await post(url, data.users[1]!.token, roomId, PROBE)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    if (!received) {
      return {
        unavailable: 'transport not available yet (subscribed on /graphql but no message was delivered)',
        sample: null
      }
    }
    return { unavailable: null, sample: JSON.stringify(received) }
  } catch (err) {
    return {
      unavailable: `transport not available yet (no graphql-ws subscription on /graphql: ${(err as Error).message})`,
      sample: null
    }
  } finally {
    await client?.dispose()
  }
}

function withTimeout<T> (promise: Promise<T>, ms: number): Promise<T> {
  return Promise.race([
    promise,
    new Promise<T>((_resolve, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))
  ])
}

function percentile (sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export interface FanoutOptions {
  subscribers: number
  messages: number
  selection: FanoutSelection
  /** Every other subscriber anonymous (the others USERs); otherwise all USERs. */
  anonymousHalf: boolean
  /** The service's answers: the author's email reaches its owner only (ws-broadcast sends everyone the same bytes). */
  checkVisibility: boolean
  /** The server process's current RSS (VmRSS), read before the subscribers connect and once they are all active. */
  rssBytes: () => number | null
  /**
   * The server process's CPU time so far (µs): per delivery, what the
   * fan-out costs, which other load moves far less than deliveries/s.
   */
  cpuMicros: () => number | null
  log: (line: string) => void
}

export async function runFanout (url: string, data: BenchData, options: FanoutOptions) {
  const roomId = `fanout-${data.runId}`
  const poster = data.users[0]!
  const expected = options.subscribers * options.messages
  const sentAt = new Float64Array(options.messages)
  // Preallocated: 10000 clients deliver a million messages, and the client's CPU is on the same machine.
  const latencies = new Float64Array(expected)
  let delivered = 0
  let extra = 0
  let lastDelivery = 0
  const subscribers: Subscriber[] = []
  const rssBefore = options.rssBytes()

  const owner = (s: Subscriber) => s.userId === poster.id
  const onNext = (s: Subscriber) => (data: Buffer) => {
    const seq = sequenceOf(data)
    // The mixed selection's email is null with an error (its path that field) for every caller but its owner.
    const hasErrors = data.indexOf(ERRORS) >= 0
    const errorsOk = !hasErrors || (options.selection === 'mixed' && data.indexOf(EMAIL_PATH) >= 0)
    if (seq === Seen.Unexpected || !errorsOk) {
      s.failure ??= `unexpected message: ${String(data).slice(0, 200)}`
      return
    }
    if (seq === Seen.Probe) { s.probes++; return }
    const now = performance.now()
    if (seq <= s.lastSeq) s.duplicatesOrReordered++
    s.lastSeq = seq
    s.received++
    if (
      options.checkVisibility &&
      options.selection === 'mixed' &&
      (owner(s) ? hasErrors || data.indexOf(EMAIL_SHOWN) < 0 : !hasErrors || data.indexOf(EMAIL_HIDDEN) < 0)
    ) { s.wrongVisibility++ }
    if (delivered < expected && seq < options.messages) latencies[delivered++] = now - sentAt[seq]!
    else extra++
    lastDelivery = now
  }

  // Connect in batches, so the listen backlog is not what is measured.
  for (let start = 0; start < options.subscribers; start += 100) {
    const batch = Array.from({ length: Math.min(100, options.subscribers - start) }, (_, k) => {
      const i = start + k
      // Subscriber 0 is the poster (a USER), so the mixed row has one caller who sees the email.
      const user =
        options.anonymousHalf && i % 2 === 1
          ? null
          : data.users[(options.anonymousHalf ? i / 2 : i) % data.users.length]!
      const s: Subscriber = {
        socket: null,
        userId: user?.id ?? null,
        probes: 0,
        received: 0,
        lastSeq: -1,
        duplicatesOrReordered: 0,
        wrongVisibility: 0,
        failure: null
      }
      subscribers.push(s)
      return openSubscriber(url, user?.token ?? null, roomId, options.selection, onNext(s), (reason) => {
        s.failure ??= reason
      }).then(
        (socket) => {
          s.socket = socket
        },
        (err: Error) => {
          s.failure ??= `could not connect: ${err.message}`
        }
      )
    })
    await Promise.all(batch)
  }
  // Closed before the row's server is stopped, so its shutdown does not count them (bounded: a socket may hang).
  const dispose = () =>
    withTimeout(
      Promise.all(
        subscribers.map((s) =>
          s.socket && s.socket.readyState !== WebSocket.CLOSED
            ? new Promise((resolve) => {
              s.socket!.once('close', resolve).close(1000)
            })
            : null
        )
      ),
      10_000
    ).catch(() => {})
  const unconnected = subscribers.filter((s) => !s.socket)
  options.log(`    ${subscribers.length - unconnected.length} of ${subscribers.length} subscribers connected`)
  if (unconnected.length > 0) {
    await dispose()
    throw new Error(
      `${unconnected.length} of ${subscribers.length} subscribers could not connect (first: ${unconnected[0]!.failure})`
    )
  }

  // A subscription is active once it has received something: post a probe, wait for it to reach everyone
  // (another only when one was lost), then until no probe is in flight, so none is queued before the measured posts.
  const readyBy = Date.now() + 30_000
  const probesSeen = () => subscribers.reduce((n, s) => n + s.probes, 0)
  while (subscribers.some((s) => s.probes === 0) && Date.now() < readyBy) {
    const problem = await post(url, poster.token, roomId, PROBE)
    if (problem) {
      await dispose()
      throw new Error(`posting a probe failed: ${problem}`)
    }
    const waitBy = Date.now() + 3000
    while (subscribers.some((s) => s.probes === 0) && Date.now() < waitBy) await sleep(50)
  }
  const notReady = subscribers.filter((s) => s.probes === 0).length
  if (notReady > 0) {
    await dispose()
    throw new Error(`${notReady} subscribers never received a probe message within 30 s`)
  }
  // Before the warm-up: what the subscriptions hold, not the garbage of delivering (no GC can be asked of the server).
  const rssWith = options.rssBytes()
  // Warm-up: as many unmeasured posts as measured ones (at most 20), sent the same way, so both ends of a
  // row run optimised code when measured whichever row ran before.
  for (let i = 0; i < Math.min(20, options.messages); i++) {
    const problem = await post(url, poster.token, roomId, PROBE)
    if (problem) {
      await dispose()
      throw new Error(`posting a warm-up message failed: ${problem}`)
    }
  }
  for (let seen = -1; seen !== probesSeen();) {
    seen = probesSeen()
    await sleep(300)
  }

  let postFailures = 0
  let firstPostFailure: string | null = null
  const firstSend = performance.now()
  const cpuBefore = options.cpuMicros()
  // The load generator's own CPU per delivery (this process: all clients and the poster), to see which end was busy.
  const clientCpu = process.cpuUsage()
  for (let seq = 0; seq < options.messages; seq++) {
    sentAt[seq] = performance.now()
    const problem = await post(url, poster.token, roomId, `${PREFIX}${seq}`)
    if (problem) {
      postFailures++
      firstPostFailure ??= problem
    }
  }
  // Until everything arrived, or nothing has for 10 s (10000 subscribers take a while).
  let lastCount = -1
  let idleSince = Date.now()
  while (delivered < expected && Date.now() - idleSince < 10_000) {
    if (delivered !== lastCount) {
      lastCount = delivered
      idleSince = Date.now()
    }
    await sleep(50)
  }
  const cpuAfter = options.cpuMicros()
  const clientCpuUsed = process.cpuUsage(clientCpu)
  // Anything still arriving now would be a duplicate: give it a moment to show up.
  await sleep(200)
  await dispose()

  const lost = Math.max(0, expected - delivered)
  const reordered = subscribers.reduce((n, s) => n + s.duplicatesOrReordered, 0)
  const wrongVisibility = subscribers.reduce((n, s) => n + s.wrongVisibility, 0)
  const failures = subscribers.filter((s) => s.failure).length
  const sorted = latencies.subarray(0, delivered).sort()
  const problems: string[] = []
  if (postFailures > 0) problems.push(`${postFailures} posts failed (first: ${firstPostFailure})`)
  if (lost > 0) problems.push(`${lost} of ${expected} deliveries lost`)
  if (extra > 0 || reordered > 0) problems.push(`${extra + reordered} duplicated or out-of-order deliveries`)
  if (wrongVisibility > 0) {
    problems.push(`${wrongVisibility} deliveries showed the author's email to another caller or hid it from its owner`)
  }
  if (failures > 0) problems.push(`${failures} subscriptions failed (${subscribers.find((s) => s.failure)!.failure})`)
  const seconds = Math.max(1e-3, (lastDelivery - firstSend) / 1000)
  const rssPerSubscriberBytes =
    rssBefore !== null && rssWith !== null ? (rssWith - rssBefore) / options.subscribers : null
  return {
    status: problems.length > 0 ? ('failed' as const) : ('ok' as const),
    ...(problems.length > 0 ? { reason: problems.join('; ') } : {}),
    connections: options.subscribers,
    requests: delivered,
    rps: delivered / seconds,
    latencyMs: { p50: percentile(sorted, 50), p99: percentile(sorted, 99) },
    non2xx: postFailures,
    errors: lost + extra + reordered + wrongVisibility + failures,
    rssPerSubscriberBytes,
    cpuMicrosPerRequest:
      cpuBefore !== null && cpuAfter !== null && delivered > 0 ? (cpuAfter - cpuBefore) / delivered : null,
    details: {
      subscribers: options.subscribers,
      messages: options.messages,
      expected,
      delivered,
      lost,
      reordered,
      seconds,
      rssBeforeBytes: rssBefore,
      rssWithSubscribersBytes: rssWith,
      clientCpuMicrosPerDelivery: delivered > 0 ? (clientCpuUsed.user + clientCpuUsed.system) / delivered : null
    }
  }
}
