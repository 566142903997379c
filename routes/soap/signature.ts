// WS-Security X.509 signatures (X.509 Token Profile 1.0/1.1 with XML Signature): a partner whose
// registered certificate signed the message's Body and Timestamp is authenticated as that partner.
// The cryptography (exclusive C14N, digests, RSA) is xml-crypto's, the library node-soap signs with;
// this file decides what may be verified at all, and that what was verified is what runs:
// - Before any canonicalisation, on the tree our hardened reader built (routes/soap/xml.ts, with its
//   size, depth, element and attribute caps): one ds:Signature in the whole document, directly in our
//   wsse:Security header; at most MAX_REFERENCES References, MAX_TRANSFORMS Transforms each, and
//   MAX_TOKENS BinarySecurityTokens, so the work of a signed request is bounded however large its header.
// - Algorithms from a short list: exclusive C14N (with or without comments) for SignedInfo and each
//   Reference, enveloped-signature, RSA-SHA256 with SHA-256 digests; RSA-SHA1 and SHA-1 digests only
//   when WSSE_ALLOW_SHA1 is set (legacy partners). No HMAC, no XSLT/XPath or other transforms.
// - Signature wrapping: every Id (Id/ID/id in any namespace, the attributes xml-crypto resolves
//   references by) must be unique in the document, and each Reference a same-document "#id". The
//   Body that is dispatched (the Envelope's own Body) and the Timestamp of our Security header must
//   carry an Id that a Reference names: an Id names one element only, so the element the signature
//   covers is, by identity, the one the service runs. A signed Body moved to a header or a wrapper
//   leaves the dispatched Body unsigned (refused); the same Id on both is a duplicate (refused).
// - The key: the certificate comes from a BinarySecurityToken of our header (referenced by the
//   KeyInfo's SecurityTokenReference), or is named by its SHA-1 thumbprint (a KeyIdentifier); it must
//   be registered to a partner and valid now. The signature is verified with the registered
//   certificate, never with a key the message supplies.
import { createHash } from 'node:crypto'
import { DOMParser } from '@xmldom/xmldom'
import { SignedXml } from 'xml-crypto'
import { findCertificatePartner, usableCertificate, type CertificatePartner } from '../../app/domain/partners.ts'
import type { Store } from '../../app/store/types.ts'
import { attribute, child, type XmlElement } from './envelope.ts'
import { SoapFault, WSSE_NS } from './faults.ts'

export const DS_NS = 'http://www.w3.org/2000/09/xmldsig#'
const X509_V3 = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3'
const THUMBPRINT_SHA1 = 'http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#ThumbprintSHA1'
const BASE64_BINARY = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary'

const EXC_C14N = 'http://www.w3.org/2001/10/xml-exc-c14n#'
const EXC_C14N_COMMENTS = 'http://www.w3.org/2001/10/xml-exc-c14n#WithComments'
const ENVELOPED = 'http://www.w3.org/2000/09/xmldsig#enveloped-signature'
const RSA_SHA256 = 'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256'
const RSA_SHA1 = 'http://www.w3.org/2000/09/xmldsig#rsa-sha1'
const SHA256 = 'http://www.w3.org/2001/04/xmlenc#sha256'
const SHA1 = 'http://www.w3.org/2000/09/xmldsig#sha1'

/** One signature per message; References: Body, Timestamp and a few more (addressing headers, the token). */
export const MAX_SIGNATURES = 1
export const MAX_REFERENCES = 8
export const MAX_TRANSFORMS = 2
export const MAX_TOKENS = 2

const CANONICALIZATIONS = new Set([EXC_C14N, EXC_C14N_COMMENTS])
const TRANSFORMS = new Set([EXC_C14N, EXC_C14N_COMMENTS, ENVELOPED])
// The attributes xml-crypto resolves a "#id" Reference by (its default idAttributes).
const ID_ATTRIBUTES = new Set(['Id', 'ID', 'id'])

export interface SignatureCheckOptions {
  store: Store
  /** Accept RSA-SHA1 signatures and SHA-1 digests (WSSE_ALLOW_SHA1). */
  allowSha1: boolean
}

/** What the carrier parsed: the document's text and, from the same text, our reader's tree. */
export interface SignedMessage {
  xml: string
  root: XmlElement
  /** The Envelope's Body: its single child is the operation the service dispatches. */
  body: XmlElement
}

export interface VerifiedSignature {
  partner: CertificatePartner
  /** SHA-256 of the SignatureValue's bytes (hex): the message's replay key. */
  replayKey: string
}

const invalid = (message: string) => SoapFault.invalidSecurity(message)
const failedCheck = (message: string) =>
  new SoapFault('Client', 'UNAUTHENTICATED', message, { wsseCode: 'FailedCheck' })

/** Every ds:Signature and every Id value of the document, in one walk (the tree is capped in elements). */
function survey (root: XmlElement) {
  const signatures: XmlElement[] = []
  const ids = new Map<string, XmlElement>()
  const stack = [root]
  while (stack.length > 0) {
    const element = stack.pop()!
    if (element.ns === DS_NS && element.local === 'Signature') signatures.push(element)
    for (const a of element.attributes) {
      if (!ID_ATTRIBUTES.has(a.local)) continue
      if (ids.has(a.value)) throw invalid(`The Id "${a.value}" appears more than once in the message`)
      ids.set(a.value, element)
    }
    for (const c of element.children) stack.push(c)
  }
  return { signatures, ids }
}

function idOf (element: XmlElement): string | undefined {
  return element.attributes.find((a) => ID_ATTRIBUTES.has(a.local))?.value
}

function only (element: XmlElement, ns: string, local: string, where: string): XmlElement {
  const found = element.children.filter((c) => c.ns === ns && c.local === local)
  if (found.length !== 1) throw invalid(`${where} must hold exactly one ${local}`)
  return found[0]!
}

function algorithmOf (element: XmlElement, allowed: Set<string>, what: string): string {
  const algorithm = attribute(element, '', 'Algorithm') ?? ''
  if (!allowed.has(algorithm)) throw invalid(`${what} ${algorithm || '(none)'} is not accepted`)
  return algorithm
}

/** The certificate of the BinarySecurityToken the KeyInfo's SecurityTokenReference names. */
/**
 * The signing certificate the KeyInfo's SecurityTokenReference names: a BinarySecurityToken of our
 * header (wsse:Reference to its Id), or a registered certificate by its SHA-1 thumbprint (KeyIdentifier).
 */
function signingKey (signature: XmlElement, security: XmlElement, ids: Map<string, XmlElement>, now: number) {
  const tokens = security.children.filter((c) => c.ns === WSSE_NS && c.local === 'BinarySecurityToken')
  if (tokens.length > MAX_TOKENS) throw invalid(`At most ${MAX_TOKENS} BinarySecurityTokens are accepted`)
  const keyInfo = child(signature, DS_NS, 'KeyInfo')
  const tokenReference = keyInfo && child(keyInfo, WSSE_NS, 'SecurityTokenReference')
  const identifier = tokenReference && child(tokenReference, WSSE_NS, 'KeyIdentifier')
  if (identifier && attribute(identifier, '', 'ValueType') === THUMBPRINT_SHA1) {
    const thumbprint = Buffer.from(identifier.text.trim(), 'base64')
    if (thumbprint.length !== 20) throw invalid('A ThumbprintSHA1 key identifier is 20 bytes in Base64')
    return { thumbprint: thumbprint.toString('hex') }
  }
  const reference = tokenReference && child(tokenReference, WSSE_NS, 'Reference')
  const uri = reference && attribute(reference, '', 'URI')
  const token = uri?.startsWith('#') ? ids.get(uri.slice(1)) : undefined
  if (!token || !tokens.includes(token)) {
    throw invalid('The KeyInfo must name a BinarySecurityToken of the Security header or a ThumbprintSHA1 ' +
      '(SecurityTokenReference)')
  }
  const encoding = attribute(token, '', 'EncodingType') ?? BASE64_BINARY
  if (attribute(token, '', 'ValueType') !== X509_V3 || encoding !== BASE64_BINARY) {
    throw invalid('The BinarySecurityToken must be an X509v3 certificate in Base64Binary')
  }
  try {
    return usableCertificate(Buffer.from(token.text.replace(/\s+/g, ''), 'base64'), now)
  } catch (err) {
    throw SoapFault.failedAuthentication(`The signing certificate is not usable: ${(err as Error).message}`)
  }
}

/** A SignedXml that knows only the allowed algorithms and verifies with the registered certificate only. */
function verifier (pem: string, allowSha1: boolean): SignedXml {
  const sig = new SignedXml({ publicCert: pem, getCertFromKeyInfo: () => null })
  const keep = <T>(table: Record<string, T>, uris: string[]) =>
    Object.fromEntries(Object.entries(table).filter(([uri]) => uris.includes(uri))) as typeof table
  sig.SignatureAlgorithms = keep(sig.SignatureAlgorithms, allowSha1 ? [RSA_SHA256, RSA_SHA1] : [RSA_SHA256])
  sig.HashAlgorithms = keep(sig.HashAlgorithms, allowSha1 ? [SHA256, SHA1] : [SHA256])
  sig.CanonicalizationAlgorithms = keep(sig.CanonicalizationAlgorithms, [...TRANSFORMS])
  return sig
}

/** A DOM of the same text for xml-crypto; the reader accepted it already, so any complaint is a refusal. */
function domOf (xml: string): Document {
  const fail = (message: string) => { throw invalid(`The signed message could not be read: ${message}`) }
  const parser = new DOMParser({ errorHandler: { warning: () => {}, error: fail, fatalError: fail } })
  return parser.parseFromString(xml, 'text/xml')
}

export function createSignatureCheck (options: SignatureCheckOptions) {
  const signatureMethods = new Set(options.allowSha1 ? [RSA_SHA256, RSA_SHA1] : [RSA_SHA256])
  const digestMethods = new Set(options.allowSha1 ? [SHA256, SHA1] : [SHA256])

  /**
   * Verifies the signature of a message whose Security header holds a ds:Signature; a WS-Security fault
   * otherwise. `timestamp` is the header's wsu:Timestamp (its freshness is checked by the caller).
   * `beforeCrypto` runs before the costly part (canonicalisation, RSA).
   */
  async function verify (message: SignedMessage, security: XmlElement, timestamp: XmlElement | undefined, now: number,
    beforeCrypto: () => Promise<void>): Promise<VerifiedSignature> {
    const { signatures, ids } = survey(message.root)
    const signature = child(security, DS_NS, 'Signature')
    if (signatures.length > MAX_SIGNATURES || !signature || signatures[0] !== signature) {
      throw invalid('A signed message carries exactly one ds:Signature, in its wsse:Security header')
    }
    const signedInfo = only(signature, DS_NS, 'SignedInfo', 'The Signature')
    const canonicalization = only(signedInfo, DS_NS, 'CanonicalizationMethod', 'SignedInfo')
    algorithmOf(canonicalization, CANONICALIZATIONS, 'The canonicalization')
    algorithmOf(only(signedInfo, DS_NS, 'SignatureMethod', 'SignedInfo'), signatureMethods, 'The signature method')
    const references = signedInfo.children.filter((c) => c.ns === DS_NS && c.local === 'Reference')
    if (references.length === 0 || references.length > MAX_REFERENCES) {
      throw invalid(`A signature holds 1 to ${MAX_REFERENCES} References`)
    }
    const signed = new Set<XmlElement>()
    for (const reference of references) {
      const uri = attribute(reference, '', 'URI') ?? ''
      const target = uri.startsWith('#') ? ids.get(uri.slice(1)) : undefined
      if (!target) throw invalid(`A Reference must name an element of the message by its Id ("#id"), not "${uri}"`)
      const transforms = child(reference, DS_NS, 'Transforms')?.children ?? []
      if (transforms.length > MAX_TRANSFORMS) throw invalid(`At most ${MAX_TRANSFORMS} Transforms per Reference`)
      for (const transform of transforms) algorithmOf(transform, TRANSFORMS, 'The transform')
      // Without an exclusive C14N transform xml-crypto would canonicalise inclusively: not on our list.
      if (!transforms.some((t) => CANONICALIZATIONS.has(attribute(t, '', 'Algorithm') ?? ''))) {
        throw invalid('Each Reference must be canonicalised with exclusive C14N')
      }
      algorithmOf(only(reference, DS_NS, 'DigestMethod', 'A Reference'), digestMethods, 'The digest method')
      signed.add(target)
    }
    // The dispatched Body and our Timestamp, by identity: an Id names one element in this document.
    const bodyId = idOf(message.body)
    if (bodyId === undefined || ids.get(bodyId) !== message.body || !signed.has(message.body)) {
      throw invalid('The signature does not cover the message\'s Body')
    }
    if (!timestamp || !signed.has(timestamp)) {
      throw invalid('A signed message needs a wsu:Timestamp the signature covers')
    }

    const certificate = signingKey(signature, security, ids, now)
    const partner = await findCertificatePartner(options.store, certificate, now)
    if (!partner) throw SoapFault.failedAuthentication('The signing certificate is not registered to any partner')

    await beforeCrypto()
    const doc = domOf(message.xml)
    // The same text parsed by xmldom: its Body must be the one our reader dispatches (same Id), so
    // xml-crypto's references land on the elements checked above.
    const domBody = Array.from(doc.documentElement?.childNodes ?? []).find((n): n is Element =>
      n.nodeType === 1 && (n as Element).localName === 'Body' && (n as Element).namespaceURI === message.root.ns)
    const domBodyIds = Array.from(domBody?.attributes ?? []).filter((a) => ID_ATTRIBUTES.has(a.localName ?? a.name))
    if (domBodyIds.length !== 1 || domBodyIds[0]!.value !== bodyId) {
      throw invalid('The signed message could not be read consistently')
    }
    const sig = verifier(partner.certificate.toString(), options.allowSha1)
    const found = sig.findSignatures(doc)
    if (found.length !== 1) throw invalid('A signed message carries exactly one ds:Signature')
    let valid = false
    try {
      sig.loadSignature(found[0]!)
      valid = sig.checkSignature(message.xml)
    } catch {
      valid = false
    }
    if (!valid) throw failedCheck('The signature or a digest does not match the message')
    const value = only(signature, DS_NS, 'SignatureValue', 'The Signature').text.replace(/\s+/g, '')
    return { partner, replayKey: createHash('sha256').update(Buffer.from(value, 'base64')).digest('hex') }
  }

  return { verify }
}

export type SignatureCheck = ReturnType<typeof createSignatureCheck>
