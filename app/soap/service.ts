// The SOAP core: a function from a request envelope (its text, its SOAP version and the actions the
// carrier declared) to a response envelope. HTTP (index.ts) is only its first carrier; nothing here
// knows about Fastify. Every failure comes back as a Fault response, never as a thrown error.
// Steps: hardened parse → mandatory headers → operation by the Body's element (namespace-aware) → the
// declared action must agree → WS-Security (a message that authenticates nobody spends its address's
// request budget) → the partner's request budget → a signed message's operation again, from its Body as
// signed (signature.ts), never from the message's text → arguments (typed, capped) → the partner's cost
// units → domain → response, signed by the service's key (replySigner) when the request's signature verified.
import { createDomainContext, withinDeadline, type Caller, type Events } from '../core/domain/context.ts'
import { assertWithinCaps, type InputCaps } from '../core/domain/input.ts'
import { AppError, Messages, badInput } from '../core/errors.ts'
import type { Store } from '../core/store/types.ts'
import type { VisibleUser } from '../core/domain/authorization.ts'
import {
  NS,
  attribute,
  envelopeNamespace,
  parseEnvelope,
  type SoapVersion,
  type XmlElement,
  type XmlLimits
} from './envelope.ts'
import { CONTENT_TYPE, SoapFault, WSSE_NS, escapeXml, faultResponse, type SoapResponse } from './faults.ts'
import {
  costOf,
  namespaceOf,
  soapActionOf,
  type Args,
  type Field,
  type Operation,
  type Result,
  type ServiceVersion
} from './operations.ts'
import type { ReplySigner } from './reply-signing.ts'
import type { WsSecurity } from './ws-security.ts'

export interface SoapRequest {
  soapVersion: SoapVersion
  envelope: string
  /** Actions the carrier declared (SOAP 1.1 SOAPAction header, SOAP 1.2 action parameter), as sent. */
  actions: Array<string | undefined>
}

export interface SoapServiceOptions {
  namespaceBase: string
  store: Store
  events: Events
  caps: InputCaps
  /** Signs and checks ListUsers page tokens (the domain's page cursors). */
  cursorKey: Buffer
  /** What a write costs on top of its selection (as a GraphQL mutation field). */
  mutationCost: number
  xmlLimits: XmlLimits
  timeoutMs: number
  wsSecurity: WsSecurity
  /** Signs the reply to a request whose signature verified (SOAP_SIGNING_KEY/SOAP_SIGNING_CERT); none: unsigned. */
  replySigner?: ReplySigner | undefined
}

/**
 * How a call spends budgets; the carrier binds it to the client's address. A message that
 * authenticates nobody spends the address's request budget; an authenticated one spends the
 * partner's, so partners behind one address (a NAT, a load balancer) do not share a budget.
 */
export interface Admission {
  /** Refuses (RATE_LIMITED) a client address that has no request left; runs before costly verification. */
  checkAddress (): Promise<void>
  /** Counts a message that authenticated nobody on the client address. */
  spendOnAddress (): Promise<void>
  /** Spends one request of the partner's budget; throws RATE_LIMITED when it is exhausted. */
  spendRequest (caller: Caller): Promise<void>
  /** Spends the call's cost units from the partner's window; throws RATE_LIMITED when it is exhausted. */
  spendCost (caller: Caller, cost: number): Promise<void>
  /** Told the operation and its cost once they are known (only when tracing is on). */
  describe?: (operation: string, cost: number) => void
}

const SOAP11_NEXT = 'http://schemas.xmlsoap.org/soap/actor/next'
const SOAP12_ROLES_FOR_US = new Set(['http://www.w3.org/2003/05/soap-envelope/role/next', 'http://www.w3.org/2003/05/soap-envelope/role/ultimateReceiver'])

/** True when a header block is addressed to this node (no actor/role, or the "next"/ultimate receiver one). */
function addressedToUs (header: XmlElement, version: SoapVersion): boolean {
  if (version === '1.1') {
    const actor = attribute(header, NS.soap11, 'actor')
    return actor === undefined || actor === '' || actor === SOAP11_NEXT
  }
  const role = attribute(header, NS.soap12, 'role')
  return role === undefined || role === '' || SOAP12_ROLES_FOR_US.has(role)
}

function mustUnderstand (header: XmlElement, version: SoapVersion): boolean {
  const value = attribute(header, envelopeNamespace(version), 'mustUnderstand')?.trim()
  return value === '1' || value === 'true'
}

/** The wsse:Security header for us; a MustUnderstand fault for any other mandatory header for us. */
function securityHeader (headers: XmlElement[], version: SoapVersion): XmlElement | undefined {
  let security: XmlElement | undefined
  const notUnderstood: Array<{ ns: string; local: string }> = []
  for (const header of headers) {
    if (!addressedToUs(header, version)) continue
    if (header.ns === WSSE_NS && header.local === 'Security') {
      if (security) {
        throw SoapFault.failedAuthentication('Only one wsse:Security header may be addressed to this service')
      }
      security = header
    } else if (mustUnderstand(header, version)) {
      notUnderstood.push({ ns: header.ns, local: header.local })
    }
  }
  if (notUnderstood.length > 0) {
    const names = notUnderstood.map((q) => `{${q.ns}}${q.local}`).join(', ')
    throw new SoapFault('MustUnderstand', 'BAD_REQUEST', `Header not understood: ${names}`, { notUnderstood })
  }
  return security
}

/** Reads the operation's child elements into typed arguments: known names only, once each, as text. */
function readArgs (operation: Operation, element: XmlElement, namespace: string, caps: InputCaps): Args {
  const args: Args = {}
  for (const node of element.children) {
    // Children are qualified (elementFormDefault="qualified"); unqualified ones are accepted too, as
    // several toolkits send them that way. Any other namespace is not ours.
    const field =
      node.ns === namespace || node.ns === '' ? operation.input.find((f) => f.name === node.local) : undefined
    if (!field) throw badInput(`${operation.name} has no element {${node.ns}}${node.local}`, { field: node.local })
    if (Object.hasOwn(args, field.name)) {
      throw badInput(`${operation.name}: the element ${field.name} appears more than once`, { field: field.name })
    }
    if (node.children.length > 0) throw badInput(`${operation.name}: ${field.name} must be text`, { field: field.name })
    const nil = attribute(node, NS.xsi, 'nil')?.trim()
    args[field.name] = nil === 'true' || nil === '1' ? null : scalar(field, node.text, operation.name)
  }
  for (const field of operation.input) {
    if (!field.optional && args[field.name] == null) {
      throw badInput(`${operation.name}: the element ${field.name} is required`, { field: field.name })
    }
  }
  assertWithinCaps(args, caps, operation.name)
  return args
}

function scalar (field: Field, value: string, operationName: string): string | number | boolean {
  switch (field.type) {
    case 'int': {
      const trimmed = value.trim()
      if (!/^[+-]?\d{1,10}$/.test(trimmed) || Math.abs(Number(trimmed)) > 2 ** 31) {
        throw badInput(`${operationName}: ${field.name} must be an xs:int`, { field: field.name })
      }
      return Number(trimmed)
    }
    case 'boolean': {
      const trimmed = value.trim()
      if (!['true', 'false', '1', '0'].includes(trimmed)) {
        throw badInput(`${operationName}: ${field.name} must be an xs:boolean`, { field: field.name })
      }
      return trimmed === 'true' || trimmed === '1'
    }
    default:
      // xs:string and anything textual stay exactly as sent ("007" stays "007").
      return value
  }
}

function userXml (user: VisibleUser, fields: Field[], element: string): string {
  let xml = `<${element}>`
  for (const field of fields) {
    const value = user[field.name as keyof VisibleUser]
    if (value === null || value === undefined) continue
    xml += `<${field.name}>${escapeXml(String(value))}</${field.name}>`
  }
  return xml + `</${element}>`
}

function resultXml (result: Result, output: Field[], userFields: Field[]): string {
  let xml = ''
  for (const field of output) {
    const value = result[field.name]
    if (value === undefined) continue
    if (typeof value === 'boolean' || typeof value === 'string') { xml += `<${field.name}>${escapeXml(String(value))}</${field.name}>` } else if (Array.isArray(value)) xml += value.map((u) => userXml(u, userFields, field.name)).join('')
    else xml += userXml(value, userFields, field.name)
  }
  return xml
}

/** `"expected"`, as toolkits send a SOAPAction: compared in place, with no copy and no regular expression. */
function isQuoted (raw: string, expected: string): boolean {
  return raw.length === expected.length + 2 && raw.startsWith('"') && raw.endsWith('"') && raw.startsWith(expected, 1)
}

/** What one exchange learnt on the way that its reply depends on. */
interface Exchange {
  /** The request's X.509 signature verified (and it was no replay): its reply is signed. */
  signed: boolean
}

/** What an operation's run settles with when the deadline passed first. */
const TIMED_OUT = Symbol('timed out')

export function createSoapService (options: SoapServiceOptions) {
  const { store, events, caps, cursorKey, timeoutMs, wsSecurity, replySigner } = options
  const pricing = { maxPageSize: caps.maxPageSize, mutationCost: options.mutationCost }

  /** Per service version: its namespace and the envelope text around a response, built once. */
  const prepared = new Map<ServiceVersion, { namespace: string; open: Record<SoapVersion, string>; close: string }>()
  function preparedFor (version: ServiceVersion) {
    let p = prepared.get(version)
    if (!p) {
      const open = (v: SoapVersion) =>
        `<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="${envelopeNamespace(v)}"><soap:Body>`
      p = {
        namespace: namespaceOf(version, options.namespaceBase),
        open: { 1.1: open('1.1'), 1.2: open('1.2') },
        close: '</soap:Body></soap:Envelope>'
      }
      prepared.set(version, p)
    }
    return p
  }

  function checkActions (declared: Array<string | undefined>, expected: string, operation: Operation): void {
    for (const raw of declared) {
      if (raw === undefined || isQuoted(raw, expected)) continue
      const action = raw.trim().replace(/^"(.*)"$/, '$1')
      // An empty SOAPAction ("") means "the request URI": it names no operation and contradicts none.
      if (action !== '' && action !== expected) {
        throw SoapFault.client(
          'BAD_REQUEST',
          `The SOAP action "${action}" does not match the Body's operation ${operation.name} (expected "${expected}")`
        )
      }
    }
  }

  /** The operation a Body's element names, whose action the carrier's declared actions must not contradict. */
  function operationOf (version: ServiceVersion, namespace: string, element: XmlElement, actions: SoapRequest['actions']) {
    const operation = element.ns === namespace ? version.operations.get(element.local) : undefined
    if (!operation) {
      throw SoapFault.client(
        'OPERATION_NOT_FOUND',
        `${version.serviceName} ${version.id} has no operation {${element.ns}}${element.local}`
      )
    }
    checkActions(actions, soapActionOf(namespace, operation), operation)
    return operation
  }

  /**
   * The authenticated caller of a message and its operation's element (read from the message, checked
   * before any cryptography); a signed message's Body as it was signed, too. A message that
   * authenticates nobody is counted on the address.
   */
  async function authenticated (
    version: ServiceVersion,
    request: SoapRequest,
    namespace: string,
    admission: Admission,
    exchange: Exchange
  ) {
    try {
      const envelope = parseEnvelope(request.envelope, request.soapVersion, options.xmlLimits)
      const security = securityHeader(envelope.headers, request.soapVersion)
      const element = envelope.operation
      const operation = operationOf(version, namespace, element, request.actions)
      const message = { xml: request.envelope, root: envelope.root, body: envelope.body, limits: options.xmlLimits }
      const { caller, signed, signedBody } = await wsSecurity.authenticate(security, admission.checkAddress, message)
      exchange.signed = signed
      return { caller, operation, element, signedBody }
    } catch (err) {
      await admission.spendOnAddress()
      throw err
    }
  }

  /** A signed message runs what was signed: the operation and its arguments from the signed Body, not the message. */
  function signedOperation (version: ServiceVersion, namespace: string, body: XmlElement, actions: SoapRequest['actions']) {
    if (body.children.length !== 1) {
      throw SoapFault.client('BAD_REQUEST', `The signed Body must hold exactly one element (the operation); it holds ${body.children.length}`)
    }
    const element = body.children[0]!
    return { operation: operationOf(version, namespace, element, actions), element }
  }

  async function execute (
    version: ServiceVersion,
    request: SoapRequest,
    namespace: string,
    admission: Admission,
    exchange: Exchange
  ): Promise<string> {
    const authentic = await authenticated(version, request, namespace, admission, exchange)
    const { caller } = authentic
    await admission.spendRequest(caller)
    const { operation, element } = authentic.signedBody
      ? signedOperation(version, namespace, authentic.signedBody, request.actions)
      : authentic
    const args = readArgs(operation, element, namespace, caps)
    const cost = costOf(operation, args, version, pricing)
    admission.describe?.(operation.name, cost)
    await admission.spendCost(caller, cost)

    const deadline = Date.now() + timeoutMs
    const ctx = createDomainContext({ store, events, caps, cursorKey }, caller, deadline)
    const result = await withinDeadline(operation.run(ctx, args), timeoutMs, TIMED_OUT)
    if (result === TIMED_OUT) throw new AppError('TIMEOUT', Messages.queryTimeout)
    return `<${operation.name}Response xmlns="${escapeXml(namespace)}">${resultXml(result, operation.output, version.userFields)}</${operation.name}Response>`
  }

  /** Answers one SOAP request of `version`; faults are responses too. `onInternalError` sees unexpected errors. */
  async function handle (
    version: ServiceVersion,
    request: SoapRequest,
    admission: Admission,
    onInternalError: (err: unknown) => void = () => {}
  ): Promise<SoapResponse> {
    const p = preparedFor(version)
    const exchange: Exchange = { signed: false }
    let response: SoapResponse
    try {
      const body = await execute(version, request, p.namespace, admission, exchange)
      response = {
        status: 200,
        contentType: CONTENT_TYPE[request.soapVersion],
        body: p.open[request.soapVersion] + body + p.close
      }
    } catch (err) {
      const fault = SoapFault.from(err)
      if (fault.code === 'INTERNAL_SERVER_ERROR') onInternalError(err)
      response = faultResponse(fault, request.soapVersion, p.namespace)
    }
    // Signed only once the request's signature verified: a refusal before that is not signed, so
    // nobody makes the service spend a private-key operation, or sign text, for a forged message.
    if (!exchange.signed || !replySigner) return response
    try {
      return { ...response, body: replySigner.sign(response.body) }
    } catch (err) {
      onInternalError(err)
      return faultResponse(SoapFault.from(err), request.soapVersion, p.namespace)
    }
  }

  return { handle, namespaceOf: (version: ServiceVersion) => preparedFor(version).namespace }
}

export type SoapService = ReturnType<typeof createSoapService>
