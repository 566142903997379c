// Signed replies (SOAP_SIGNING_KEY, SOAP_SIGNING_CERT): the service signs its answer to a request whose
// X.509 signature verified, faults included, as WS-Security toolkits that sign expect (zeep verifies the
// signature of every reply; WCF's asymmetric binding and CXF's policies want one too). What is signed,
// as partners' toolkits check it: the Body and a wsu:Timestamp (Created now, Expires five minutes
// later), both named by wsu:Id, with exclusive C14N and RSA-SHA256 over SHA-256 digests; the service's
// certificate travels as a BinarySecurityToken the KeyInfo references. The whole reply is built by the
// service (no client text in its structure), so a DOM of it is small and safe to build.
import { createHash, createPrivateKey, randomUUID, sign as signRsa, X509Certificate } from 'node:crypto'
import { DOMParser, XMLSerializer } from '@xmldom/xmldom'
import { WSSE_NS } from './faults.ts'
import { EXC_C14N, canonical } from './canonical-xml.ts'
import { DS_NS } from './signature.ts'

const WSU_NS = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'
const XMLNS_NS = 'http://www.w3.org/2000/xmlns/'
const X509_V3 = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3'
const BASE64_BINARY = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary'
const RSA_SHA256 = 'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256'
const SHA256 = 'http://www.w3.org/2001/04/xmlenc#sha256'
/** How long a signed reply's Timestamp says it is fresh. */
export const REPLY_LIFETIME_MS = 5 * 60_000

export interface ReplySigner {
  /** A complete response envelope (SOAP 1.1 or 1.2, with or without a Header), signed. */
  sign (envelope: string): string
}

export interface ReplySigningOptions {
  keyPem: string
  certificatePem: string
  clock: () => number
}

export function createReplySigner (options: ReplySigningOptions): ReplySigner {
  const key = createPrivateKey(options.keyPem)
  const certificate = new X509Certificate(options.certificatePem).raw.toString('base64')

  return {
    sign (envelope) {
      const doc = new DOMParser().parseFromString(envelope, 'text/xml')
      const root = doc.documentElement!
      const soapNs = root.namespaceURI!
      const prefix = root.prefix ? `${root.prefix}:` : ''
      const make = (ns: string, name: string, attributes: Record<string, string> = {}, text?: string) => {
        const element = doc.createElementNS(ns, name)
        for (const [attribute, value] of Object.entries(attributes)) {
          if (attribute === 'wsu:Id') element.setAttributeNS(WSU_NS, attribute, value)
          else element.setAttribute(attribute, value)
        }
        if (text !== undefined) element.appendChild(doc.createTextNode(text))
        return element
      }
      const childNamed = (local: string) => Array.from(root.childNodes).find((n): n is Element =>
        n.nodeType === 1 && (n as Element).localName === local && (n as Element).namespaceURI === soapNs)
      const body = childNamed('Body')!
      let header = childNamed('Header')
      if (!header) header = root.insertBefore(make(soapNs, `${prefix}Header`), body) as Element
      root.setAttributeNS(XMLNS_NS, 'xmlns:wsu', WSU_NS)

      const id = randomUUID()
      body.setAttributeNS(WSU_NS, 'wsu:Id', `body-${id}`)
      const security = header.appendChild(make(WSSE_NS, 'wsse:Security')) as Element
      security.setAttributeNS(XMLNS_NS, 'xmlns:wsse', WSSE_NS)
      security.appendChild(make(WSSE_NS, 'wsse:BinarySecurityToken',
        { EncodingType: BASE64_BINARY, ValueType: X509_V3, 'wsu:Id': `x509-${id}` }, certificate))
      const now = options.clock()
      const timestamp = security.appendChild(make(WSU_NS, 'wsu:Timestamp', { 'wsu:Id': `ts-${id}` })) as Element
      timestamp.appendChild(make(WSU_NS, 'wsu:Created', {}, new Date(now).toISOString()))
      timestamp.appendChild(make(WSU_NS, 'wsu:Expires', {}, new Date(now + REPLY_LIFETIME_MS).toISOString()))

      const signature = security.appendChild(make(DS_NS, 'ds:Signature')) as Element
      signature.setAttributeNS(XMLNS_NS, 'xmlns:ds', DS_NS)
      const signedInfo = signature.appendChild(make(DS_NS, 'ds:SignedInfo')) as Element
      signedInfo.appendChild(make(DS_NS, 'ds:CanonicalizationMethod', { Algorithm: EXC_C14N }))
      signedInfo.appendChild(make(DS_NS, 'ds:SignatureMethod', { Algorithm: RSA_SHA256 }))
      for (const [target, uri] of [[body, `#body-${id}`], [timestamp, `#ts-${id}`]] as const) {
        const reference = signedInfo.appendChild(make(DS_NS, 'ds:Reference', { URI: uri })) as Element
        reference.appendChild(make(DS_NS, 'ds:Transforms'))
          .appendChild(make(DS_NS, 'ds:Transform', { Algorithm: EXC_C14N }))
        reference.appendChild(make(DS_NS, 'ds:DigestMethod', { Algorithm: SHA256 }))
        const digest = createHash('sha256').update(canonical(target, EXC_C14N, []), 'utf8').digest('base64')
        reference.appendChild(make(DS_NS, 'ds:DigestValue', {}, digest))
      }
      const value = signRsa('sha256', Buffer.from(canonical(signedInfo, EXC_C14N, []), 'utf8'), key)
      signature.appendChild(make(DS_NS, 'ds:SignatureValue', {}, value.toString('base64')))
      signature.appendChild(make(DS_NS, 'ds:KeyInfo'))
        .appendChild(make(WSSE_NS, 'wsse:SecurityTokenReference'))
        .appendChild(make(WSSE_NS, 'wsse:Reference', { URI: `#x509-${id}`, ValueType: X509_V3 }))
      return new XMLSerializer().serializeToString(doc)
    }
  }
}
