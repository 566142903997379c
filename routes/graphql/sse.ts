// Operations over server-sent events: the graphql-sse protocol in distinct connections mode (one
// POST /graphql with Accept: text/event-stream per operation; graphql-sse's PROTOCOL.md), the caller
// taken from the Authorization header by the route. Each operation is admitted and started through the
// pipeline (operations.ts); its answers arrive serialised once (a subscription's events
// are shared with every subscriber of its group: fanout.ts) and are written as they are.
//
// The protocol is ours rather than graphql-sse's handler: that handler serialises every result per
// stream, which would undo the sharing. Distinct connections mode is small: `event: next` with each
// answer, `event: complete` at the end, a `:` comment at once and every 12 s as a keep-alive (as
// graphql-sse's handler does). A refusal is one `next` carrying its errors, then `complete`.
//
// The stream is written to a sink (EventStreamSink: write, end, destroy, its unsent bytes, its close),
// which the route adapts from the raw HTTP response: no Fastify and no response object here.
//
// A client that leaves, or a server that closes, ends the operation and releases its subscription; a
// client whose unsent data passes SUBSCRIBER_MAX_BUFFERED_BYTES (it stopped reading) has its stream
// destroyed, so a stalled reader cannot pin memory.
//
// A stream lasts as long as its caller's token, as a WebSocket connection does: at `exp` it ends like a
// refusal (a `next` carrying UNAUTHENTICATED "Token expired", then `complete`: the operation is over
// under that identity). It also ends after SUBSCRIBER_MAX_LIFETIME_MS, without `complete`: the
// graphql-sse client takes a stream that ends unfinished for a network error and opens it again.
import type { OutgoingHttpHeaders } from 'node:http'
import { AppError } from '../../app/core/errors.ts'
import type { OperationRequest } from '../../app/graphql/pipeline.ts'
import type { StartOperation, Subscription, SubscriptionSink } from '../../app/graphql/operations.ts'
import { endAtDeadline } from './stream-deadline.ts'

/** How often an idle stream carries a comment, so proxies and browsers keep it open (graphql-sse's interval). */
const KEEP_ALIVE_MS = 12_000

const EVENT_STREAM_HEADERS = {
  connection: 'keep-alive',
  'cache-control': 'no-cache',
  'content-encoding': 'none',
  'content-type': 'text/event-stream; charset=utf-8'
}

export interface SseOptions {
  start: StartOperation
  formatErrors (err: unknown): unknown[]
  /**
   * Registers a running stream's stop function (graceful shutdown: the stream completes); returns its unregistration.
   */
  track (stop: () => void): () => void
  /** Unsent bytes past which a stream is cut. */
  maxBufferedBytes: number
  /** How long a stream may live (0: no limit); it ends at its caller's token `exp` first. */
  maxLifetimeMs: number
}

/** Where one event stream is written: the route adapts the HTTP response to it. */
export interface EventStreamSink {
  /** Sends the status line (200) and these headers. */
  open (headers: OutgoingHttpHeaders): void
  write (chunk: string): void
  /** Ends the stream once what was written is sent. */
  end (): void
  /** Cuts the stream at once, unsent data dropped (a reader that stopped reading). */
  destroy (): void
  /** Whether a write still goes anywhere (false once ended, destroyed or closed by the client). */
  readonly writable: boolean
  /** Bytes written and not yet sent to the client. */
  readonly bufferedBytes: number
  /** Calls `listener` once when the stream closes, whoever closed it; returns its removal. */
  onClose (listener: () => void): () => void
}

/** One event-stream request, handed over by the HTTP route (which no longer writes to the response). */
export interface EventStreamRequest {
  /** The operation it carries (transport 'SSE'). */
  operation: OperationRequest
  sink: EventStreamSink
  /** Headers set so far by the route's hooks (request id, CORS, rate limit): they go out too. */
  headers: OutgoingHttpHeaders
}

export function createSseHandler (options: SseOptions) {
  return async function serveEventStream ({ operation, sink: stream, headers }: EventStreamRequest): Promise<void> {
    let subscription: Subscription | null = null
    let ended = false
    let keepAlive: NodeJS.Timeout | undefined
    let cancelDeadline = () => {}
    let settle: () => void = () => {}
    const over = new Promise<void>((resolve) => { settle = resolve })
    const finish = () => {
      if (ended) return
      ended = true
      clearInterval(keepAlive)
      cancelDeadline()
      subscription?.stop()
      settle()
    }
    // Every chunk goes out here (events, keep-alive comments, the end), checked against the slow-reader
    // bound: a client that stopped reading has its stream destroyed, whatever it stopped reading.
    const write = (chunk: string) => {
      if (ended || !stream.writable) return
      if (stream.bufferedBytes > options.maxBufferedBytes) {
        finish()
        stream.destroy()
        return
      }
      stream.write(chunk)
    }
    const sink: SubscriptionSink = {
      next (json) {
        write(`event: next\ndata: ${json}\n\n`)
      },
      end (errors) {
        if (ended) return
        if (errors) write(`event: next\ndata: ${JSON.stringify({ errors })}\n\n`)
        write('event: complete\ndata:\n\n')
        finish()
        stream.end()
      }
    }
    const untrack = options.track(() => sink.end())
    const offClose = stream.onClose(finish)
    try {
      stream.open({ ...headers, ...EVENT_STREAM_HEADERS })
      // Some browsers (Firefox, Safari) wait for a first byte before they report the stream open.
      write(':\n\n')
      keepAlive = setInterval(() => write(':\n\n'), KEEP_ALIVE_MS)
      cancelDeadline = endAtDeadline(operation.caller?.expiresAt, Date.now(), options.maxLifetimeMs, (why) => {
        if (why === 'token-expired') return sink.end(options.formatErrors(new AppError('UNAUTHENTICATED', 'Token expired')))
        finish()
        stream.end()
      })
      const started = await options.start(operation, sink)
      if (started.subscription) {
        // The client left (or the stream was ended) while the operation was admitted: nothing is kept.
        if (ended) return started.subscription.stop()
        subscription = started.subscription
        return await over
      }
      sink.next(started.answer)
      sink.end()
    } catch (err) {
      // Refused before it started.
      sink.end(options.formatErrors(err))
    } finally {
      offClose()
      finish()
      untrack()
    }
  }
}
