// The hardened XML reader and the SOAP envelope on top of it.
// Hostile-XML rules, in order: any markup declaration (<!DOCTYPE, <!ENTITY, ...) is refused before
// parsing, so no entity is ever defined, let alone expanded; the text must be well-formed
// (fast-xml-parser's validator; the parser alone accepts unclosed tags); only the five predefined
// entities and character references are decoded, any other reference is malformed; values stay text
// (parseTagValue off: <id>007</id> is "007"). The size cap is Fastify's bodyLimit, applied before this.
// fast-xml-parser does not resolve namespaces, so the tree it returns is resolved here: every element
// and attribute carries its namespace URI and local name, and callers match on those, never on prefixes.
import { XMLParser, XMLValidator } from 'fast-xml-parser'
import { SoapFault } from './faults.ts'

export const NS = {
  soap11: 'http://schemas.xmlsoap.org/soap/envelope/',
  soap12: 'http://www.w3.org/2003/05/soap-envelope',
  xsi: 'http://www.w3.org/2001/XMLSchema-instance',
  xmlns: 'http://www.w3.org/2000/xmlns/',
  xml: 'http://www.w3.org/XML/1998/namespace'
} as const

export type SoapVersion = '1.1' | '1.2'

export interface XmlAttribute {
  ns: string
  local: string
  value: string
}

export interface XmlElement {
  /** Namespace URI; '' when the element is in no namespace. */
  ns: string
  local: string
  attributes: XmlAttribute[]
  children: XmlElement[]
  /** The element's character data (text and CDATA), entity references decoded. */
  text: string
}

export interface Envelope {
  version: SoapVersion
  headers: XmlElement[]
  /** The single child of the Body: the operation's wrapper element. */
  operation: XmlElement
}

const parser = new XMLParser({
  preserveOrder: true,
  ignoreAttributes: false,
  attributeNamePrefix: '',
  parseTagValue: false,
  parseAttributeValue: false,
  processEntities: false,
  htmlEntities: false,
  trimValues: false,
  ignoreDeclaration: true,
  ignorePiTags: true,
  commentPropName: false,
  cdataPropName: '#cdata'
})

// XML 1.0 forbids these characters anywhere in a document (the validator lets them through).
const FORBIDDEN_CHARS = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/
const PREDEFINED: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" }
const REFERENCE = /&([a-zA-Z][\w.-]*|#[0-9]+|#x[0-9a-fA-F]+);/g

function malformed (why: string): SoapFault {
  return SoapFault.client('BAD_REQUEST', `Malformed XML: ${why}`)
}

/** Decodes predefined entities and character references; any other '&' is a well-formedness error. */
function decode (raw: string): string {
  if (!raw.includes('&')) return raw
  const decoded = raw.replace(REFERENCE, (_match, ref: string) => {
    if (ref[0] !== '#') {
      const value = PREDEFINED[ref]
      if (value === undefined) throw malformed(`undefined entity &${ref};`)
      return value
    }
    const code = ref[1] === 'x' ? parseInt(ref.slice(2), 16) : parseInt(ref.slice(1), 10)
    if (code > 0x10FFFF || (code < 0x20 && code !== 0x9 && code !== 0xA && code !== 0xD) || (code >= 0xD800 && code <= 0xDFFF)) {
      throw malformed(`invalid character reference &${ref};`)
    }
    return String.fromCodePoint(code)
  })
  // A '&' left over was not part of a complete reference.
  if (raw.replace(REFERENCE, '').includes('&')) throw malformed('a "&" that does not start a reference')
  return decoded
}

type OrderedNode = Record<string, unknown> & { ':@'?: Record<string, string> }

function splitName (qname: string): [prefix: string, local: string] {
  const colon = qname.indexOf(':')
  return colon === -1 ? ['', qname] : [qname.slice(0, colon), qname.slice(colon + 1)]
}

function resolveElement (node: OrderedNode, name: string, inherited: Map<string, string>): XmlElement {
  const rawAttributes = node[':@'] ?? {}
  let scope = inherited
  for (const [qname, value] of Object.entries(rawAttributes)) {
    if (qname === 'xmlns' || qname.startsWith('xmlns:')) {
      if (scope === inherited) scope = new Map(inherited)
      scope.set(qname === 'xmlns' ? '' : qname.slice(6), decode(value))
    }
  }
  const [prefix, local] = splitName(name)
  const ns = scope.get(prefix)
  if (ns === undefined) throw malformed(`undeclared namespace prefix "${prefix}"`)

  const attributes: XmlAttribute[] = []
  for (const [qname, value] of Object.entries(rawAttributes)) {
    if (qname === 'xmlns' || qname.startsWith('xmlns:')) continue
    const [attrPrefix, attrLocal] = splitName(qname)
    // Unprefixed attributes are in no namespace (the default namespace does not apply to them).
    const attrNs = attrPrefix === '' ? '' : scope.get(attrPrefix)
    if (attrNs === undefined) throw malformed(`undeclared namespace prefix "${attrPrefix}"`)
    attributes.push({ ns: attrNs, local: attrLocal, value: decode(value) })
  }

  const children: XmlElement[] = []
  let text = ''
  for (const child of (node[name] as OrderedNode[])) {
    const childName = Object.keys(child).find((k) => k !== ':@')!
    if (childName === '#text') text += decode(child['#text'] as string)
    else if (childName === '#cdata') text += ((child['#cdata'] as Array<{ '#text': string }>)[0]?.['#text'] ?? '')
    else children.push(resolveElement(child, childName, scope))
  }
  return { ns, local, attributes, children, text }
}

const ROOT_SCOPE = new Map([['', ''], ['xml', NS.xml]])

/** Parses a complete XML document into its namespace-resolved root element; throws a Client fault when it is not acceptable. */
export function parseXml (xml: string): XmlElement {
  // Markup declarations are refused outright: no DTD, no entity definitions, nothing to expand.
  // (Comments "<!--" and CDATA "<![CDATA[" are the only "<!" constructs a SOAP message may hold.)
  if (/<!(?!--|\[CDATA\[)/.test(xml)) throw SoapFault.client('BAD_REQUEST', 'DOCTYPE and other markup declarations are not allowed')
  if (FORBIDDEN_CHARS.test(xml)) throw malformed('a character that XML does not allow')
  const valid = XMLValidator.validate(xml)
  if (valid !== true) throw malformed(`${valid.err.msg} (line ${valid.err.line}, column ${valid.err.col})`)
  const nodes = parser.parse(xml) as OrderedNode[]
  const roots = nodes.filter((n) => !('#text' in n))
  if (roots.length !== 1) throw malformed('a document must have exactly one root element')
  if (nodes.some((n) => '#text' in n && (n['#text'] as string).trim() !== '')) throw malformed('text outside the root element')
  const root = roots[0]!
  return resolveElement(root, Object.keys(root).find((k) => k !== ':@')!, ROOT_SCOPE)
}

export function attribute (element: XmlElement, ns: string, local: string): string | undefined {
  return element.attributes.find((a) => a.ns === ns && a.local === local)?.value
}

export function child (element: XmlElement, ns: string, local: string): XmlElement | undefined {
  return element.children.find((c) => c.ns === ns && c.local === local)
}

export function envelopeNamespace (version: SoapVersion): string {
  return version === '1.1' ? NS.soap11 : NS.soap12
}

/**
 * Reads a SOAP envelope of the version the Content-Type announced. An envelope of the other version (or
 * no envelope at all) is a VersionMismatch fault, as both SOAP specifications require.
 */
export function parseEnvelope (xml: string, version: SoapVersion): Envelope {
  const root = parseXml(xml)
  const envNs = envelopeNamespace(version)
  if (root.local !== 'Envelope' || (root.ns !== NS.soap11 && root.ns !== NS.soap12)) {
    throw new SoapFault('VersionMismatch', 'BAD_REQUEST', 'The root element is not a SOAP Envelope')
  }
  if (root.ns !== envNs) {
    throw new SoapFault('VersionMismatch', 'BAD_REQUEST', `A SOAP ${version === '1.1' ? '1.2' : '1.1'} envelope was sent with the Content-Type of SOAP ${version}`)
  }
  let header: XmlElement | undefined
  let body: XmlElement | undefined
  for (const part of root.children) {
    if (part.ns === envNs && part.local === 'Header' && !header && !body) header = part
    else if (part.ns === envNs && part.local === 'Body' && !body) body = part
    else throw SoapFault.client('BAD_REQUEST', `Unexpected element {${part.ns}}${part.local} in the Envelope: expected an optional Header and then a Body`)
  }
  if (!body) throw SoapFault.client('BAD_REQUEST', 'The Envelope has no Body')
  if (body.children.length !== 1) throw SoapFault.client('BAD_REQUEST', `The Body must hold exactly one element (the operation); it holds ${body.children.length}`)
  return { version, headers: header?.children ?? [], operation: body.children[0]! }
}
