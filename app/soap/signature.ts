// WS-Security X.509 signatures (X.509 Token Profile 1.0/1.1 with XML Signature): a partner whose
// registered certificate signed the message's Body and Timestamp is authenticated as that partner.
// Canonicalisation is xml-crypto's exclusive C14N (the library node-soap signs with), digests and RSA
// are node:crypto's; this file decides what may be verified at all, in which order, and that what was
// verified is what runs:
// - Cheap refusals first, on the tree our hardened reader built (app/soap/xml.ts): a signed message
//   is at most MAX_SIGNED_BYTES and MAX_SIGNED_NODES (elements + attributes); one ds:Signature in the
//   whole document, directly in our wsse:Security header; at most MAX_REFERENCES References,
//   MAX_TRANSFORMS Transforms each, MAX_TOKENS BinarySecurityTokens.
// - The Signature's shape is the XML Signature schema's, narrowed to what we verify: Signature holds
//   SignedInfo, SignatureValue and KeyInfo (no Object); SignedInfo holds CanonicalizationMethod,
//   SignatureMethod and References, each Reference Transforms, DigestMethod and DigestValue, in that
//   order; only ec:InclusiveNamespaces inside a c14n method; KeyInfo one wsse:SecurityTokenReference.
//   Any other element anywhere inside, in any namespace, is refused: a second, foreign "SignatureValue"
//   or "Reference" can never be what a verifier reads in place of ours.
// - Algorithms from a short list: exclusive C14N (with or without comments) for SignedInfo and each
//   Reference, enveloped-signature, RSA-SHA256 with SHA-256 digests; RSA-SHA1 and SHA-1 digests only
//   when WSSE_ALLOW_SHA1 is set (legacy partners). No HMAC, no XSLT/XPath or other transforms.
// - Signature wrapping: every Id (Id/ID/id in any namespace) must be unique in the document, and each
//   Reference a same-document "#id", resolved here on our tree. The Body that is dispatched (the
//   Envelope's own Body) and the Timestamp of our Security header must be elements a Reference names:
//   an Id names one element only, so the element the signature covers is, by identity, the one the
//   service runs. A signed Body moved to a header or a wrapper leaves the dispatched Body unsigned.
// - The key: a BinarySecurityToken of our header, a SHA-1 thumbprint (KeyIdentifier), or an X509Data
//   (the certificate itself and/or its issuer and serial number); whichever, the certificate must be
//   registered to a partner and valid now, and the signature is verified with the registered
//   certificate, never with a key the message supplies.
// - Cryptography in the order that makes a forgery cheap to refuse: the SignatureValue is verified
//   first, over the canonical SignedInfo alone (one small canonicalisation, one RSA operation), so a
//   message signed with someone else's key costs less than a good one. The canonicalisation works on
//   xmldom's reading of the same text: SignedInfo must read alike in both, down to its last element (so
//   the References read from our tree are the signed ones), and each signed element is taken at the same
//   place as in our tree and must read alike there (names, attributes, Ids). Then each Reference's
//   digest, over the canonical XML of its element. That canonical XML, what was signed, is all the
//   service acts on: the signed references must hold the Body (of the request's SOAP version) and a
//   wsu:Timestamp, once each; both are read again by our hardened reader from their canonical text, and
//   the operation, its arguments and the Timestamp's freshness come from them, never from the message's
//   own text (xmldom reads U+2028 in text as a line feed: what it canonicalised, not what we read, ran).
//   A throw anywhere on the way is a refusal and leaves nothing read. (xml-crypto's own checkSignature
//   and getSignedReferences() give the same output, measured 7 times dearer: its XPath lookups.)
// - The replay key is the SHA-256 of the verifying certificate's fingerprint and the signed references
//   (each one's SHA-256, in order): the same content signed with the same key is the same message,
//   however its signature is spelled.
import { X509Certificate, createHash, timingSafeEqual, verify as verifyRsa } from 'node:crypto'
import {
  findCertificatePartner, usableCertificate, type CertificateName, type CertificatePartner
} from '../core/domain/partners.ts'
import { certificateIssuerSerial, issuerSerialKey, type Store } from '../core/store/types.ts'
import { EXC_C14N, EXC_C14N_COMMENTS, canonical, domElementOf, domOf } from './canonical-xml.ts'
import { attribute, child, parseXml, type XmlElement, type XmlLimits } from './envelope.ts'
import { SoapFault, WSSE_NS } from './faults.ts'

export const DS_NS = 'http://www.w3.org/2000/09/xmldsig#'
const WSU_NS = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'
const EC_NS = 'http://www.w3.org/2001/10/xml-exc-c14n#'
const X509_V3 = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3'
const THUMBPRINT_SHA1 = 'http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#ThumbprintSHA1'
const BASE64_BINARY = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary'

const ENVELOPED = 'http://www.w3.org/2000/09/xmldsig#enveloped-signature'
const RSA_SHA256 = 'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256'
const RSA_SHA1 = 'http://www.w3.org/2000/09/xmldsig#rsa-sha1'
const SHA256 = 'http://www.w3.org/2001/04/xmlenc#sha256'
const SHA1 = 'http://www.w3.org/2000/09/xmldsig#sha1'
/** node:crypto's names of the accepted signature and digest methods. */
const HASH_OF: Record<string, string> = { [RSA_SHA256]: 'sha256', [RSA_SHA1]: 'sha1', [SHA256]: 'sha256', [SHA1]: 'sha1' }

/** One signature per message; References: Body, Timestamp and a few more (addressing headers, the token). */
export const MAX_SIGNATURES = 1
export const MAX_REFERENCES = 8
export const MAX_TRANSFORMS = 2
export const MAX_TOKENS = 2
/**
 * A signed message's size and nodes (elements + attributes, namespace declarations aside). A signed
 * call of this service is a few kilobytes and under a hundred nodes (node-soap, zeep, WCF with
 * addressing headers); the caps leave room for ten times that, and bound the canonicalisation a valid
 * signature may ask for.
 */
export const MAX_SIGNED_BYTES = 64 * 1024
export const MAX_SIGNED_NODES = 2000

const CANONICALIZATIONS = new Set([EXC_C14N, EXC_C14N_COMMENTS])
const TRANSFORMS = new Set([EXC_C14N, EXC_C14N_COMMENTS, ENVELOPED])
// The attributes a "#id" Reference names an element by (xml-crypto's idAttributes, zeep's wsu:Id).
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
  /** The Envelope's Body (as our reader read the message): it must be the element a Reference names. */
  body: XmlElement
  /** The reader's limits, which the signed references are read under too. */
  limits: XmlLimits
}

export interface VerifiedSignature {
  partner: CertificatePartner
  /** SHA-256 over the certificate's fingerprint and the signed references (hex): the message's replay key. */
  replayKey: string
  /** The Body as it was signed (its signed reference, read by our reader): the operation runs from it. */
  body: XmlElement
  /** The wsu:Timestamp as it was signed: its freshness is judged on it. */
  timestamp: XmlElement
}

const invalid = (message: string) => SoapFault.invalidSecurity(message)
const failedCheck = (message: string) =>
  new SoapFault('Client', 'UNAUTHENTICATED', message, { wsseCode: 'FailedCheck' })

/** Every ds:Signature, every Id value and each element's parent, in one walk; refuses a message over the caps. */
function survey (root: XmlElement) {
  const signatures: XmlElement[] = []
  const ids = new Map<string, XmlElement>()
  const parents = new Map<XmlElement, XmlElement>()
  let nodes = 0
  const stack = [root]
  while (stack.length > 0) {
    const element = stack.pop()!
    nodes += 1 + element.attributes.length
    if (nodes > MAX_SIGNED_NODES) throw invalid(`A signed message has at most ${MAX_SIGNED_NODES} elements and attributes`)
    if (element.ns === DS_NS && element.local === 'Signature') signatures.push(element)
    for (const a of element.attributes) {
      if (!ID_ATTRIBUTES.has(a.local)) continue
      if (ids.has(a.value)) throw invalid(`The Id "${a.value}" appears more than once in the message`)
      ids.set(a.value, element)
    }
    for (const c of element.children) {
      parents.set(c, element)
      stack.push(c)
    }
  }
  return { signatures, ids, parents }
}

function idOf (element: XmlElement): string | undefined {
  return element.attributes.find((a) => ID_ATTRIBUTES.has(a.local))?.value
}

/** One child slot of a schema sequence: namespace, local name, least and most occurrences. */
type Slot = readonly [ns: string, local: string, min: number, max: number]

/**
 * The children of `element`, matched in order against a schema sequence; anything the sequence does not
 * allow there (an unknown or foreign element, one out of order or too often) is refused, and so is text
 * in an element that holds only elements. A leaf is `shape(element, [], ...)` with its text its value.
 */
function shape (element: XmlElement, slots: readonly Slot[], where: string, leaf = false): XmlElement[][] {
  if (!leaf && element.text.trim() !== '') throw invalid(`${where} holds text where the schema allows none`)
  const groups: XmlElement[][] = slots.map(() => [])
  let slot = 0
  for (const c of element.children) {
    while (slot < slots.length && (slots[slot]![0] !== c.ns || slots[slot]![1] !== c.local)) {
      if (groups[slot]!.length < slots[slot]![2]) break
      slot++
    }
    const expected = slots[slot]
    if (!expected || expected[0] !== c.ns || expected[1] !== c.local) {
      throw invalid(`${where} may not hold {${c.ns}}${c.local} there`)
    }
    if (groups[slot]!.length >= expected[3]) throw invalid(`${where} holds at most ${expected[3]} ${c.local}`)
    groups[slot]!.push(c)
  }
  slots.forEach(([, local, min], i) => {
    if (groups[i]!.length < min) throw invalid(`${where} must hold ${local}`)
  })
  return groups
}

function algorithmOf (element: XmlElement, allowed: Set<string>, what: string): string {
  const algorithm = attribute(element, '', 'Algorithm') ?? ''
  if (!allowed.has(algorithm)) throw invalid(`${what} ${algorithm || '(none)'} is not accepted`)
  return algorithm
}

/** The InclusiveNamespaces prefix list of an exclusive C14N method or transform (its only allowed child). */
function inclusivePrefixes (method: XmlElement, where: string): string[] {
  const [inclusive] = shape(method, [[EC_NS, 'InclusiveNamespaces', 0, 1]], where)
  if (inclusive!.length === 0) return []
  shape(inclusive![0]!, [], 'InclusiveNamespaces')
  return (attribute(inclusive![0]!, '', 'PrefixList') ?? '').split(/\s+/).filter((p) => p !== '')
}

/** Canonical Base64 (whitespace aside) decoded; anything else is refused. */
function base64Value (element: XmlElement, what: string): Buffer {
  const text = element.text.replace(/\s+/g, '')
  const bytes = Buffer.from(text, 'base64')
  if (text === '' || bytes.toString('base64') !== text) throw invalid(`${what} must be Base64`)
  return bytes
}

interface Reference {
  uri: string
  /** The element of our tree its "#id" names. */
  target: XmlElement
  prefixes: string[]
  hash: string
  digest: Buffer
}

/** Reads SignedInfo (its shape, algorithms and References) from our tree. */
function readSignedInfo (signedInfo: XmlElement, ids: Map<string, XmlElement>, signatureMethods: Set<string>,
  digestMethods: Set<string>) {
  const [canonicalizations, signatureMethod, referenceElements] = shape(signedInfo, [
    [DS_NS, 'CanonicalizationMethod', 1, 1], [DS_NS, 'SignatureMethod', 1, 1], [DS_NS, 'Reference', 1, MAX_REFERENCES]
  ], 'SignedInfo')
  const canonicalization = canonicalizations![0]!
  const c14n = algorithmOf(canonicalization, CANONICALIZATIONS, 'The canonicalization')
  const prefixes = inclusivePrefixes(canonicalization, 'CanonicalizationMethod')
  shape(signatureMethod![0]!, [], 'SignatureMethod')
  const method = algorithmOf(signatureMethod![0]!, signatureMethods, 'The signature method')
  const references: Reference[] = referenceElements!.map((reference) => {
    const uri = attribute(reference, '', 'URI') ?? ''
    const target = uri.startsWith('#') ? ids.get(uri.slice(1)) : undefined
    if (!target) throw invalid(`A Reference must name an element of the message by its Id ("#id"), not "${uri}"`)
    const [transformsElement, digestMethod, digestValue] = shape(reference, [
      [DS_NS, 'Transforms', 0, 1], [DS_NS, 'DigestMethod', 1, 1], [DS_NS, 'DigestValue', 1, 1]
    ], 'A Reference')
    const transforms = transformsElement!.length === 0
      ? []
      : shape(transformsElement![0]!, [[DS_NS, 'Transform', 1, MAX_TRANSFORMS]], 'Transforms')[0]!
    // An optional enveloped-signature first (a no-op: no signed element may hold the Signature), then
    // exclusive C14N; without it the digest would be of inclusive C14N, which is not on the list.
    const algorithms = transforms.map((t) => algorithmOf(t, TRANSFORMS, 'The transform'))
    const last = algorithms.length - 1
    const canonicalised = last >= 0 && CANONICALIZATIONS.has(algorithms[last]!)
    if (!canonicalised || algorithms.slice(0, last).some((a) => a !== ENVELOPED)) {
      throw invalid('Each Reference must be canonicalised with exclusive C14N (after an optional enveloped-signature)')
    }
    for (const enveloped of transforms.slice(0, last)) shape(enveloped, [], 'The enveloped-signature Transform')
    shape(digestMethod![0]!, [], 'DigestMethod')
    const hash = algorithmOf(digestMethod![0]!, digestMethods, 'The digest method')
    shape(digestValue![0]!, [], 'DigestValue', true)
    return {
      uri,
      target,
      prefixes: inclusivePrefixes(transforms[last]!, 'Transform'),
      hash: HASH_OF[hash]!,
      digest: base64Value(digestValue![0]!, 'A DigestValue')
    }
  })
  return { c14n, prefixes, hash: HASH_OF[method]!, references }
}

/**
 * The signing certificate the KeyInfo's SecurityTokenReference names: a BinarySecurityToken of our
 * header (wsse:Reference to its Id), a registered certificate by its SHA-1 thumbprint (KeyIdentifier),
 * or a ds:X509Data holding the certificate (and, optionally, its issuer and serial number, which must
 * then name that same certificate). Whichever, it only selects a registered certificate: the caller
 * looks it up, and the signature is verified with the registered one.
 */
function signingKey (keyInfo: XmlElement, security: XmlElement, ids: Map<string, XmlElement>, now: number) {
  const tokens = security.children.filter((c) => c.ns === WSSE_NS && c.local === 'BinarySecurityToken')
  if (tokens.length > MAX_TOKENS) throw invalid(`At most ${MAX_TOKENS} BinarySecurityTokens are accepted`)
  const [tokenReferences] = shape(keyInfo, [[WSSE_NS, 'SecurityTokenReference', 1, 1]], 'KeyInfo')
  const tokenReference = tokenReferences![0]!
  if (tokenReference.children.length !== 1) throw invalid(KEY_REFERENCES)
  const [reference, identifier, x509Data] = shape(tokenReference, [
    [WSSE_NS, 'Reference', 0, 1], [WSSE_NS, 'KeyIdentifier', 0, 1], [DS_NS, 'X509Data', 0, 1]
  ], 'SecurityTokenReference').map((group) => group[0])
  if (identifier) {
    shape(identifier, [], 'KeyIdentifier', true)
    if (attribute(identifier, '', 'ValueType') !== THUMBPRINT_SHA1) throw invalid('A KeyIdentifier must be a ThumbprintSHA1')
    const thumbprint = base64Value(identifier, 'A ThumbprintSHA1 key identifier')
    if (thumbprint.length !== 20) throw invalid('A ThumbprintSHA1 key identifier is 20 bytes in Base64')
    return { thumbprint: thumbprint.toString('hex') }
  }
  if (x509Data) return x509DataName(x509Data, now)
  shape(reference!, [], 'The SecurityTokenReference\'s Reference')
  const uri = attribute(reference!, '', 'URI')
  const token = uri?.startsWith('#') ? ids.get(uri.slice(1)) : undefined
  if (!token || !tokens.includes(token)) throw invalid(KEY_REFERENCES)
  const encoding = attribute(token, '', 'EncodingType') ?? BASE64_BINARY
  if (attribute(token, '', 'ValueType') !== X509_V3 || encoding !== BASE64_BINARY) {
    throw invalid('The BinarySecurityToken must be an X509v3 certificate in Base64Binary')
  }
  shape(token, [], 'The BinarySecurityToken', true)
  return certificateOf(base64Value(token, 'The BinarySecurityToken'), now)
}

const KEY_REFERENCES = 'The KeyInfo\'s SecurityTokenReference must hold one wsse:Reference to a BinarySecurityToken ' +
  'of the Security header, one ThumbprintSHA1 KeyIdentifier, or one ds:X509Data'

/**
 * What a ds:X509Data names (zeep's Signature; WSS4J's IssuerSerial): its X509Certificate, with an
 * X509IssuerSerial that must then name that same certificate; or, without a certificate, the
 * certificate of that issuer and serial number among the registered ones.
 */
function x509DataName (x509Data: XmlElement, now: number): X509Certificate | CertificateName {
  if (x509Data.text.trim() !== '') throw invalid('X509Data holds text where the schema allows none')
  const part = (local: string) => {
    const found = x509Data.children.filter((c) => c.ns === DS_NS && c.local === local)
    if (found.length > 1) throw invalid(`X509Data holds at most one ${local}`)
    return found[0]
  }
  const [issuerSerial, certificateElement] = [part('X509IssuerSerial'), part('X509Certificate')]
  const other = x509Data.children.find((c) => c !== issuerSerial && c !== certificateElement)
  if (other) throw invalid(`X509Data may not hold {${other.ns}}${other.local}`)
  // zeep's Signature sends an empty X509IssuerSerial beside the certificate (xmlsec does not fill it in).
  const named = issuerSerial && (issuerSerial.children.length > 0 || issuerSerial.text.trim() !== '')
    ? issuerSerialKeyOf(issuerSerial)
    : undefined
  if (!certificateElement) {
    if (!named) throw invalid('An X509Data must carry an X509Certificate or an X509IssuerSerial')
    return { issuerSerial: named }
  }
  shape(certificateElement, [], 'X509Certificate', true)
  const certificate = certificateOf(base64Value(certificateElement, 'The X509Certificate'), now)
  if (named !== undefined && named !== certificateIssuerSerial(certificate.raw)) {
    throw invalid('The X509IssuerSerial does not name the X509Certificate it is sent with')
  }
  return certificate
}

/**
 * The issuerSerialKey of an X509IssuerSerial: its X509IssuerName (RFC 4514: "CN=bank, O=Bank", with
 * backslash escapes) and X509SerialNumber (an xs:integer, decimal).
 */
function issuerSerialKeyOf (issuerSerial: XmlElement): string {
  const [issuer, serial] = shape(issuerSerial, [[DS_NS, 'X509IssuerName', 1, 1], [DS_NS, 'X509SerialNumber', 1, 1]],
    'X509IssuerSerial').map((group) => group[0]!)
  shape(issuer!, [], 'X509IssuerName', true)
  shape(serial!, [], 'X509SerialNumber', true)
  const number = serial!.text.trim()
  if (!/^\d{1,100}$/.test(number)) throw invalid('X509SerialNumber must be a decimal integer')
  const attributes = issuer!.text.split(/(?<!\\)[,+]/).map((a) => a.replace(/\\(.)/g, '$1'))
  return issuerSerialKey(attributes, BigInt(number))
}

function certificateOf (der: Buffer, now: number) {
  try {
    return usableCertificate(der, now)
  } catch (err) {
    throw SoapFault.failedAuthentication(`The signing certificate is not usable: ${(err as Error).message}`)
  }
}

/**
 * The canonical XML of each Reference's element as xmldom reads it (the text its digest is of), once
 * every digest matches: what was signed, and all the service acts on. The element is xmldom's at the
 * place of ours (read alike: names, attributes, Ids); what lies inside it is taken from its canonical
 * text, never from our reading, so a difference between the two readers below it cannot run unsigned.
 * Anything that throws on the way is a refusal and leaves nothing.
 */
function digestedReferences (
  doc: Document, references: readonly Reference[], parents: Map<XmlElement, XmlElement>
): string[] {
  return references.map((reference) => {
    // A same-document "#id" reference drops comments (XML Signature 4.4.3.3), whichever C14N it names.
    const canonicalTarget = canonical(domElementOf(doc, reference.target, parents, false), EXC_C14N, reference.prefixes)
    const digest = createHash(reference.hash).update(canonicalTarget, 'utf8').digest()
    if (digest.length !== reference.digest.length || !timingSafeEqual(digest, reference.digest)) {
      throw failedCheck(`The digest of ${reference.uri} does not match the signed element`)
    }
    return canonicalTarget
  })
}

export function createSignatureCheck (options: SignatureCheckOptions) {
  const signatureMethods = new Set(options.allowSha1 ? [RSA_SHA256, RSA_SHA1] : [RSA_SHA256])
  const digestMethods = new Set(options.allowSha1 ? [SHA256, SHA1] : [SHA256])

  /**
   * Verifies the signature of a message whose Security header holds a ds:Signature; a WS-Security fault
   * otherwise. `timestamp` is the header's wsu:Timestamp (its freshness is checked by the caller).
   * `beforeCrypto` runs before the costly part (the second parse, canonicalisation, RSA).
   */
  async function verify (message: SignedMessage, security: XmlElement, timestamp: XmlElement | undefined, now: number,
    beforeCrypto: () => Promise<void>): Promise<VerifiedSignature> {
    if (Buffer.byteLength(message.xml) > MAX_SIGNED_BYTES) {
      throw invalid(`A signed message is at most ${MAX_SIGNED_BYTES} bytes`)
    }
    const { signatures, ids, parents } = survey(message.root)
    const signature = child(security, DS_NS, 'Signature')
    if (signatures.length > MAX_SIGNATURES || !signature || signatures[0] !== signature) {
      throw invalid('A signed message carries exactly one ds:Signature, in its wsse:Security header')
    }
    const [signedInfo, signatureValue, keyInfo] = shape(signature, [
      [DS_NS, 'SignedInfo', 1, 1], [DS_NS, 'SignatureValue', 1, 1], [DS_NS, 'KeyInfo', 1, 1]
    ], 'The Signature')
    const info = readSignedInfo(signedInfo![0]!, ids, signatureMethods, digestMethods)
    shape(signatureValue![0]!, [], 'SignatureValue', true)
    const value = base64Value(signatureValue![0]!, 'The SignatureValue')
    for (const { target } of info.references) {
      for (let e: XmlElement | undefined = signature; e; e = parents.get(e)) {
        if (e === target) throw invalid('A Reference may not name an element that holds the Signature')
      }
    }
    // The dispatched Body and our Timestamp, by identity: an Id names one element in this document.
    const signed = new Set(info.references.map((r) => r.target))
    const bodyId = idOf(message.body)
    if (bodyId === undefined || ids.get(bodyId) !== message.body || !signed.has(message.body)) {
      throw invalid('The signature does not cover the message\'s Body')
    }
    if (!timestamp || !signed.has(timestamp)) {
      throw invalid('A signed message needs a wsu:Timestamp the signature covers')
    }

    const certificate = signingKey(keyInfo![0]!, security, ids, now)
    const partner = await findCertificatePartner(options.store, certificate, now)
    if (!partner) throw SoapFault.failedAuthentication('The signing certificate is not registered to any partner')

    await beforeCrypto()
    const doc = domOf(message.xml)
    // First the SignatureValue over SignedInfo (read alike by both parsers, down to its last element, so
    // the References read from our tree are the signed ones): a forgery is refused before any digest.
    const domSignedInfo = domElementOf(doc, signedInfo![0]!, parents, true)
    const signedInfoCanonical = canonical(domSignedInfo, info.c14n, info.prefixes)
    if (!verifyRsa(info.hash, Buffer.from(signedInfoCanonical, 'utf8'), partner.publicKey, value)) {
      throw failedCheck('The SignatureValue does not verify with the registered certificate')
    }
    // Then each signed element's digest, and only its canonical text from here on.
    const references = digestedReferences(doc, info.references, parents)
    // The Body and the Timestamp among them: one of each (two References to one element sign one text).
    const bodies = new Map<string, XmlElement>()
    const timestamps = new Map<string, XmlElement>()
    for (const xml of new Set(references)) {
      const element = parseXml(xml, message.limits)
      if (element.ns === message.body.ns && element.local === 'Body') bodies.set(xml, element)
      else if (element.ns === WSU_NS && element.local === 'Timestamp') timestamps.set(xml, element)
    }
    if (bodies.size !== 1) throw invalid('The signed references must hold one Body of the message\'s SOAP version')
    if (timestamps.size !== 1) throw invalid('The signed references must hold one wsu:Timestamp')
    // The same content signed with the same key is the same message (two partners may sign the same text).
    const replayKey = createHash('sha256').update(partner.certificate.fingerprint256)
    for (const xml of references) replayKey.update(createHash('sha256').update(xml, 'utf8').digest())
    return { partner, replayKey: replayKey.digest('hex'), body: [...bodies.values()][0]!, timestamp: [...timestamps.values()][0]! }
  }

  return { verify }
}

export type SignatureCheck = ReturnType<typeof createSignatureCheck>
