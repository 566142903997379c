// The GraphQL endpoint over HTTP: POST (JSON) for every operation (a JSON array of them: a batch), GET
// for persisted queries only (as the interface allows: stable, cacheable URLs).
// Request → identity → request budget (route hooks) → the admission pipeline (pipeline.ts:
// document, plan, checks, cost, execution under the deadline) → the interface's response shape.
// A Fastify carrier of the room: registered by index.ts over the room's core.
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { AppError } from '../../app/errors.ts'
import {
  formatError,
  formatResult,
  formatThrown,
  statusOf,
  type ErrorJson,
  type GraphQLAnswer
} from '../../app/error-format.ts'
import { withinAnswerCap } from './answer-size.ts'
import { PersistedMessages, hasPersistedQueryExtension, persistedIdOf, type GraphQLRequestParams } from './persisted.ts'
import type { CostReport } from '../../app/limits/cost-report.ts'
import { createHttpCache } from './http-cache.ts'
import type { RoomCore } from './core.ts'
import type { SubscriptionCarriers } from './subscription-carriers.ts'
import {
  acceptsEventStream,
  jsonAnswerType,
  prefersEventStream,
  setRefusalHeaders,
  wantsGraphQLResponse
} from '../../app/media-types.ts'

const JSON_TYPE = /^application\/json\s*(;|$)/i

/** An answer as sent: the execution's outcome plus our extensions (cost). */
interface GraphQLResponseBody extends GraphQLAnswer {
  extensions?: Record<string, unknown>
}

/**
 * Codes that mean the request was not processed at all: answered with their own HTTP status whatever the Accept header.
 */
const UNPROCESSED = new Set([
  'BAD_REQUEST',
  'UNAUTHENTICATED',
  'METHOD_NOT_ALLOWED',
  'UNSUPPORTED_MEDIA_TYPE',
  'PAYLOAD_TOO_LARGE',
  'RATE_LIMITED',
  'NOT_ACCEPTABLE'
])

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
  return wantsGraphQLResponse(request.headers.accept) ? statusOf(first.extensions.code) : 200
}

function firstError (body: GraphQLResponseBody): ErrorJson | undefined {
  return body.errors?.[0]
}

/** graphql-sse's single connection mode (a PUT reserving a stream, then operations naming its token) is not served. */
const SINGLE_CONNECTION_REFUSED =
  "graphql-sse single connection mode is not supported: use distinct connections mode (the client's default, singleConnection: false) or WebSocket"

/**
 * Whether a batch entry names a registered operation (an id, or an APQ hash) rather than carrying its own text only.
 */
function namesPersistedQuery (params: unknown): boolean {
  if (params === null || typeof params !== 'object' || Array.isArray(params)) return false
  try {
    return persistedIdOf(params) !== undefined || hasPersistedQueryExtension(params)
  } catch {
    return true // a malformed id: refused on its own, with its own words
  }
}

function parseJsonParam (value: unknown, name: string): unknown {
  if (typeof value !== 'string') return value
  try {
    return JSON.parse(value)
  } catch {
    throw new AppError('BAD_REQUEST', `The ${name} parameter is not valid JSON`)
  }
}

/** POST, GET and PUT /graphql; event streams are handed to `serveEventStream` (subscription-carriers.ts). */
export function registerHttpRoutes (app: FastifyInstance, { ports, pipeline, errorOptions }: RoomCore, { serveEventStream }: Pick<SubscriptionCarriers, 'serveEventStream'>): void {
  const { config } = ports

  // The answer is serialised here, once, and held to the answer cap in UTF-8 bytes: an answer over
  // the cap is replaced by an error before any byte of it is written. (Sending a string, the route
  // needs no serialisation or onSend hook.) The object sent is kept for metrics.
  const maxAnswer = config.limits.maxResponseBytes
  const withinCap = (json: string) => withinAnswerCap(json, maxAnswer)
  /** The JSON sent for an answer; `fits` false when the answer was over the cap and replaced by its error. */
  function serialize (
    request: FastifyRequest,
    answer: GraphQLResponseBody | GraphQLResponseBody[]
  ): { json: string; fits: boolean } {
    const json = JSON.stringify(answer)
    if (withinCap(json)) {
      request.graphqlAnswer = answer
      return { json, fits: true }
    }
    return { json: tooLarge(request), fits: false }
  }
  /** The JSON of the error that replaces an answer over the cap. */
  function tooLarge (request: FastifyRequest): string {
    const error = new AppError(
      'RESPONSE_TOO_LARGE',
      `The answer is larger than ${maxAnswer} bytes: ask for fewer fields or smaller pages`,
      { maxResponseBytes: maxAnswer }
    )
    const replaced = { errors: [formatError(error, errorOptions)] }
    request.graphqlAnswer = replaced
    return JSON.stringify(replaced)
  }

  /** Sends an answer with its status, refusal headers and media type. */
  function send (request: FastifyRequest, reply: FastifyReply, body: GraphQLResponseBody): FastifyReply {
    const status = statusFor(request, body)
    const first = firstError(body)
    if (status !== 200 && first) setRefusalHeaders(reply, first.extensions.code, first.extensions.retryAfter)
    return reply.code(status).type(jsonAnswerType(request.headers.accept)).send(serialize(request, body).json)
  }

  /**
   * Admits and runs one operation through the pipeline; every refusal answers in the interface's shape.
   * `paidByRequest` false: an operation of a batch beyond the first, which spends a request of its own.
   */
  async function answer (
    request: FastifyRequest,
    params: GraphQLRequestParams,
    paidByRequest = true
  ): Promise<GraphQLResponseBody> {
    try {
      const admission = await pipeline.admit({
        params,
        transport: request.method === 'GET' ? 'GET' : 'POST',
        caller: request.caller,
        ip: request.ip,
        paidByRequest
      })
      request.graphqlOperation ??= admission.operation
      const body: GraphQLResponseBody = formatResult(await pipeline.execute(admission), errorOptions)
      body.extensions = { cost: admission.cost }
      return body
    } catch (err) {
      return { errors: formatThrown(err, errorOptions) }
    }
  }

  /**
   * A batch (graphql-request's batchRequests, Apollo's BatchHttpLink), off unless MAX_BATCH_SIZE is
   * set (as in Apollo Server and graphql-yoga): at most MAX_BATCH_SIZE operations, each admitted on its
   * own (its own request from the budget, its own price and cost units, its own refusal), run one after
   * another; one 200 answer, an array. The answers are held to the answer cap as they are made: once
   * their bytes pass it, the rest of the batch is not run and the whole answer is RESPONSE_TOO_LARGE
   * (otherwise a small request could make MAX_BATCH_SIZE answers of up to the cap each before the check).
   */
  async function answerBatch (request: FastifyRequest, reply: FastifyReply, batch: unknown[]) {
    const max = config.limits.maxBatchSize
    if (max === 0) {
      throw new AppError(
        'BAD_REQUEST',
        'Batched requests (a JSON array of operations) are off: send one operation per request, or set MAX_BATCH_SIZE to accept batches',
        { maxBatchSize: 0 }
      )
    }
    if (batch.length === 0 || batch.length > max) {
      throw new AppError('BAD_REQUEST', `A batch holds 1 to ${max} operations; this one holds ${batch.length}`, {
        maxBatchSize: max
      })
    }
    // Persisted-only: a batch holding any ad-hoc operation is refused whole, once (not one refusal per entry).
    if (config.persistedOnly && batch.some((params) => !namesPersistedQuery(params))) {
      throw new AppError('PERSISTED_QUERY_REQUIRED', PersistedMessages.required)
    }
    const answers: GraphQLResponseBody[] = []
    const parts: string[] = []
    let bytes = 2 // [ and ]
    for (const [i, params] of batch.entries()) {
      const body = (params !== null && typeof params === 'object' && !Array.isArray(params))
        ? await answer(request, params as GraphQLRequestParams, i === 0)
        : { errors: formatThrown(new AppError('BAD_REQUEST', 'Each operation of a batch must be a JSON object: { "query": "...", "variables": {...} }'), errorOptions) }
      const json = JSON.stringify(body)
      // One answer over the cap stops the batch at once; otherwise its bytes count toward the cap.
      bytes += (i > 0 ? 1 : 0) + (withinCap(json) ? Buffer.byteLength(json) : maxAnswer + 1)
      if (bytes > maxAnswer) return reply.code(200).type(jsonAnswerType(request.headers.accept)).send(tooLarge(request))
      answers.push(body)
      parts.push(json)
    }
    request.graphqlAnswer = answers
    return reply.code(200).type(jsonAnswerType(request.headers.accept)).send(`[${parts.join(',')}]`)
  }

  /**
   * Whether a POST is answered as an event stream (graphql-sse): when the client prefers one, or when
   * it accepts one and the operation is a subscription (urql's default Accept lists both).
   */
  function answersAsEventStream (request: FastifyRequest, params: GraphQLRequestParams): boolean | Promise<boolean> {
    const accept = request.headers.accept
    // Most POSTs accept no event stream: decided without a promise.
    if (!acceptsEventStream(accept)) return false
    if (prefersEventStream(accept)) return true
    return pipeline.operationType(params, request.caller).then((type) => type === 'subscription')
  }

  // Route hooks are synchronous (callback style), one per route: no promise and no extra hook turn
  // per request for checks that never wait.
  /** The checks every /graphql request gets, then who is calling; the refusal, if any. */
  const identified = (request: FastifyRequest): AppError | undefined => {
    if (request.headers['x-graphql-event-stream-token'] !== undefined) {
      return new AppError('BAD_REQUEST', SINGLE_CONNECTION_REFUSED)
    }
    // A WebSocket's identity comes from its connection_init message, not from the upgrade request.
    if (request.ws) return undefined
    try {
      request.caller = ports.authenticate(request.headers.authorization)
    } catch (err) {
      return err as AppError
    }
    return undefined
  }
  const checkPost: onRequestHookHandler = (request, _reply, done) => {
    // Only JSON bodies: a form, multipart or text/plain POST can be sent cross-site without a preflight (CSRF).
    const type = request.headers['content-type']
    if (!type || !JSON_TYPE.test(type)) {
      return done(new AppError('UNSUPPORTED_MEDIA_TYPE', 'Content-Type must be application/json'))
    }
    done(identified(request))
  }
  const checkGet: onRequestHookHandler = (request, _reply, done) => done(identified(request))

  app.post('/graphql', { onRequest: checkPost }, async (request, reply) => {
    const body = request.body
    if (Array.isArray(body)) return answerBatch(request, reply, body)
    if (body === null || typeof body !== 'object') {
      throw new AppError(
        'BAD_REQUEST',
        'The request body must be a JSON object: { "query": "...", "variables": {...} }'
      )
    }
    const params = body as GraphQLRequestParams
    // Operations over server-sent events (graphql-sse): subscription-carriers.ts, sse.ts.
    const asEventStream = answersAsEventStream(request, params)
    if (asEventStream === true || (asEventStream !== false && (await asEventStream))) {
      return serveEventStream(request, reply)
    }
    return send(request, reply, await answer(request, params))
  })

  // graphql-sse's single connection mode starts with a PUT reserving the stream: refused with a clear
  // word, in the body and in the reason phrase (the graphql-sse client's error shows only the status line).
  app.put('/graphql', async (_request, reply) => {
    reply.raw.statusMessage = 'graphql-sse single connection mode is not supported'
    throw new AppError('METHOD_NOT_ALLOWED', SINGLE_CONNECTION_REFUSED)
  })

  const httpCache = createHttpCache({
    maxAgeSec: config.cacheMaxAgeSec,
    maxEntries: config.cacheMaxEntries,
    maxBytes: config.cacheMaxBytes
  })
  // Also the WebSocket endpoint: subscription-carriers.ts attaches the subscription transport to this route.
  // No preflight-forcing header is required (urql, CDN warmers and curl send none): a GET runs queries
  // only, cookies are never read, and the one credential, Authorization, is itself a header a page on
  // another origin cannot send without a preflight that CORS_ORIGINS answers. So a GET a page can
  // forge is an anonymous read whose answer that page cannot see: no cross-site request forgery.
  app.get('/graphql', { onRequest: checkGet }, async (request, reply) => {
    if (httpCache.answeredNotModified(request, reply)) return reply
    const query = request.query as Record<string, unknown>
    const body = await answer(request, {
      ...query,
      variables: parseJsonParam(query.variables, 'variables'),
      extensions: parseJsonParam(query.extensions, 'extensions')
    })
    if (body.errors !== undefined || statusFor(request, body) !== 200) {
      httpCache.uncacheable(reply)
      return send(request, reply, body)
    }
    // A cacheable answer carries no rate-limit window state: a cached copy is replayed later (to
    // other callers when public), and unchanged data then gives the same bytes, hence the same ETag.
    const cost = body.extensions?.cost as CostReport | undefined
    if (cost) body.extensions = { cost: { requested: cost.requested, budget: cost.budget } }
    const type = jsonAnswerType(request.headers.accept)
    const { json, fits } = serialize(request, body)
    if (!fits) {
      httpCache.uncacheable(reply)
      return reply.code(200).type(type).send(json)
    }
    if (httpCache.cacheable(request, reply, json, type)) return reply.code(304).send()
    return reply.code(200).type(type).send(json)
  })
}
