// Operations over server-sent events: the graphql-sse protocol in distinct connections mode (one
// POST /graphql with Accept: text/event-stream per operation), the caller taken from the Authorization
// header by the route. graphql-sse's handler speaks the protocol; each operation is admitted and
// started through the pipeline (app/graphql/operations.ts) and handed to it as its result or stream.
// The operation's parameters are the request's own body, read by the pipeline like any POST's (persisted
// ids in every form: app/graphql/persisted.ts); graphql-sse, which knows only `query`, checks the protocol.
// This adapter owns the response (hijacked from Fastify) so that a client that leaves, or a server
// that closes, ends the operation and releases its pub/sub listener.
import { createHandler, type ExecutionResult, type RequestParams } from 'graphql-sse'
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { StartOperation } from './operations.ts'
import type { GraphQLRequestParams } from './persisted.ts'

/** One stream's state: its running operation, once started. */
interface StreamState {
  operation: AsyncIterator<unknown> | null
  /** The client left, or the server is closing. */
  stopped: boolean
}

export interface SseOptions {
  start: StartOperation
  formatErrors (err: unknown): unknown[]
  /** Registers a running stream's stop function (graceful shutdown); returns its unregistration. */
  track (stop: () => void): () => void
}

function header (value: string | string[] | undefined): string | null {
  return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value
}

function isAsyncIterator (value: unknown): value is AsyncIterator<unknown> {
  return typeof (value as AsyncIterator<unknown> | null)?.next === 'function'
}

export function createSseHandler (options: SseOptions) {
  const handler = createHandler<FastifyRequest, StreamState, Record<PropertyKey, unknown>>({
    // No stream reservations: distinct connections mode only.
    authenticate: () => null,
    onSubscribe: async (req) => {
      const request = req.raw
      try {
        const { answer } = await options.start({ params: request.body as GraphQLRequestParams, transport: 'SSE', caller: request.caller, ip: request.ip })
        if (isAsyncIterator(answer)) {
          // The client left while the operation was being admitted: end what it started.
          if (req.context.stopped) await answer.return?.()
          req.context.operation = answer
        }
        // graphql-sse streams a result as one `next` event then `complete`, and a stream event by event.
        return answer as ExecutionResult | AsyncIterable<ExecutionResult>
      } catch (err) {
        // Refused before it started (the `data` key is what marks it as a result).
        return { data: undefined, errors: options.formatErrors(err) } as unknown as ExecutionResult
      }
    }
  })

  return async function serveEventStream (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const state: StreamState = { operation: null, stopped: false }
    const stop = () => {
      state.stopped = true
      void state.operation?.return?.()
    }
    const untrack = options.track(stop)
    reply.hijack()
    const response = reply.raw
    response.once('close', stop)
    try {
      const [body, init] = await handler({
        method: request.method,
        url: request.url,
        // The route sends only event-stream requests here; graphql-sse compares the Accept header exactly.
        headers: { get: (key) => (key === 'accept' ? 'text/event-stream' : header(request.headers[key.toLowerCase()])) },
        // graphql-sse refuses a body without a string `query` (a persisted id) with a code-less 400: it
        // gets one, and the pipeline reads the real body (onSubscribe above).
        body: { ...request.body as Record<PropertyKey, unknown>, query: '' } satisfies Partial<RequestParams>,
        raw: request,
        context: state
      })
      // Headers set by hooks (request id, CORS, rate limit) go out too.
      response.writeHead(init.status, init.statusText, { ...reply.getHeaders(), ...init.headers } as OutgoingHttpHeaders)
      if (!body || typeof body === 'string') {
        response.end(body ?? undefined)
        return
      }
      for await (const chunk of body) {
        if (!response.writable) break
        await new Promise<void>((resolve, reject) => response.write(chunk, (err) => (err ? reject(err) : resolve())))
      }
      response.end()
    } catch (err) {
      request.log.error({ err }, 'event stream failed')
      if (!response.headersSent) {
        response.writeHead(500, { 'content-type': 'application/json; charset=utf-8' })
        response.end(JSON.stringify({ errors: options.formatErrors(err) }))
      } else {
        response.end()
      }
    } finally {
      response.off('close', stop)
      stop()
      untrack()
    }
  }
}
