// The GraphQL endpoint over HTTP as a plain function, without Fastify: POST (JSON) for every operation (a
// JSON array of them: a batch), GET for persisted queries only (as the interface allows: stable,
// cacheable URLs), PUT refused (graphql-sse's single connection mode). Method, headers, query string or
// parsed body, caller and client address in; status, headers and body out — or, for a POST answered
// as an event stream, the operation handed back to the route for sse.ts.
// Exchange → the admission pipeline (pipeline.ts: document, plan, checks, cost, execution under the
// deadline) → the interface's response shape: the status table, batches, GET parsing, cost stripping
// and the ETag/304 of persisted GETs (http-cache.ts) all live here. A query, once admitted (its
// caller identified, its request and its price paid), is answered from the shared response cache
// (cached-answers.ts, over app/core/cache/) when it holds the answer, else executed once and kept there. The route
// (index.ts) identifies the caller first (its route hooks: the request budget counts the caller) and
// translates the result into its reply.
import type { IncomingHttpHeaders } from 'node:http'
import { withExtensions } from '../../app/core/cache/response-cache.ts'
import type { Caller } from '../../app/core/domain/context.ts'
import { AppError } from '../../app/core/errors.ts'
import { textHash } from '../../app/core/text-hash.ts'
import {
  formatError,
  formatThrown,
  statusOf,
  type FormatOptions,
} from '../../app/core/error-format.ts'
import type { Config } from '../../app/core/config/index.ts'
import type { CostReport } from '../../app/core/limits/cost-report.ts'
import {
  acceptsEventStream,
  jsonAnswerType,
  prefersEventStream,
  setRefusalHeaders,
  wantsGraphQLResponse
} from '../../app/core/media-types.ts'
import { answerTooLarge, withinAnswerCap } from '../../app/graphql/answer-size.ts'
import { createHttpCache, etagOf } from '../../app/graphql/http-cache.ts'
import type { GraphQLRequestParams, PersistedQueries } from '../../app/graphql/persisted.ts'
import type { OperationAdmission, OperationExecution } from '../../app/graphql/pipeline.ts'
import { clientAppOf } from '../../app/graphql/persisted.ts'
import { createCachedAnswers, type Answered, type CachedAnswersOptions, type GraphQLResponseBody } from '../../app/graphql/cached-answers.ts'

/** One HTTP request to /graphql, as the exchange reads it. */
export interface HttpExchangeInput {
  method: string
  /** The request's URL, path and query string (the key of a persisted GET's remembered ETag). */
  url: string
  headers: IncomingHttpHeaders
  /** GET: the parsed query string. */
  query?: unknown
  /** POST: the parsed JSON body. */
  body?: unknown
  /** Who is calling (identified by the route from the Authorization header), or null when anonymous. */
  caller: Caller | null
  ip: string
}

/** The operation a request executed, once admitted (told to the GraphQL instruments). */
export interface AnsweredOperation { name: string | null; type: string }

/** An answer to send: status, media type, headers and body (neither media type nor body on a 304). */
export interface HttpAnswer {
  status: number
  contentType: string | undefined
  /**
   * Headers of the answer. `vary` adds to a Vary header the route set earlier (CORS), and `retry-after`
   * never replaces one it set earlier (the request budget's).
   */
  headers: Record<string, string>
  body: string | undefined
  /** A reason phrase other than the status's own. */
  statusMessage?: string
  /** The answer (or batch of answers) sent, as an object, for the GraphQL instruments; null on a 304. */
  answer: unknown
  /** The (first) operation executed, once admitted. */
  operation: AnsweredOperation | null
}

/** A POST answered as an event stream (graphql-sse): the route hands the operation to sse.ts. */
export interface EventStreamExchange {
  eventStream: GraphQLRequestParams
}

export type HttpExchangeResult = HttpAnswer | EventStreamExchange

export interface HttpExchangeOptions {
  config: Pick<Config, 'execution' | 'httpCaching'>
  /** Persisted-only mode's word on a whole batch (persisted-registry.ts). */
  persisted: Pick<PersistedQueries, 'checkBatch'>
  admission: OperationAdmission
  execution: Pick<OperationExecution, 'execute' | 'cached'>
  /** How errors are shaped for callers (no internals in production), and where internal ones are logged. */
  errorOptions: FormatOptions
  /** The shared cache of query answers (RESPONSE_CACHE); null when it is off. */
  responseCache: CachedAnswersOptions['responseCache']
  /** The executable schema: who may share an answer depends on its field rules (answer-scope.ts). */
  schema: CachedAnswersOptions['schema']
}

const JSON_TYPE = /^application\/json\s*(;|$)/i

/** graphql-sse's single connection mode (a PUT reserving a stream, then operations naming its token) is not served. */
const SINGLE_CONNECTION_REFUSED =
  "graphql-sse single connection mode is not supported: use distinct connections mode (the client's default, singleConnection: false) or WebSocket"

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
 * GraphQL-over-HTTP media type answers 4xx when the request failed before execution began. (The
 * catalogue gives PERSISTED_QUERY_NOT_FOUND 200: an APQ miss is an ordinary answer, on which clients
 * resend the hash with the query.)
 */
export function statusFor (accept: string | undefined, body: GraphQLResponseBody): number {
  const first = body.errors?.[0]
  if (!first || body.data !== undefined) return 200
  if (UNPROCESSED.has(first.extensions.code)) return statusOf(first.extensions.code)
  return wantsGraphQLResponse(accept) ? statusOf(first.extensions.code) : 200
}

/**
 * The checks every /graphql request gets before its caller is identified (run by the route
 * hooks); the refusal, if any. A POST carries JSON only: a form, multipart or text/plain POST can be
 * sent cross-site without a preflight (CSRF).
 */
export function requestRefusal (method: string, headers: IncomingHttpHeaders): AppError | undefined {
  if (method === 'POST') {
    const type = headers['content-type']
    if (!type || !JSON_TYPE.test(type)) return new AppError('UNSUPPORTED_MEDIA_TYPE', 'Content-Type must be application/json')
  }
  if (headers['x-graphql-event-stream-token'] !== undefined) return new AppError('BAD_REQUEST', SINGLE_CONNECTION_REFUSED)
  return undefined
}

function parseJsonParam (value: unknown, name: string): unknown {
  if (typeof value !== 'string') return value
  try {
    return JSON.parse(value)
  } catch {
    throw new AppError('BAD_REQUEST', `The ${name} parameter is not valid JSON`)
  }
}

/** A new answer: 200 with the JSON media type the Accept header asks for, nothing executed yet. */
function newAnswer (accept: string | undefined): HttpAnswer {
  return {
    status: 200, contentType: jsonAnswerType(accept), headers: {}, body: undefined, answer: null, operation: null
  }
}

/**
 * The HTTP exchange over the GraphQL pipeline: one function per request, `exchange(input)`.
 */
export function createHttpExchange (
  { config, persisted, admission: operations, execution, errorOptions, responseCache, schema }: HttpExchangeOptions
) {
  // The answer is serialised here, once, and held to the answer cap in UTF-8 bytes: an answer over
  // the cap is replaced by an error before any byte of it is written.
  const maxAnswer = config.execution.maxResponseBytes
  // An admitted operation's answer: from the response cache, or executed (cached-answers.ts).
  const { answerAdmitted, startLookup } = createCachedAnswers({
    execution, errorOptions, responseCache, schema, maxAnswerBytes: maxAnswer
  })
  // With the response cache on, its shared entries answer If-None-Match (on any instance, after the
  // request is paid for); the per-instance memory of ETags is only for a service running without it.
  const rememberEtags = responseCache === null
  const httpCache = createHttpCache({
    maxAgeSec: config.httpCaching.maxAgeSec,
    maxEntries: rememberEtags ? config.httpCaching.etagMaxEntries : 0,
    maxBytes: config.httpCaching.etagMaxBytes
  })

  /**
   * One answer's JSON as sent: its text without extensions (the cache's, or the answer serialised without
   * them) with this request's extensions spliced in last, as JSON.stringify would put them.
   */
  function sentOf ({ body, cached }: Answered): { base: string; extensionsJson: string | undefined; json: string } {
    const { extensions, ...rest } = body
    const base = cached ? cached.entry.body : JSON.stringify(rest)
    const extensionsJson = extensions === undefined ? undefined : JSON.stringify(extensions)
    return { base, extensionsJson, json: withExtensions(base, extensionsJson) }
  }

  /**
   * Sets the answer's body to `answered` serialised: what was sent (null when it was over the cap and
   * replaced by its error).
   */
  function serialize (out: HttpAnswer, answered: Answered): ReturnType<typeof sentOf> | null {
    const sent = sentOf(answered)
    if (withinAnswerCap(sent.json, maxAnswer)) {
      out.answer = answered.body
      out.body = sent.json
      // RFC 9111: an answer from a cache says how old it is; an executed one has no Age.
      if (answered.cached?.age != null) out.headers.age = String(answered.cached.age)
      return sent
    }
    tooLarge(out)
    return null
  }
  /** Replaces the answer by the error of an answer over the cap (still 200: the request was processed). */
  function tooLarge (out: HttpAnswer): void {
    const replaced = { errors: [formatError(answerTooLarge(maxAnswer), errorOptions)] }
    out.answer = replaced
    out.body = JSON.stringify(replaced)
  }

  /** An answer with its status and refusal headers. */
  function send (out: HttpAnswer, accept: string | undefined, answered: Answered): HttpAnswer {
    const { body } = answered
    out.status = statusFor(accept, body)
    const first = body.errors?.[0]
    if (out.status !== 200 && first) {
      setRefusalHeaders(headerSink(out.headers), first.extensions.code, first.extensions.retryAfter)
    }
    serialize(out, answered)
    return out
  }

  /**
   * A request refused before any operation ran (a bad body, a refused batch, PUT): the refusal's own
   * status, its headers, never stored by a cache — as the route's error handler answers its hooks' refusals.
   */
  function refuse (out: HttpAnswer, error: AppError): HttpAnswer {
    const body = { errors: [formatError(error, errorOptions)] }
    out.status = error.status
    setRefusalHeaders(headerSink(out.headers), error.code, error.details?.retryAfter)
    out.headers['cache-control'] = 'no-store'
    out.answer = body
    out.body = JSON.stringify(body)
    return out
  }

  /**
   * Admits and runs one operation through the pipeline; every refusal answers in the interface's shape.
   * `paidByRequest` false: an operation of a batch beyond the first, which spends a request of its own.
   */
  async function answer (
    input: HttpExchangeInput,
    out: HttpAnswer,
    params: GraphQLRequestParams,
    paidByRequest = true
  ): Promise<Answered> {
    try {
      // A hit from Redis would otherwise wait two round trips in turn, the charge's and the lookup's.
      let lookup: ReturnType<typeof startLookup>
      const admission = await operations.admit({
        params,
        transport: input.method === 'GET' ? 'GET' : 'POST',
        caller: input.caller,
        ip: input.ip,
        client: clientAppOf(input.headers),
        paidByRequest,
        onPriced: (priced) => { lookup = startLookup(priced) }
      })
      out.operation ??= admission.operation
      return await answerAdmitted(admission, lookup)
    } catch (err) {
      return { body: { errors: formatThrown(err, errorOptions) } }
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
  async function answerBatch (input: HttpExchangeInput, out: HttpAnswer, batch: unknown[]): Promise<HttpAnswer> {
    const max = config.execution.maxBatchSize
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
    persisted.checkBatch(batch)
    const answers: GraphQLResponseBody[] = []
    const parts: string[] = []
    let bytes = 2 // [ and ]
    for (const [i, params] of batch.entries()) {
      const answered: Answered = (params !== null && typeof params === 'object' && !Array.isArray(params))
        ? await answer(input, out, params as GraphQLRequestParams, i === 0)
        : { body: { errors: formatThrown(new AppError('BAD_REQUEST', 'Each operation of a batch must be a JSON object: { "query": "...", "variables": {...} }'), errorOptions) } }
      const { json } = sentOf(answered)
      // One answer over the cap stops the batch at once; otherwise its bytes count toward the cap.
      bytes += (i > 0 ? 1 : 0) + (withinAnswerCap(json, maxAnswer) ? Buffer.byteLength(json) : maxAnswer + 1)
      if (bytes > maxAnswer) {
        tooLarge(out)
        return out
      }
      answers.push(answered.body)
      parts.push(json)
    }
    out.answer = answers
    out.body = `[${parts.join(',')}]`
    // A batch as a whole is no one operation's answer: no cache may keep it.
    httpCache.uncacheable(out.headers)
    return out
  }

  /**
   * Whether a POST is answered as an event stream (graphql-sse): when the client prefers one, or when
   * it accepts one and the operation is a subscription (urql's default Accept lists both).
   */
  function answersAsEventStream (input: HttpExchangeInput, params: GraphQLRequestParams): boolean | Promise<boolean> {
    const accept = input.headers.accept
    // Most POSTs accept no event stream: decided without a promise.
    if (!acceptsEventStream(accept)) return false
    if (prefersEventStream(accept)) return true
    return operations.operationType(params, input.caller).then((type) => type === 'subscription')
  }

  async function post (input: HttpExchangeInput, out: HttpAnswer): Promise<HttpExchangeResult> {
    const body = input.body
    if (Array.isArray(body)) return answerBatch(input, out, body)
    if (body === null || typeof body !== 'object') {
      throw new AppError('BAD_REQUEST', 'The request body must be a JSON object: { "query": "...", "variables": {...} }')
    }
    const params = body as GraphQLRequestParams
    // Operations over server-sent events (graphql-sse): the route hands them to sse.ts.
    const asEventStream = answersAsEventStream(input, params)
    if (asEventStream === true || (asEventStream !== false && (await asEventStream))) return { eventStream: params }
    const answered = await answer(input, out, params)
    send(out, input.headers.accept, answered)
    // A query's answer says who may keep it, as a GET's does; anything else is no-store: a mutation, an
    // answer with errors, or one over the cap (`send` then sent its error instead of the answer).
    if (answered.visibility && answered.body.errors === undefined && out.answer === answered.body) {
      httpCache.visible(input, out.headers, answered.visibility)
    } else {
      httpCache.uncacheable(out.headers)
    }
    return out
  }

  // No preflight-forcing header is required (urql, CDN warmers and curl send none): a GET runs queries
  // only, cookies are never read, and the one credential, Authorization, is itself a header a page on
  // another origin cannot send without a preflight that CORS_ORIGINS answers. So a GET a page can
  // forge is an anonymous read whose answer that page cannot see: no cross-site request forgery.
  async function get (input: HttpExchangeInput, out: HttpAnswer): Promise<HttpAnswer> {
    const query = input.query as Record<string, unknown>
    const accept = input.headers.accept
    const params: GraphQLRequestParams = {
      ...query,
      variables: parseJsonParam(query.variables, 'variables'),
      extensions: parseJsonParam(query.extensions, 'extensions')
    }
    // A remembered ETag answers 304 before executing, but only after the registry has resolved the
    // operation the request names (a deployed id: one Map lookup, its plan cached; no store, no charge). The order
    // matters: the ETag was remembered while the operation was served, and once its app deployment is
    // retired the client must get PERSISTED_QUERY_NOT_FOUND naming it (from admission, below), not a 304
    // that keeps it on its cached answer for good. (With the response cache on, its entries answer
    // If-None-Match only after admission, which resolves the id first.)
    const known = rememberEtags ? httpCache.remembered(input) : undefined
    if (known && (await operations.resolvesRegistered(params, input.caller))) {
      httpCache.notModified(input, out.headers, known)
      return notModified(out)
    }
    const answered = await answer(input, out, params)
    const { body } = answered
    if (body.errors !== undefined || statusFor(accept, body) !== 200) {
      httpCache.uncacheable(out.headers)
      return send(out, accept, answered)
    }
    // A cacheable answer carries no rate-limit window state: a cached copy is replayed later (to
    // other callers when public), and unchanged data then gives the same bytes, hence the same ETag.
    const cost = body.extensions?.cost as CostReport | undefined
    if (cost) body.extensions = { cost: { requested: cost.requested, budget: cost.budget } }
    const sent = serialize(out, answered)
    if (!sent) {
      httpCache.uncacheable(out.headers)
      return out
    }
    // The ETag of the bytes sent, from the digest of their text: the cache's (taken once) or this execution's.
    const digest = answered.cached ? answered.cached.entry.digest : textHash(sent.base)
    const etag = etagOf(out.contentType as string, digest, sent.extensionsJson ?? '')
    // (A 304 keeps the answer for the instruments: it was made, only its bytes are saved.)
    if (httpCache.cacheable(input, out.headers, etag, answered.visibility ?? 'private')) return notModified(out)
    return out
  }

  /** Whatever the request: an answer, or the refusal of a request no operation could come from. */
  return async function exchange (input: HttpExchangeInput): Promise<HttpExchangeResult> {
    const out = newAnswer(input.headers.accept)
    try {
      if (input.method === 'POST') return await post(input, out)
      if (input.method === 'GET') return await get(input, out)
      // graphql-sse's single connection mode starts with a PUT reserving the stream: refused with a clear
      // word, in the body and in the reason phrase (the graphql-sse client's error shows only the status line).
      out.statusMessage = 'graphql-sse single connection mode is not supported'
      throw new AppError('METHOD_NOT_ALLOWED', SINGLE_CONNECTION_REFUSED)
    } catch (err) {
      if (err instanceof AppError) return refuse(out, err)
      throw err
    }
  }
}

/** A 304: no body, no media type; the caching headers already set. */
function notModified (out: HttpAnswer): HttpAnswer {
  out.status = 304
  out.body = undefined
  out.contentType = undefined
  return out
}

/** setRefusalHeaders' view of an answer's headers. */
function headerSink (headers: Record<string, string>) {
  return {
    header (name: string, value: string) { headers[name] = value },
    hasHeader (name: string) { return headers[name] !== undefined }
  }
}
