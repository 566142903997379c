// Turns anything thrown or returned during a GraphQL request into the interface's error shape:
// { message, locations?, path?, extensions: { code } }, with codes from the one catalogue.
// Production answers carry no stack traces, no internal messages and no "Did you mean" hints.
import { GraphQLError, type ExecutionResult } from 'graphql'
import { AppError, ErrorCodes, isErrorCode, Messages, type ErrorCode } from './errors.ts'

export interface ErrorJson {
  message: string
  locations?: readonly { line: number; column: number }[]
  path?: readonly (string | number)[]
  extensions: { code: ErrorCode; [key: string]: unknown }
  /** The interface puts TIMEOUT on the error object itself as well. */
  code?: 'TIMEOUT'
}

export interface FormatOptions {
  production: boolean
  /** Receives errors that are not expected failures (bugs, outages), with their stacks. */
  logInternal (err: unknown): void
}

function stripSuggestions (message: string): string {
  return message.replace(/ Did you mean .*\?$/, '')
}

function internal (err: unknown, options: FormatOptions): { code: ErrorCode; message: string } {
  options.logInternal(err)
  return {
    code: 'INTERNAL_SERVER_ERROR',
    message: options.production ? Messages.internal : String((err as Error)?.message ?? err)
  }
}

/** The code and safe message for an error's cause. */
function classify (
  err: unknown,
  options: FormatOptions
): { code: ErrorCode; message: string; details?: Record<string, unknown> } {
  if (err instanceof AppError) {
    return { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) }
  }
  if (err instanceof GraphQLError) {
    if (err.originalError && !(err.originalError instanceof GraphQLError)) return classify(err.originalError, options)
    const { code, ...details } = err.extensions ?? {}
    if (isErrorCode(code)) return { code, message: err.message, details }
    if (err.message.startsWith('Syntax Error')) return { code: 'GRAPHQL_PARSE_FAILED', message: err.message }
    // graphql-js gives up on documents too large or repetitive to validate, without locations.
    if (/Validation aborted/.test(err.message)) {
      return {
        code: 'GRAPHQL_VALIDATION_FAILED',
        message: 'Validation aborted: the document is too large or too repetitive to validate'
      }
    }
    return internal(err, options)
  }
  // Errors from mercurius-auth and others that chose a catalogue code themselves.
  const code = (err as { code?: unknown })?.code
  if (isErrorCode(code)) return { code, message: (err as Error).message }
  return internal(err, options)
}

export function formatError (err: unknown, options: FormatOptions): ErrorJson {
  const { code, message, details } = classify(err, options)
  const json: ErrorJson = {
    message: options.production ? stripSuggestions(message) : message,
    extensions: { code, ...details }
  }
  if (err instanceof GraphQLError) {
    if (err.locations) json.locations = err.locations
    if (err.path) json.path = err.path
  }
  if (code === 'TIMEOUT') json.code = 'TIMEOUT'
  return json
}

/**
 * Refusals that hold several errors (validation, variables, a
 * subscription that could not start) carry them in `errors`.
 */
export function formatThrown (err: unknown, options: FormatOptions): ErrorJson[] {
  const nested = (err as { errors?: unknown[] })?.errors
  if (Array.isArray(nested) && nested.length > 0 && !(err instanceof AppError)) {
    return nested.map((e) => formatError(e, options))
  }
  return [formatError(err, options)]
}

export function statusOf (code: ErrorCode): number {
  return ErrorCodes[code].status
}

/** An execution's outcome, its errors in the interface's shape. */
export interface GraphQLAnswer {
  data?: unknown
  errors?: ErrorJson[]
}

/** An execution result as answered: failed fields are null in `data`, their errors formatted. */
export function formatResult (result: ExecutionResult, options: FormatOptions): GraphQLAnswer {
  if (!result.errors || result.errors.length === 0) return { data: result.data }
  return { data: result.data ?? null, errors: result.errors.map((e) => formatError(e, options)) }
}
