// The one error catalogue. Every failure the service reports carries a code from here; each code knows
// its HTTP status (used when a request is refused before execution, and for the GraphQL-over-HTTP media
// type) and which side is at fault (SOAP Client/Sender or Server/Receiver).

export const ErrorCodes = {
  BAD_REQUEST: { status: 400, sender: true },
  BAD_USER_INPUT: { status: 400, sender: true },
  GRAPHQL_PARSE_FAILED: { status: 400, sender: true },
  GRAPHQL_VALIDATION_FAILED: { status: 400, sender: true },
  OPERATION_NOT_FOUND: { status: 400, sender: true },
  DEPTH_LIMIT_EXCEEDED: { status: 400, sender: true },
  COST_LIMIT_EXCEEDED: { status: 400, sender: true },
  MUTATION_LIMIT_EXCEEDED: { status: 400, sender: true },
  ALIAS_LIMIT_EXCEEDED: { status: 400, sender: true },
  DIRECTIVE_LIMIT_EXCEEDED: { status: 400, sender: true },
  INTROSPECTION_DISABLED: { status: 400, sender: true },
  // 200: a miss is an ordinary answer in the automatic-registration protocol (the client resends with the query).
  PERSISTED_QUERY_NOT_FOUND: { status: 200, sender: true },
  PERSISTED_QUERY_REQUIRED: { status: 400, sender: true },
  PERSISTED_QUERY_HASH_MISMATCH: { status: 400, sender: true },
  UNAUTHENTICATED: { status: 401, sender: true },
  FORBIDDEN: { status: 403, sender: true },
  NOT_FOUND: { status: 404, sender: true },
  METHOD_NOT_ALLOWED: { status: 405, sender: true },
  NOT_ACCEPTABLE: { status: 406, sender: true },
  REQUEST_TIMEOUT: { status: 408, sender: true },
  CONFLICT: { status: 409, sender: true },
  PAYLOAD_TOO_LARGE: { status: 413, sender: true },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, sender: true },
  RATE_LIMITED: { status: 429, sender: true },
  REQUEST_HEADER_FIELDS_TOO_LARGE: { status: 431, sender: true },
  QUERY_TOO_LARGE: { status: 413, sender: true },
  RESPONSE_TOO_LARGE: { status: 400, sender: true },
  INTERNAL_SERVER_ERROR: { status: 500, sender: false },
  SERVICE_UNAVAILABLE: { status: 503, sender: false },
  TIMEOUT: { status: 504, sender: false }
} as const satisfies Record<string, { status: number; sender: boolean }>

export type ErrorCode = keyof typeof ErrorCodes

/** An expected failure with a code from the catalogue; its message is safe to show to callers. */
export class AppError extends Error {
  readonly code: ErrorCode
  readonly details: Record<string, unknown> | undefined

  constructor (code: ErrorCode, message: string, details?: Record<string, unknown>) {
    super(message)
    this.name = 'AppError'
    this.code = code
    this.details = details
  }

  get status (): number {
    return ErrorCodes[this.code].status
  }
}

export function isErrorCode (value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ErrorCodes, value)
}

// Messages the interface names, used verbatim.
export const Messages = {
  mustBeLoggedIn: 'Must be logged in',
  introspectionDisabled: 'Introspection disabled',
  queryTimeout: 'Query timeout',
  tooLong: 'Too long',
  forbidden: 'Forbidden',
  internal: 'Internal server error'
} as const

export const unauthenticated = () => new AppError('UNAUTHENTICATED', Messages.mustBeLoggedIn)
export const forbidden = (message: string = Messages.forbidden) => new AppError('FORBIDDEN', message)
export const notFound = (what: string) => new AppError('NOT_FOUND', `${what} not found`)
export const badInput = (message: string, details?: Record<string, unknown>) =>
  new AppError('BAD_USER_INPUT', message, details)
