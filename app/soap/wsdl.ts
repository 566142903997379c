// The WSDL 1.1 of one service version, generated from its description in operations.ts: XSD types
// (document/literal wrapped: one request element <Op> and one response element <OpResponse> per
// operation, elementFormDefault qualified), messages, the portType (each operation documented with
// who may call it, from the domain's rules), SOAP 1.1 and SOAP 1.2 bindings requiring WS-Security
// (WS-SecurityPolicy: a UsernameToken, or an X.509 signature of Body and Timestamp), and the service at
// the given endpoint address. Built with xmlbuilder2.
import { create } from 'xmlbuilder2'
import { RESTRICTED_USER_FIELDS, describeRule } from '../core/domain/authorization.ts'
import { namespaceOf, soapActionOf, type Field, type Operation, type ServiceVersion } from './operations.ts'

const WSDL = 'http://schemas.xmlsoap.org/wsdl/'
const SOAP11 = 'http://schemas.xmlsoap.org/wsdl/soap/'
const SOAP12 = 'http://schemas.xmlsoap.org/wsdl/soap12/'
const XS = 'http://www.w3.org/2001/XMLSchema'
const HTTP_TRANSPORT = 'http://schemas.xmlsoap.org/soap/http'
// WS-Policy 1.5 and WS-SecurityPolicy 1.2: how the security requirement is told to toolkits.
const WSP = 'http://www.w3.org/ns/ws-policy'
const SP = 'http://docs.oasis-open.org/ws-sx/ws-securitypolicy/200702'
const WSU = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'
const SECURITY_POLICY = 'PartnerSecurityPolicy'

/**
 * xmlbuilder2's node builder, as its documented entry point returns it (the type itself is not exported
 * from the package root).
 */
type XMLBuilder = ReturnType<typeof create>

function typeName (field: Field): string {
  return field.type === 'User' ? 'tns:User' : `xs:${field.type}`
}

function sequence (parent: XMLBuilder, fields: Field[]): void {
  const seq = parent.ele(XS, 'xs:sequence')
  for (const field of fields) {
    const attrs: Record<string, string> = { name: field.name, type: typeName(field) }
    if (field.optional) attrs.minOccurs = '0'
    if (field.many) attrs.maxOccurs = 'unbounded'
    seq.ele(XS, 'xs:element').att(attrs)
  }
}

/** Who may call an operation, as its wsdl:documentation says (partners act with their user's role). */
export function callersOf (operation: Operation): string {
  return operation.write
    ? `Allowed callers: ${describeRule(operation.write)}. Any other partner gets a FORBIDDEN fault.`
    : `Allowed callers: every authenticated partner. The e-mail is returned only to ${RESTRICTED_USER_FIELDS.email.map((r) => r === 'SELF' ? 'the user themself' : `role ${r}`).join(' and ')}.`
}

/** The WSDL of `version` in the namespace under `namespaceBase`, with `address` as both ports' endpoint. */
export function buildWsdl (
  version: ServiceVersion, namespaceBase: string, address: string, signedReplies = false
): string {
  const ns = namespaceOf(version, namespaceBase)
  const name = version.serviceName
  const operations = [...version.operations.values()]

  const doc = create({ version: '1.0', encoding: 'utf-8' })
  const defs = doc.ele(WSDL, 'wsdl:definitions').att({
    'xmlns:wsdl': WSDL,
    'xmlns:soap': SOAP11,
    'xmlns:soap12': SOAP12,
    'xmlns:xs': XS,
    'xmlns:wsp': WSP,
    'xmlns:sp': SP,
    'xmlns:wsu': WSU,
    'xmlns:tns': ns,
    name,
    targetNamespace: ns
  })
  defs.ele(WSDL, 'wsdl:documentation').txt(`${name} ${version.id}. Authenticate with a WS-Security UsernameToken ` +
    '(PasswordText or PasswordDigest with Nonce and Created), or sign the Body and a Timestamp with a registered ' +
    'X.509 certificate (BinarySecurityToken, exclusive C14N, RSA-SHA256).' + (signedReplies
      ? ' Replies to signed requests are signed the same way by the service certificate (GET this path with ?cert).'
      : ''))

  const schema = defs.ele(WSDL, 'wsdl:types').ele(XS, 'xs:schema').att({ targetNamespace: ns, elementFormDefault: 'qualified' })
  sequence(schema.ele(XS, 'xs:complexType').att('name', 'User'), version.userFields)
  for (const op of operations) {
    sequence(schema.ele(XS, 'xs:element').att('name', op.name).ele(XS, 'xs:complexType'), op.input)
    sequence(schema.ele(XS, 'xs:element').att('name', `${op.name}Response`).ele(XS, 'xs:complexType'), op.output)
  }
  sequence(schema.ele(XS, 'xs:element').att('name', 'ServiceFault').ele(XS, 'xs:complexType'), [
    { name: 'code', type: 'string' },
    { name: 'message', type: 'string' }
  ])

  for (const op of operations) {
    defs.ele(WSDL, 'wsdl:message').att('name', `${op.name}Request`).ele(WSDL, 'wsdl:part').att({ name: 'parameters', element: `tns:${op.name}` })
    defs.ele(WSDL, 'wsdl:message').att('name', `${op.name}Response`).ele(WSDL, 'wsdl:part').att({ name: 'parameters', element: `tns:${op.name}Response` })
  }
  defs.ele(WSDL, 'wsdl:message').att('name', 'ServiceFault').ele(WSDL, 'wsdl:part').att({ name: 'fault', element: 'tns:ServiceFault' })

  // Every message carries either a UsernameToken (a supporting token, sent to the service each time) or
  // an X.509 signature by the partner's registered certificate over the Body and the Timestamp. With
  // signed replies the recipient token (the service's certificate) signs each reply's Body and Timestamp
  // and travels in it (AlwaysToInitiator); without, it is never sent. Nothing is encrypted.
  const alternatives = defs.ele(WSP, 'wsp:Policy').att(WSU, 'wsu:Id', SECURITY_POLICY).ele(WSP, 'wsp:ExactlyOne')
  alternatives.ele(WSP, 'wsp:All').ele(SP, 'sp:SupportingTokens').ele(WSP, 'wsp:Policy')
    .ele(SP, 'sp:UsernameToken').att(SP, 'sp:IncludeToken', `${SP}/IncludeToken/AlwaysToRecipient`)
    .ele(WSP, 'wsp:Policy').ele(SP, 'sp:WssUsernameToken10')
  const signed = alternatives.ele(WSP, 'wsp:All')
  const asymmetric = signed.ele(SP, 'sp:AsymmetricBinding').ele(WSP, 'wsp:Policy')
  asymmetric.ele(SP, 'sp:InitiatorToken').ele(WSP, 'wsp:Policy')
    .ele(SP, 'sp:X509Token').att(SP, 'sp:IncludeToken', `${SP}/IncludeToken/AlwaysToRecipient`)
    .ele(WSP, 'wsp:Policy').ele(SP, 'sp:WssX509V3Token10')
  asymmetric.ele(SP, 'sp:RecipientToken').ele(WSP, 'wsp:Policy')
    .ele(SP, 'sp:X509Token').att(SP, 'sp:IncludeToken', `${SP}/IncludeToken/${signedReplies ? 'AlwaysToInitiator' : 'Never'}`)
    .ele(WSP, 'wsp:Policy').ele(SP, 'sp:WssX509V3Token10')
  asymmetric.ele(SP, 'sp:AlgorithmSuite').ele(WSP, 'wsp:Policy').ele(SP, 'sp:Basic256Sha256')
  asymmetric.ele(SP, 'sp:Layout').ele(WSP, 'wsp:Policy').ele(SP, 'sp:Lax')
  asymmetric.ele(SP, 'sp:IncludeTimestamp')
  asymmetric.ele(SP, 'sp:OnlySignEntireHeadersAndBody')
  signed.ele(SP, 'sp:SignedParts').ele(SP, 'sp:Body')

  const portType = defs.ele(WSDL, 'wsdl:portType').att('name', `${name}PortType`)
  for (const op of operations) {
    const o = portType.ele(WSDL, 'wsdl:operation').att('name', op.name)
    o.ele(WSDL, 'wsdl:documentation').txt(callersOf(op))
    o.ele(WSDL, 'wsdl:input').att('message', `tns:${op.name}Request`)
    o.ele(WSDL, 'wsdl:output').att('message', `tns:${op.name}Response`)
    o.ele(WSDL, 'wsdl:fault').att({ name: 'ServiceFault', message: 'tns:ServiceFault' })
  }

  for (const [binding, bindingNs, prefix] of [[`${name}Soap`, SOAP11, 'soap'], [`${name}Soap12`, SOAP12, 'soap12']] as const) {
    const b = defs.ele(WSDL, 'wsdl:binding').att({ name: binding, type: `tns:${name}PortType` })
    b.ele(WSP, 'wsp:PolicyReference').att('URI', `#${SECURITY_POLICY}`)
    b.ele(bindingNs, `${prefix}:binding`).att({ style: 'document', transport: HTTP_TRANSPORT })
    for (const op of operations) {
      const o = b.ele(WSDL, 'wsdl:operation').att('name', op.name)
      o.ele(bindingNs, `${prefix}:operation`).att({ soapAction: soapActionOf(ns, op), style: 'document' })
      o.ele(WSDL, 'wsdl:input').ele(bindingNs, `${prefix}:body`).att('use', 'literal')
      o.ele(WSDL, 'wsdl:output').ele(bindingNs, `${prefix}:body`).att('use', 'literal')
      o.ele(WSDL, 'wsdl:fault').att('name', 'ServiceFault').ele(bindingNs, `${prefix}:fault`).att({ name: 'ServiceFault', use: 'literal' })
    }
  }

  const service = defs.ele(WSDL, 'wsdl:service').att('name', name)
  service.ele(WSDL, 'wsdl:port').att({ name: `${name}Soap`, binding: `tns:${name}Soap` }).ele(SOAP11, 'soap:address').att('location', address)
  service.ele(WSDL, 'wsdl:port').att({ name: `${name}Soap12`, binding: `tns:${name}Soap12` }).ele(SOAP12, 'soap12:address').att('location', address)

  return doc.end({ prettyPrint: true })
}
