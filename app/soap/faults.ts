// Every SOAP error is a Fault in the envelope of the request's SOAP version, carrying in its detail the
// same catalogue code GraphQL puts in extensions.code (app/core/errors.ts decides Client/Sender vs Server/Receiver).
// SOAP 1.1: faultcode/faultstring/detail, HTTP 500 (SOAP 1.1 §6.2).
// SOAP 1.2: Code/Reason/Detail, HTTP 400 for Sender faults and 500 otherwise (SOAP 1.2 part 2, table 20).
// Except throttling, in both versions: RATE_LIMITED is HTTP 429 with Retry-After, as every HTTP client,
// proxy and retry policy understands it (a 500 would read as a server failure and be retried at once);
// likewise a SERVICE_UNAVAILABLE fault that says when to retry (a full WS-Security replay memory) is
// HTTP 503 with Retry-After. One without a time (a store or Redis that does not answer) stays a fault's own status.
// WS-Security failures use the WSS fault codes wsse:InvalidSecurity
// and wsse:FailedAuthentication (the faultcode in 1.1, a
// Subcode of Sender in 1.2), never a bare HTTP 401.
import { AppError, ErrorCodes, Messages, type ErrorCode } from '../core/errors.ts'

/** The SOAP version of an exchange: 1.1 (text/xml) or 1.2 (application/soap+xml). Defined here, beside the
 * faults every version answers with, so that envelope.ts (which raises them) is the only one importing the other. */
export type SoapVersion = '1.1' | '1.2'

export const WSSE_NS = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd'

export type FaultKind = 'VersionMismatch' | 'MustUnderstand' | 'Client' | 'Server'

export class SoapFault extends Error {
  readonly kind: FaultKind
  readonly code: ErrorCode
  /** A WSS fault code (local name in WSSE_NS), e.g. FailedAuthentication. */
  readonly wsseCode: string | undefined
  /** Qualified names of mandatory headers that were not understood (SOAP 1.2 NotUnderstood blocks). */
  readonly notUnderstood: Array<{ ns: string; local: string }>
  /** Seconds after which a refused (RATE_LIMITED) call may be retried. */
  readonly retryAfter: number | undefined

  constructor (
    kind: FaultKind,
    code: ErrorCode,
    message: string,
    extra: { wsseCode?: string; notUnderstood?: Array<{ ns: string; local: string }>; retryAfter?: number } = {}
  ) {
    super(message)
    this.name = 'SoapFault'
    this.kind = kind
    this.code = code
    this.wsseCode = extra.wsseCode
    this.notUnderstood = extra.notUnderstood ?? []
    this.retryAfter = extra.retryAfter
  }

  static client (code: ErrorCode, message: string): SoapFault {
    return new SoapFault('Client', code, message)
  }

  static failedAuthentication (message = 'The security token could not be authenticated or authorized'): SoapFault {
    return new SoapFault('Client', 'UNAUTHENTICATED', message, { wsseCode: 'FailedAuthentication' })
  }

  /** The message lacks the security the service requires (no wsse:Security header, or no token in it). */
  static invalidSecurity (message: string): SoapFault {
    return new SoapFault('Client', 'UNAUTHENTICATED', message, { wsseCode: 'InvalidSecurity' })
  }

  /** Any thrown value as a fault: catalogue errors keep their code and message, anything else is an internal error. */
  static from (err: unknown): SoapFault {
    if (err instanceof SoapFault) return err
    if (err instanceof AppError) {
      // "Must be logged in" from the domain means the message carried no usable credentials.
      if (err.code === 'UNAUTHENTICATED') return SoapFault.failedAuthentication(err.message)
      const retryAfter = err.details?.retryAfter
      return new SoapFault(ErrorCodes[err.code].sender ? 'Client' : 'Server', err.code, err.message, {
        retryAfter: typeof retryAfter === 'number' ? retryAfter : undefined
      })
    }
    return new SoapFault('Server', 'INTERNAL_SERVER_ERROR', Messages.internal)
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' }
// What needs escaping, and what XML 1.0 cannot carry at all, even as a character reference (C0 controls
// other than tab/LF/CR, U+FFFE/U+FFFF, lone surrogates): those become U+FFFD, so the writer never
// produces a document a parser must refuse, whatever the store holds (the domain refuses them on input).
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const SPECIAL = /[&<>"'\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/
const SPECIALS = new RegExp(SPECIAL.source, 'g')

/** Escapes text for element content and attribute values; characters XML forbids are replaced by U+FFFD. */
export function escapeXml (value: string): string {
  return SPECIAL.test(value) ? value.replace(SPECIALS, (c) => ESCAPES[c] ?? '\uFFFD') : value
}

export interface SoapResponse {
  status: number
  contentType: string
  body: string
  /** Seconds, for a Retry-After header. */
  retryAfter?: number
  /** A fault's catalogue code (read by tracing). */
  fault?: string
}

/** Throttling, and unavailability with a time to retry, keep their HTTP meaning in both SOAP versions (see the top). */
function throttled (fault: SoapFault, response: SoapResponse): SoapResponse {
  response.fault = fault.code
  if (fault.code === 'RATE_LIMITED') return { ...response, status: ErrorCodes.RATE_LIMITED.status, retryAfter: fault.retryAfter }
  if (fault.code === 'SERVICE_UNAVAILABLE' && fault.retryAfter !== undefined) {
    return { ...response, status: ErrorCodes.SERVICE_UNAVAILABLE.status, retryAfter: fault.retryAfter }
  }
  return response
}

export const CONTENT_TYPE: Record<SoapVersion, string> = {
  1.1: 'text/xml; charset=utf-8',
  1.2: 'application/soap+xml; charset=utf-8'
}

function detail (fault: SoapFault, serviceNs: string): string {
  return `<f:ServiceFault xmlns:f="${escapeXml(serviceNs)}"><f:code>${fault.code}</f:code><f:message>${escapeXml(fault.message)}</f:message></f:ServiceFault>`
}

const WSSE_DECL = `xmlns:wsse="${WSSE_NS}"`

/** The response for a fault, in the SOAP version of the request; `serviceNs` qualifies the detail element. */
export function faultResponse (fault: SoapFault, version: SoapVersion, serviceNs: string): SoapResponse {
  const message = escapeXml(fault.message)
  if (version === '1.1') {
    const faultcode = fault.wsseCode ? `wsse:${fault.wsseCode}` : `soap:${fault.kind}`
    const body = '<?xml version="1.0" encoding="utf-8"?>' +
      '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>' +
      `<soap:Fault${fault.wsseCode ? ' ' + WSSE_DECL : ''}><faultcode>${faultcode}</faultcode><faultstring>${message}</faultstring>` +
      `<detail>${detail(fault, serviceNs)}</detail></soap:Fault></soap:Body></soap:Envelope>`
    return throttled(fault, { status: 500, contentType: CONTENT_TYPE['1.1'], body })
  }
  const value = fault.kind === 'Client' ? 'Sender' : fault.kind === 'Server' ? 'Receiver' : fault.kind
  const subcode = fault.wsseCode
    ? `<env:Subcode><env:Value ${WSSE_DECL}>wsse:${fault.wsseCode}</env:Value></env:Subcode>`
    : ''
  let header = ''
  if (fault.notUnderstood.length > 0) {
    header = '<env:Header>' + fault.notUnderstood.map((q) => q.ns === ''
      ? `<env:NotUnderstood qname="${escapeXml(q.local)}"/>`
      : `<env:NotUnderstood xmlns:h="${escapeXml(q.ns)}" qname="h:${escapeXml(q.local)}"/>`).join('') + '</env:Header>'
  } else if (fault.kind === 'VersionMismatch') {
    // SOAP 1.2 part 1, 5.4.7: say which envelope versions are supported, in order of preference.
    header = '<env:Header><env:Upgrade><env:SupportedEnvelope qname="e12:Envelope" xmlns:e12="http://www.w3.org/2003/05/soap-envelope"/>' +
      '<env:SupportedEnvelope qname="e11:Envelope" xmlns:e11="http://schemas.xmlsoap.org/soap/envelope/"/></env:Upgrade></env:Header>'
  }
  const body = '<?xml version="1.0" encoding="utf-8"?>' +
    `<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope">${header}<env:Body><env:Fault>` +
    `<env:Code><env:Value>env:${value}</env:Value>${subcode}</env:Code>` +
    `<env:Reason><env:Text xml:lang="en">${message}</env:Text></env:Reason>` +
    `<env:Detail>${detail(fault, serviceNs)}</env:Detail></env:Fault></env:Body></env:Envelope>`
  return throttled(fault, { status: value === 'Sender' ? 400 : 500, contentType: CONTENT_TYPE['1.2'], body })
}
