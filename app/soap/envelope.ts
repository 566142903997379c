// The SOAP envelope: read with the hardened XML reader (xml.ts: no DOCTYPE, no entity expansion,
// well-formed, namespace-resolved, values kept as text, elements and attributes capped), then checked
// against the SOAP version the Content-Type announced. The size cap is Fastify's bodyLimit, applied before this.
import { SoapFault, type SoapVersion } from './faults.ts'
import { DEFAULT_XML_LIMITS, XmlError, parseXml as parseXmlText, type XmlElement, type XmlLimits } from './xml.ts'

export type { XmlAttribute, XmlElement, XmlLimits } from './xml.ts'

export const NS = {
  soap11: 'http://schemas.xmlsoap.org/soap/envelope/',
  soap12: 'http://www.w3.org/2003/05/soap-envelope',
  xsi: 'http://www.w3.org/2001/XMLSchema-instance'
} as const

export type { SoapVersion }

export interface Envelope {
  version: SoapVersion
  headers: XmlElement[]
  /** The single child of the Body: the operation's wrapper element. */
  operation: XmlElement
  /** The document's root (the Envelope) and its Body, for WS-Security signatures. */
  root: XmlElement
  body: XmlElement
}

/** Parses a complete XML document; a document we do not accept is a Client fault (BAD_REQUEST). */
export function parseXml (xml: string, limits: XmlLimits = DEFAULT_XML_LIMITS): XmlElement {
  try {
    return parseXmlText(xml, limits)
  } catch (err) {
    if (!(err instanceof XmlError)) throw err
    throw SoapFault.client('BAD_REQUEST', err.policy ? err.message : `Malformed XML: ${err.message}`)
  }
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
export function parseEnvelope (xml: string, version: SoapVersion, limits: XmlLimits = DEFAULT_XML_LIMITS): Envelope {
  const root = parseXml(xml, limits)
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
  return { version, headers: header?.children ?? [], operation: body.children[0]!, root, body }
}
