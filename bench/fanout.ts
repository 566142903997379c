// The subscription-fanout scenario: N WebSocket subscribers (graphql-ws protocol on /graphql) of one
// room, M messages posted through the postMessage mutation; every delivery is counted (none may be
// lost, duplicated or reordered) and its latency measured from the moment the post was sent.
import { createClient, type Client } from 'graphql-ws'
import WebSocket from 'ws'
import type { BenchData } from './scenarios.ts'

const SUBSCRIPTION = 'subscription Room($roomId: String!) { messageAdded(roomId: $roomId) { id content author { name } } }'
const POST = 'mutation Post($roomId: String!, $content: String!) { postMessage(roomId: $roomId, content: $content) { id } }'

interface Subscriber {
  client: Client
  probes: number
  received: number
  lastSeq: number
  duplicatesOrReordered: number
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
  return response.status === 200 && text.startsWith('{"data":') && !text.includes('"errors"') ? null : `HTTP ${response.status}: ${text.slice(0, 200)}`
}

/** Connects one subscriber and resolves once the server acknowledged the connection (or rejects). */
function subscribe (url: string, token: string, roomId: string, onContent: (content: string) => void, onError: (reason: string) => void): Promise<Client> {
  return new Promise((resolve, reject) => {
    const client = createClient({
      url: wsUrl(url),
      webSocketImpl: WebSocket,
      connectionParams: { authToken: `Bearer ${token}` },
      lazy: false,
      retryAttempts: 0,
      connectionAckWaitTimeout: 10_000,
      onNonLazyError: (err) => reject(new Error(describe(err)))
    })
    client.on('connected', () => resolve(client))
    client.subscribe<{ messageAdded: { content: string } }>({ query: SUBSCRIPTION, variables: { roomId } }, {
      next: (value) => {
        if (value.errors) onError(`errors: ${JSON.stringify(value.errors).slice(0, 200)}`)
        else if (value.data) onContent(value.data.messageAdded.content)
      },
      error: (err) => { onError(describe(err)); reject(new Error(describe(err))) },
      complete: () => {}
    })
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

/** Null when a subscriber can connect and receives a posted message; otherwise why the scenario is skipped. */
export async function fanoutUnavailable (url: string, data: BenchData): Promise<string | null> {
  const roomId = `fanout-probe-${data.runId}`
  let received = false
  let client: Client | null = null
  try {
    client = await withTimeout(subscribe(url, data.users[0]!.token, roomId, () => { received = true }, () => {}), 3000)
    for (let i = 0; i < 20 && !received; i++) {
      await post(url, data.users[1]!.token, roomId, 'probe')
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    return received ? null : 'transport not available yet (subscribed on /graphql but no message was delivered)'
  } catch (err) {
    return `transport not available yet (no graphql-ws subscription on /graphql: ${(err as Error).message})`
  } finally {
    await client?.dispose()
  }
}

function withTimeout<T> (promise: Promise<T>, ms: number): Promise<T> {
  return Promise.race([promise, new Promise<T>((_resolve, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))])
}

function percentile (sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!
}

export interface FanoutOptions {
  subscribers: number
  messages: number
  log: (line: string) => void
}

export async function runFanout (url: string, data: BenchData, options: FanoutOptions) {
  const roomId = `fanout-${data.runId}`
  const sentAt: number[] = []
  const latencies: number[] = []
  let lastDelivery = 0
  const subscribers: Subscriber[] = []

  // Connect in batches, so the listen backlog is not what is measured.
  for (let start = 0; start < options.subscribers; start += 100) {
    const batch = Array.from({ length: Math.min(100, options.subscribers - start) }, (_, k) => {
      const s: Subscriber = { client: null as unknown as Client, probes: 0, received: 0, lastSeq: -1, duplicatesOrReordered: 0, failure: null }
      subscribers.push(s)
      const user = data.users[(start + k) % data.users.length]!
      return subscribe(url, user.token, roomId, (content) => {
        if (content === 'probe') { s.probes++; return }
        const seq = Number(content.slice('fanout '.length))
        const now = performance.now()
        if (seq <= s.lastSeq) s.duplicatesOrReordered++
        s.lastSeq = seq
        s.received++
        latencies.push(now - sentAt[seq]!)
        lastDelivery = now
      }, (reason) => { s.failure ??= reason }).then((client) => { s.client = client }, (err: Error) => { s.failure ??= `could not connect: ${err.message}` })
    })
    await Promise.all(batch)
  }
  const unconnected = subscribers.filter((s) => !s.client)
  options.log(`    ${subscribers.length - unconnected.length} of ${subscribers.length} subscribers connected`)
  if (unconnected.length > 0) {
    await Promise.all(subscribers.map((s) => s.client?.dispose()))
    throw new Error(`${unconnected.length} of ${subscribers.length} subscribers could not connect (first: ${unconnected[0]!.failure})`)
  }

  // A subscription is active once it has received something: post probes until every subscriber has one.
  const poster = data.users[0]!.token
  const readyBy = Date.now() + 15_000
  while (subscribers.some((s) => s.probes === 0) && Date.now() < readyBy) {
    const problem = await post(url, poster, roomId, 'probe')
    if (problem) throw new Error(`posting a probe failed: ${problem}`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  const notReady = subscribers.filter((s) => s.probes === 0).length
  if (notReady > 0) throw new Error(`${notReady} subscribers never received a probe message within 15 s`)

  let postFailures = 0
  let firstPostFailure: string | null = null
  const firstSend = performance.now()
  for (let seq = 0; seq < options.messages; seq++) {
    sentAt[seq] = performance.now()
    const problem = await post(url, poster, roomId, `fanout ${seq}`)
    if (problem) {
      postFailures++
      firstPostFailure ??= problem
    }
  }
  const expected = options.subscribers * options.messages
  const waitUntil = Date.now() + 30_000
  while (latencies.length < expected && Date.now() < waitUntil) await new Promise((resolve) => setTimeout(resolve, 50))
  // Anything still arriving now would be a duplicate: give it a moment to show up.
  await new Promise((resolve) => setTimeout(resolve, 200))
  await Promise.all(subscribers.map((s) => s.client.dispose()))

  const delivered = latencies.length
  const lost = Math.max(0, expected - delivered)
  const reordered = subscribers.reduce((n, s) => n + s.duplicatesOrReordered, 0)
  const failures = subscribers.filter((s) => s.failure).length
  latencies.sort((a, b) => a - b)
  const problems: string[] = []
  if (postFailures > 0) problems.push(`${postFailures} posts failed (first: ${firstPostFailure})`)
  if (lost > 0) problems.push(`${lost} of ${expected} deliveries lost`)
  if (delivered > expected || reordered > 0) problems.push(`${reordered} duplicated or out-of-order deliveries`)
  if (failures > 0) problems.push(`${failures} subscriptions failed (${subscribers.find((s) => s.failure)!.failure})`)
  const seconds = Math.max(1e-3, (lastDelivery - firstSend) / 1000)
  return {
    status: problems.length > 0 ? 'failed' as const : 'ok' as const,
    ...(problems.length > 0 ? { reason: problems.join('; ') } : {}),
    connections: options.subscribers,
    requests: delivered,
    rps: delivered / seconds,
    latencyMs: { p50: percentile(latencies, 50), p99: percentile(latencies, 99) },
    non2xx: postFailures,
    errors: lost + reordered + failures,
    details: { subscribers: options.subscribers, messages: options.messages, expected, delivered, lost, reordered, seconds }
  }
}
