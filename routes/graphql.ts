// The GraphQL endpoint over HTTP: POST (JSON) for every operation, GET for persisted queries only.
// Request → identity → request budget (route hooks) → the admission pipeline (app/graphql/pipeline.ts:
// document, plan, checks, cost, execution under the deadline) → the interface's response shape.
import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler, onSendHookHandler } from 'fastify'
import { AppError } from '../app/errors.ts'
import { formatError, formatResult, formatThrown, statusOf, type ErrorJson, type GraphQLAnswer } from '../app/graphql/error-format.ts'
import { noPersistedQueries, type GraphQLRequestParams, type PersistedQueries } from '../app/graphql/persisted.ts'
import { createHttpCache } from '../app/graphql/http-cache.ts'
import { requirePreflightHeader } from '../app/graphql/require-preflight.ts'

declare module 'fastify' {
  interface FastifyInstance {
    persistedQueries: PersistedQueries
  }
}

const GRAPHQL_RESPONSE = 'application/graphql-response+json'
const JSON_TYPE = /^application\/json\s*(;|$)/i

/** An answer as sent: the execution's outcome plus our extensions (cost). */
interface GraphQLResponseBody extends GraphQLAnswer {
  extensions?: Record<string, unknown>
}

/** Codes that mean the request was not processed at all: answered with their own HTTP status whatever the Accept header. */
const UNPROCESSED = new Set(['BAD_REQUEST', 'UNAUTHENTICATED', 'METHOD_NOT_ALLOWED', 'UNSUPPORTED_MEDIA_TYPE', 'PAYLOAD_TOO_LARGE', 'RATE_LIMITED', 'NOT_ACCEPTABLE'])

function wantsGraphQLResponse (request: FastifyRequest): boolean {
  const accept = request.headers.accept
  return accept !== undefined && accept.includes(GRAPHQL_RESPONSE)
}

/**
 * HTTP status: application/json answers 200 for every processed request (the interface's rule); the
 * GraphQL-over-HTTP media type answers 4xx when the request failed before execution began.
 */
function statusFor (request: FastifyRequest, body: GraphQLResponseBody): number {
  const first = body.errors?.[0]
  if (!first || body.data !== undefined) return 200
  // The APQ protocol: a miss is an ordinary answer, on which clients resend the hash with the query.
  if (first.extensions.code === 'PERSISTED_QUERY_NOT_FOUND') return 200
  if (UNPROCESSED.has(first.extensions.code)) return statusOf(first.extensions.code)
  return wantsGraphQLResponse(request) ? statusOf(first.extensions.code) : 200
}

function firstError (body: GraphQLResponseBody): ErrorJson | undefined {
  return body.errors?.[0]
}

function send (request: FastifyRequest, reply: FastifyReply, body: GraphQLResponseBody) {
  const status = statusFor(request, body)
  if (status === 429 && !reply.hasHeader('retry-after')) reply.header('retry-after', String(firstError(body)?.extensions.retryAfter ?? 60))
  return reply
    .code(status)
    .type(wantsGraphQLResponse(request) ? `${GRAPHQL_RESPONSE}; charset=utf-8` : 'application/json; charset=utf-8')
    .send(body)
}

function parseJsonParam (value: unknown, name: string): unknown {
  if (typeof value !== 'string') return value
  try {
    return JSON.parse(value)
  } catch {
    throw new AppError('BAD_REQUEST', `The ${name} parameter is not valid JSON`)
  }
}

export default fp(async function graphqlRoutes (app: FastifyInstance) {
  const { config } = app
  if (!app.hasDecorator('persistedQueries')) app.decorate('persistedQueries', noPersistedQueries(config.persistedOnly))

  const pipeline = app.graphqlPipeline
  /** Admits and runs one operation through the pipeline; every refusal answers in the interface's shape. */
  async function execute (request: FastifyRequest, reply: FastifyReply, params: GraphQLRequestParams) {
    let body: GraphQLResponseBody
    try {
      const admission = await pipeline.admit({ params, transport: request.method === 'GET' ? 'GET' : 'POST', caller: request.caller, ip: request.ip })
      request.graphqlOperation = admission.operation
      body = formatResult(await pipeline.execute(admission), app.graphqlErrorOptions)
      body.extensions = { cost: admission.cost }
    } catch (err) {
      body = { errors: formatThrown(err, app.graphqlErrorOptions) }
    }
    return send(request, reply, body)
  }

  // Route hooks are synchronous (callback style): no promise per request for checks that never wait.
  const requireJson: onRequestHookHandler = (request, _reply, done) => {
    // Only JSON bodies: a form, multipart or text/plain POST can be sent cross-site without a preflight (CSRF).
    const type = request.headers['content-type']
    if (!type || !JSON_TYPE.test(type)) return done(new AppError('UNSUPPORTED_MEDIA_TYPE', 'Content-Type must be application/json'))
    done()
  }

  const identify: onRequestHookHandler = (request, _reply, done) => {
    // A WebSocket's identity comes from its connection_init message, not from the upgrade request.
    if (request.ws) return done()
    try {
      request.caller = app.authenticate(request.headers.authorization)
    } catch (err) {
      return done(err as AppError)
    }
    done()
  }

  // The answer's size, measured on the JSON Fastify serialised (no second serialisation): an answer
  // over the cap is replaced by an error before any byte of it is written.
  const maxAnswer = config.limits.maxResponseBytes
  const capAnswer: onSendHookHandler = (_request, _reply, payload, done) => {
    if (typeof payload !== 'string' || payload.length <= maxAnswer) return done(null, payload)
    const error = new AppError('RESPONSE_TOO_LARGE', `The answer is larger than ${maxAnswer} bytes: ask for fewer fields or smaller pages`, { maxResponseBytes: maxAnswer })
    done(null, JSON.stringify({ errors: [formatError(error, app.graphqlErrorOptions)] }))
  }

  app.post('/graphql', { onRequest: [requireJson, identify], onSend: capAnswer }, async (request, reply) => {
    // Subscriptions over server-sent events (graphql-sse): plugins/subscriptions.ts.
    if (request.headers.accept?.includes('text/event-stream')) return app.graphqlEventStream(request, reply)
    const body = request.body
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw new AppError('BAD_REQUEST', Array.isArray(body)
        ? 'Batched requests are not accepted: send one operation per request'
        : 'The request body must be a JSON object: { "query": "...", "variables": {...} }')
    }
    return execute(request, reply, body as GraphQLRequestParams)
  })

  const getCache = createHttpCache({ maxAgeSec: config.cacheMaxAgeSec, maxEntries: config.cacheMaxEntries })
  // Also the WebSocket endpoint: plugins/subscriptions.ts attaches the subscription transport to this route.
  app.get('/graphql', { onRequest: [requirePreflightHeader, identify], ...getCache, onSend: [capAnswer].concat(getCache.onSend ?? []) }, async (request, reply) => {
    const query = request.query as Record<string, unknown>
    if (query.queryId === undefined && query.extensions === undefined) {
      throw new AppError('METHOD_NOT_ALLOWED', 'GET accepts persisted queries only (queryId); send other operations by POST')
    }
    return execute(request, reply, {
      queryId: query.queryId,
      query: query.query,
      operationName: query.operationName,
      variables: parseJsonParam(query.variables, 'variables'),
      extensions: parseJsonParam(query.extensions, 'extensions')
    })
  })
}, { name: 'graphql-routes', dependencies: ['graphql', 'auth', 'subscriptions'] })

export { send as sendGraphQL }
