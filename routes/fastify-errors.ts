// Errors Fastify raises itself (body parsing, body and media-type limits, routing, rate limiting) mapped
// to the error catalogue, once for every binding: the app's error handler (GraphQL's shape) and the
// SOAP routes' (faults) both call this; a binding may word a status its own way.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { formatError, type ErrorJson } from '../app/core/error-format.ts'
import { AppError, type ErrorCode } from '../app/core/errors.ts'
import { jsonAnswerType, setRefusalHeaders } from '../app/core/media-types.ts'

const CODE_BY_STATUS: Record<number, ErrorCode> = {
  400: 'BAD_REQUEST',
  404: 'NOT_FOUND',
  405: 'METHOD_NOT_ALLOWED',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  429: 'RATE_LIMITED',
  503: 'SERVICE_UNAVAILABLE'
}

function defaultMessage (error: FastifyError, status: number): string {
  switch (status) {
    case 400: return error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'The request body is empty' : 'Malformed request body: it is not valid JSON'
    case 404: return 'Not found'
    case 405: return 'Method not allowed'
    case 413: return 'Request body too large'
    case 415: return 'Unsupported Content-Type'
    case 503: return 'Service unavailable; retry later'
    default: return error.message // 429: the rate limiter's own words
  }
}

/**
 * A Fastify error as a catalogue error (an AppError passes through); an error of another status is
 * returned as it is (an internal error to whoever formats it). `messages`: a binding's own words, by status.
 */
export function fastifyErrorAsAppError (error: FastifyError, messages: Partial<Record<number, string>> = {}): unknown {
  if (error instanceof AppError || error.statusCode === undefined) return error
  const code = CODE_BY_STATUS[error.statusCode]
  return code ? new AppError(code, messages[error.statusCode] ?? defaultMessage(error, error.statusCode)) : error
}

/**
 * Every error that escapes a route, answered in the GraphQL error shape, without internals in
 * production: sets the reply's status and headers and returns the body to send. The app's error
 * handler uses it, and the GraphQL routes' (which also keeps the body for its instruments).
 */
export function errorAnswer (
  error: FastifyError,
  request: FastifyRequest,
  reply: FastifyReply,
  production: boolean
): { errors: ErrorJson[] } {
  const appError = fastifyErrorAsAppError(error)
  const status = appError instanceof AppError ? appError.status : 500
  if (status >= 500) request.log.error({ err: error }, 'request failed')
  const body = { errors: [formatError(appError, { production, logInternal: () => {} })] }
  if (appError instanceof AppError) setRefusalHeaders(reply, appError.code, appError.details?.retryAfter)
  // A refusal is never stored by a cache (some statuses, 404 and 405 among them, are cacheable by default).
  reply.header('cache-control', 'no-store')
  // In the media type asked for (application/graphql-response+json when preferred), like the route's answers.
  reply.code(status).type(jsonAnswerType(request.headers.accept))
  return body
}
