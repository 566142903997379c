// The GraphQL endpoint over HTTP, Fastify side: POST, GET and PUT /graphql translated into the HTTP
// exchange (http-exchange.ts: the status table, batches, GET parsing, cost stripping, ETag/304, all
// without Fastify) and its result into the reply. Request → identity → request budget (route hooks) →
// the exchange → the reply; a POST answered as an event stream goes to `serveEventStream`.
// A Fastify carrier of the room: registered by index.ts over the room's core.
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import type { AppError } from '../../app/errors.ts'
import { createHttpExchange, requestRefusal, type HttpExchangeInput, type HttpExchangeResult } from './http-exchange.ts'
import type { RoomCore } from './core.ts'
import type { SubscriptionCarriers } from './subscription-carriers.ts'

/** POST, GET and PUT /graphql; event streams are handed to `serveEventStream` (subscription-carriers.ts). */
export function registerHttpRoutes (app: FastifyInstance, { ports, pipeline, errorOptions }: RoomCore, { serveEventStream }: Pick<SubscriptionCarriers, 'serveEventStream'>): void {
  const exchange = createHttpExchange({ config: ports.config, pipeline, errorOptions })

  /** The exchange's input: the request as it is, nothing copied. */
  const inputOf = (request: FastifyRequest): HttpExchangeInput => ({
    method: request.method,
    url: request.url,
    headers: request.headers,
    query: request.query,
    body: request.body,
    caller: request.caller,
    ip: request.ip
  })

  /** The exchange's result as the reply: status, headers, body; or the event stream it asks for. */
  function sendResult (request: FastifyRequest, reply: FastifyReply, result: HttpExchangeResult) {
    if ('eventStream' in result) return serveEventStream(request, reply)
    request.graphqlOperation = result.operation
    request.graphqlAnswer = result.answer
    const headers = result.headers
    for (const name in headers) {
      const value = headers[name] as string
      if (name === 'vary') {
        // Added to a Vary header set earlier (CORS: Origin).
        const prior = reply.getHeader('vary')
        reply.header('vary', prior ? `${String(prior)}, ${value}` : value)
      } else if (name !== 'retry-after' || !reply.hasHeader('retry-after')) {
        // A Retry-After set earlier (the request budget's) stays.
        reply.header(name, value)
      }
    }
    if (result.statusMessage !== undefined) reply.raw.statusMessage = result.statusMessage
    reply.code(result.status)
    if (result.contentType !== undefined) reply.type(result.contentType)
    return reply.send(result.body)
  }

  // Route hooks are synchronous (callback style), one per route: no promise and no extra hook turn
  // per request for checks that never wait.
  /** The checks every /graphql request gets, then who is calling; the refusal, if any. */
  const identify: onRequestHookHandler = (request, _reply, done) => {
    const refusal = requestRefusal(request.method, request.headers)
    // A WebSocket's identity comes from its connection_init message, not from the upgrade request.
    if (refusal || request.ws) return done(refusal)
    try {
      request.caller = ports.authenticate(request.headers.authorization)
    } catch (err) {
      return done(err as AppError)
    }
    done()
  }

  const handler = async (request: FastifyRequest, rep: FastifyReply) =>
    sendResult(request, rep, await exchange(inputOf(request)))
  app.post('/graphql', { onRequest: identify }, handler)
  app.put('/graphql', handler)
  // Also the WebSocket endpoint: subscription-carriers.ts attaches the subscription transport to this route.
  app.get('/graphql', { onRequest: identify }, handler)
}
