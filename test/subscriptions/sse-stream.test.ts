// One server-sent-events stream (routes/graphql/sse.ts) driven over a fake sink: plain objects only, no
// Fastify, no HTTP response, no listening server. The listening-server tests (sse.test.ts) check the
// same rules through the graphql-sse client.
import { test } from 'tap'
import { AppError } from '../../app/core/errors.ts'
import type { Caller } from '../../app/core/domain/context.ts'
import type { StartOperation, SubscriptionSink } from '../../app/graphql/operations.ts'
import type { OperationPlan } from '../../app/graphql/plan.ts'
import { createSseHandler, type EventStreamSink, type SseOptions } from '../../routes/graphql/sse.ts'

/** A sink that records what the stream writes, how it ends, and lets the test play the client. */
class FakeSink implements EventStreamSink {
  headers: Record<string, unknown> | null = null
  readonly chunks: string[] = []
  ended = false
  destroyed = false
  bufferedBytes = 0
  #closeListeners: (() => void)[] = []
  get writable () { return !this.ended && !this.destroyed }
  open (headers: Record<string, unknown>) { this.headers = headers }
  write (chunk: string) { this.chunks.push(chunk) }
  end () { this.ended = true; this.#closed() }
  destroy () { this.destroyed = true; this.#closed() }
  onClose (listener: () => void) {
    this.#closeListeners.push(listener)
    return () => { this.#closeListeners = this.#closeListeners.filter((l) => l !== listener) }
  }

  /** The client goes away. */
  leave () { this.#closed() }
  #closed () { for (const listener of this.#closeListeners.splice(0)) listener() }
  /** The events written, comments left out. */
  get events () { return this.chunks.filter((c) => !c.startsWith(':')) }
}

const PLAN = {} as OperationPlan

/** Answers a query at once; keeps a subscription's sink for the test to feed; refuses a query naming `refused`. */
function fakeStart () {
  const held: { sink: SubscriptionSink | null, stopped: number } = { sink: null, stopped: 0 }
  const start: StartOperation = async (request, sink) => {
    const query = String(request.params.query ?? '')
    if (query.includes('refused')) throw new AppError('FORBIDDEN', 'refused by the pipeline')
    if (!query.startsWith('subscription')) return { operation: PLAN, answer: '{"data":{"hello":"world"}}' }
    held.sink = sink
    return { operation: PLAN, subscription: { stop: () => { held.stopped++ } } }
  }
  return { start, held }
}

function handler (overrides: Partial<SseOptions> = {}) {
  const { start, held } = fakeStart()
  const stops = new Set<() => void>()
  const serve = createSseHandler({
    start,
    formatErrors: (err) => [{ message: (err as Error).message, extensions: { code: (err as AppError).code } }],
    track: (stop) => { stops.add(stop); return () => { stops.delete(stop) } },
    maxBufferedBytes: 1000,
    maxLifetimeMs: 0,
    ...overrides
  })
  return { serve, held, stops }
}

const operation = (query: string, caller: Caller | null = null) => ({
  params: { query }, transport: 'SSE' as const, caller, ip: '192.0.2.1'
})

/** Waits (at most a second) until `ready` holds. */
async function until (ready: () => boolean, what: string) {
  const deadline = Date.now() + 1000
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** Resolves with the stream's end, failing after a second. */
function bounded (stream: Promise<void>, what: string) {
  return Promise.race([
    stream,
    new Promise<never>((_resolve, reject) => setTimeout(() => reject(new Error(`${what}: the stream did not end`)), 1000))
  ])
}

test('a query: the headers, a first comment, one next, then complete', async (t) => {
  const { serve, stops } = handler()
  const sink = new FakeSink()
  await bounded(serve({ operation: operation('{ hello }'), sink, headers: { 'x-request-id': 'r1' } }), 'a query')
  t.equal(sink.headers?.['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(sink.headers?.['x-request-id'], 'r1', "the route's headers go out too")
  t.equal(sink.chunks[0], ':\n\n', 'a first byte at once')
  t.same(sink.events, ['event: next\ndata: {"data":{"hello":"world"}}\n\n', 'event: complete\ndata:\n\n'])
  t.ok(sink.ended, 'ended')
  t.equal(stops.size, 0, 'untracked')
})

test('a refusal is one next carrying its errors, then complete', async (t) => {
  const { serve } = handler()
  const sink = new FakeSink()
  await bounded(serve({ operation: operation('{ refused }'), sink, headers: {} }), 'a refusal')
  t.same(sink.events, [
    'event: next\ndata: {"errors":[{"message":"refused by the pipeline","extensions":{"code":"FORBIDDEN"}}]}\n\n',
    'event: complete\ndata:\n\n'
  ])
})

test('a subscription: its events as they come, complete at its end, the subscription released', async (t) => {
  const { serve, held } = handler()
  const sink = new FakeSink()
  const stream = serve({ operation: operation('subscription { s }'), sink, headers: {} })
  await until(() => held.sink !== null, 'the subscription to start')
  held.sink?.next('{"data":{"s":1}}')
  held.sink?.next('{"data":{"s":2}}')
  held.sink?.end()
  await bounded(stream, 'a completed subscription')
  t.same(sink.events, ['event: next\ndata: {"data":{"s":1}}\n\n', 'event: next\ndata: {"data":{"s":2}}\n\n', 'event: complete\ndata:\n\n'])
  t.equal(held.stopped, 1, 'released')
})

test("at the token's exp the stream ends like a refusal: UNAUTHENTICATED, then complete", async (t) => {
  const { serve, held } = handler()
  const sink = new FakeSink()
  const stream = serve({ operation: operation('subscription { s }', { id: '1', role: 'USER', expiresAt: Date.now() + 50 }), sink, headers: {} })
  await bounded(stream, 'an expired token')
  t.same(sink.events, [
    'event: next\ndata: {"errors":[{"message":"Token expired","extensions":{"code":"UNAUTHENTICATED"}}]}\n\n',
    'event: complete\ndata:\n\n'
  ])
  t.equal(held.stopped, 1, 'released')
})

test('a reader that stopped reading is cut: its stream destroyed, its subscription released', async (t) => {
  const { serve, held } = handler()
  const sink = new FakeSink()
  const stream = serve({ operation: operation('subscription { s }'), sink, headers: {} })
  await until(() => held.sink !== null, 'the subscription to start')
  held.sink?.next('{"data":{"s":1}}')
  sink.bufferedBytes = 1001 // over maxBufferedBytes: the client no longer reads
  held.sink?.next('{"data":{"s":2}}')
  await bounded(stream, 'a slow reader')
  t.ok(sink.destroyed, 'destroyed')
  t.notOk(sink.ended, 'not ended gracefully')
  t.same(sink.events, ['event: next\ndata: {"data":{"s":1}}\n\n'], 'nothing written past the bound')
  t.equal(held.stopped, 1, 'released')
})

test('a client that leaves ends its operation; a shutdown completes the streams it tracks', async (t) => {
  const left = handler()
  const leaving = new FakeSink()
  const stream = left.serve({ operation: operation('subscription { s }'), sink: leaving, headers: {} })
  await until(() => left.held.sink !== null, 'the subscription to start')
  leaving.leave()
  await bounded(stream, 'a client that left')
  t.equal(left.held.stopped, 1, 'released when the client left')

  const shut = handler()
  const sink = new FakeSink()
  const shutting = shut.serve({ operation: operation('subscription { s }'), sink, headers: {} })
  await until(() => shut.held.sink !== null, 'the subscription to start')
  t.equal(shut.stops.size, 1, 'tracked')
  for (const stop of shut.stops) stop()
  await bounded(shutting, 'a shutdown')
  t.same(sink.events, ['event: complete\ndata:\n\n'], 'completed')
  t.equal(shut.held.stopped, 1, 'released')
})
