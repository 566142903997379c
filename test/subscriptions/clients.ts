// Real protocol clients for subscription tests: graphql-ws (graphql-transport-ws), graphql-sse, and a
// raw `ws` socket for the legacy graphql-ws subprotocol and for protocol violations.
import { createClient, type Client } from 'graphql-ws'
import { createClient as createSseClient, type Client as SseClient } from 'graphql-sse'
import WebSocket from 'ws'

export const wsUrl = (url: string) => `${url.replace(/^http/, 'ws')}/graphql`

export interface WsClientOptions {
  authToken?: string
  /** Extra connection_init payload. */
  payload?: Record<string, unknown>
  headers?: Record<string, string>
}

/** A graphql-ws client that never retries, so close codes reach the test. */
export function wsClient (
  url: string,
  options: WsClientOptions = {}
): Client & { closed: Promise<{ code: number; reason: string }> } {
  let onClosed: (event: { code: number; reason: string }) => void = () => {}
  const closed = new Promise<{ code: number; reason: string }>((resolve) => {
    onClosed = resolve
  })
  const headers = options.headers
  const client = createClient({
    url: wsUrl(url),
    webSocketImpl: headers
      ? class extends WebSocket {
        constructor (address: string, protocols?: string | string[]) {
          super(address, protocols, { headers })
        }
      }
      : WebSocket,
    connectionParams:
      options.authToken !== undefined || options.payload
        ? { ...options.payload, ...(options.authToken !== undefined ? { authToken: options.authToken } : {}) }
        : undefined,
    retryAttempts: 0,
    lazy: false,
    onNonLazyError: () => {},
    on: { closed: (event) => onClosed(event as { code: number; reason: string }) }
  })
  return Object.assign(client, { closed })
}

export interface Outcome<T = unknown> {
  values: T[]
  error?: unknown
  completed: boolean
}

/** Subscribes and collects every result until the stream completes or errors. */
export function collect<T = any> (
  client: Client | SseClient<boolean>,
  query: string,
  variables?: Record<string, unknown>,
  onValue?: (value: T, all: T[]) => void
) {
  const outcome: Outcome<T> = { values: [], completed: false }
  let dispose: () => void = () => {}
  const done = new Promise<Outcome<T>>((resolve) => {
    dispose = client.subscribe<T>(
      { query, variables },
      {
        next: (value) => {
          outcome.values.push(value as T)
          onValue?.(value as T, outcome.values)
        },
        error: (error) => {
          outcome.error = error
          resolve(outcome)
        },
        complete: () => {
          outcome.completed = true
          resolve(outcome)
        }
      }
    )
  })
  return { outcome, done, dispose: () => dispose() }
}

/** An SSE client in distinct connections mode, authenticated with the Authorization header when given. */
export function sseClient (url: string, authorization?: string): SseClient {
  return createSseClient({
    url: `${url}/graphql`,
    headers: authorization ? { authorization } : {},
    retryAttempts: 0
  })
}

/** A raw WebSocket speaking JSON messages, with a queue of received messages and the close event. */
export async function rawSocket (url: string, protocol?: string | string[], headers?: Record<string, string>) {
  const socket = new WebSocket(wsUrl(url), protocol, headers ? { headers } : {})
  const received: any[] = []
  const waiters: (() => void)[] = []
  socket.on('message', (data) => {
    received.push(JSON.parse(String(data)))
    waiters.splice(0).forEach((w) => w())
  })
  const closed = new Promise<{ code: number; reason: string }>((resolve) => {
    socket.on('close', (code, reason) => {
      resolve({ code, reason: String(reason) })
      waiters.splice(0).forEach((w) => w())
    })
  })
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve())
    socket.once('error', reject)
  })
  return {
    socket,
    received,
    closed,
    send: (message: unknown) => socket.send(typeof message === 'string' ? message : JSON.stringify(message)),
    /** The next message of the given type (waits up to `ms`). */
    async next (type: string, ms = 5000): Promise<any> {
      const deadline = Date.now() + ms
      for (;;) {
        const index = received.findIndex((m) => m.type === type)
        if (index >= 0) return received.splice(index, 1)[0]
        if (socket.readyState !== WebSocket.OPEN || Date.now() > deadline) {
          throw new Error(`no ${type} message (got ${JSON.stringify(received)})`)
        }
        await new Promise<void>((resolve) => { waiters.push(resolve); setTimeout(resolve, 50) })
      }
    }
  }
}

/** The HTTP status a refused WebSocket upgrade answered with, and its body. */
export function refusedUpgrade (
  url: string,
  protocol?: string | string[],
  headers?: Record<string, string>
): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(wsUrl(url), protocol, headers ? { headers } : {})
    socket.on('open', () => {
      socket.close()
      reject(new Error('the upgrade was accepted'))
    })
    socket.on('error', () => {})
    socket.on('unexpected-response', (_request, response) => {
      let body = ''
      response.on('data', (chunk: Buffer) => {
        body += chunk
      })
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: body ? JSON.parse(body) : null }))
    })
  })
}

/**
 * Waits for `promise` at most `ms`: a broken rule fails the test in seconds, with a message naming the
 * rule (`rule`), instead of hanging until tap's timeout.
 */
export async function within<T> (promise: Promise<T>, ms: number, rule: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${rule}: nothing within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([promise, late])
  } finally {
    clearTimeout(timer)
  }
}

/** Polls until `check` returns true (or fails after `ms`). */
export async function eventually (
  check: () => boolean | Promise<boolean>,
  ms = 5000,
  what = 'condition'
): Promise<void> {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/**
 * Listeners the app's emitter holds for a room's topic (mqemitter has no public count; its matcher is the registry).
 */
export function roomListeners (
  app: { events: { emitter: unknown; roomTopic (roomId: string): string } },
  roomId: string
): number {
  const { emitter, roomTopic } = app.events
  return (emitter as { _matcher: { match(topic: string): unknown[] } })._matcher.match(roomTopic(roomId)).length
}
