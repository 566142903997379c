// Subscriptions over server-sent events: the graphql-sse protocol in distinct connections mode (one
// POST /graphql with Accept: text/event-stream per operation), the caller taken from the Authorization
// header by the route. graphql-sse's handler speaks the protocol; this adapter owns the response
// (hijacked from Fastify) so that a client that leaves, or a server that closes, ends the operation and
// releases its pub/sub listener, and runs each operation through the same checks and context as
// WebSocket subscriptions.
import { createHandler, type ExecutionResult, type RequestParams } from 'graphql-sse'
import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { SubscriptionContext } from 'mercurius/lib/subscriber.js'
import type { Caller } from '../domain/context.ts'
import type { PreparedSubscription } from './subscriptions.ts'

/** One stream's state: its pub/sub queue (Mercurius's per-subscription context) and its running operation. */
interface StreamState {
  subscription: SubscriptionContext
  operation: AsyncIterator<unknown> | null
}

export interface SseOptions {
  app: FastifyInstance
  prepare (params: Record<string, unknown>, caller: Caller | null, ip: string, transport: 'SSE'): Promise<PreparedSubscription>
  contextFor (caller: Caller | null, prepared: PreparedSubscription, request: FastifyRequest): Record<string, unknown>
  formatErrors (err: unknown): unknown[]
  formatError (err: unknown): unknown
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
  const { app } = options
  const handler = createHandler<FastifyRequest, StreamState, Record<PropertyKey, unknown>>({
    // Each operation is validated in onSubscribe, with our rules, before graphql-sse sees it.
    validate: () => [],
    // No stream reservations: distinct connections mode only.
    authenticate: () => null,
    onSubscribe: async (req, params: RequestParams) => {
      const request = req.raw
      try {
        const prepared = await options.prepare(params as unknown as Record<string, unknown>, request.caller, request.ip, 'SSE')
        const contextValue: Record<PropertyKey, unknown> = {
          ...options.contextFor(request.caller, prepared, request),
          app,
          pubsub: req.context.subscription
        }
        return {
          schema: app.graphql.schema,
          document: prepared.document,
          variableValues: prepared.variables,
          operationName: prepared.operationName ?? undefined,
          contextValue
        }
      } catch (err) {
        // Refused before it started: graphql-sse streams a returned result as one `next` event, then
        // `complete` (the `data` key is what marks it as a result).
        return { data: undefined, errors: options.formatErrors(err) } as unknown as ExecutionResult
      }
    },
    onOperation: (_ctx, req, _args, result) => {
      if (isAsyncIterator(result)) req.context.operation = result
    },
    onNext: (_ctx, _req, result) => {
      if (!result.errors || result.errors.length === 0) return
      return { ...result, errors: result.errors.map((e) => (e instanceof Error ? options.formatError(e) : e)) } as ExecutionResult
    }
  })

  return async function serveEventStream (request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const state: StreamState = {
      subscription: new SubscriptionContext({ pubsub: app.graphql.pubsub, fastify: app }),
      operation: null
    }
    const stop = () => {
      state.subscription.close()
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
        body: request.body as Record<PropertyKey, unknown>,
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
