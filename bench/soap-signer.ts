// X.509-signed SOAP requests for the signed benchmark row, made fast enough to keep up with the service.
// A toolkit's signer (node-soap's WSSecurityCert, xml-crypto underneath) takes about 3.4 ms a message here:
// it parses the envelope and canonicalises it on every call. The message this benchmark sends has one
// fixed shape, the one WSSecurityCert writes (a BinarySecurityToken, a Timestamp and the Body signed with
// rsa-sha256 after exclusive C14N), so its canonical texts are written directly: what changes between
// messages is the user id, the Timestamp and the signature, and a message costs two SHA-256 digests and
// one RSA signature (about 0.5 ms). The service verifies it as it verifies any partner's: the row's
// samples are checked before the load, and a refused message counts as a failure.
import { createHash, createPrivateKey, randomUUID, sign, type KeyObject } from 'node:crypto'
import { NS } from '../app/soap/envelope.ts'
import { WSSE_NS } from '../app/soap/faults.ts'
import { EXC_C14N } from '../app/soap/canonical-xml.ts'
import { DS_NS } from '../app/soap/signature.ts'
import { WSU_NS } from '../app/soap/ws-security.ts'

const X509V3 = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3'
const BASE64_BINARY = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary'
/** How long a message says it is valid (the service judges freshness by Created, WSSE_MAX_AGE_SEC). */
const EXPIRES_AFTER_MS = 10 * 60_000

const sha256 = (text: string) => createHash('sha256').update(text).digest('base64')

/** A Reference to `#id` as exclusive C14N writes it (empty elements as start and end tags). */
function reference (id: string, digest: string): string {
  return `<Reference URI="#${id}"><Transforms><Transform Algorithm="${DS_NS}enveloped-signature"></Transform>` +
    `<Transform Algorithm="${EXC_C14N}"></Transform></Transforms>` +
    '<DigestMethod Algorithm="http://www.w3.org/2001/04/xmlenc#sha256"></DigestMethod>' +
    `<DigestValue>${digest}</DigestValue></Reference>`
}

/**
 * Signs SOAP 1.1 request bodies as `key`'s holder, whose certificate (PEM) travels in the message.
 * `body` is the Body's content, one element with its own default namespace (e.g. a GetUser element).
 * `clock` (epoch milliseconds) dates the messages (tests share one with the service).
 */
export function createRequestSigner (
  keyPem: string, certPem: string, clock: () => number = Date.now
): (body: string) => string {
  const key: KeyObject = createPrivateKey(keyPem)
  const der = certPem.replace(/-----[^-]+-----|\s/g, '')
  const tokenId = `x509-${randomUUID().replaceAll('-', '')}`
  let lastMs = 0
  let inMs = 0
  return (body) => {
    // A Created of its own for every message: the same Body signed twice with one Created would be the
    // same message (RSA PKCS#1 v1.5 signatures are deterministic), which the service refuses as a replay.
    // Created is the clock's millisecond, never later: messages signed within one millisecond differ in
    // three more digits of the fraction (xs:dateTime allows any number; the instant read is still that
    // millisecond). It used to be one millisecond after the last message's, which ran ahead of the
    // clock whenever signing took less than a millisecond (about 0.4 ms here): a pool of 12000 messages
    // made before a round ended 7 s in the future, past the 5 s of clock skew the service tolerates, and
    // the messages sent first (the last signed) were refused (HTTP 500, "The Timestamp Created is in the future").
    const now = Math.max(clock(), lastMs) // (a clock set back goes on from where it was)
    inMs = now === lastMs ? inMs + 1 : 0
    lastMs = now
    if (inMs > 999) throw new Error('more than 1000 messages signed in one millisecond')
    const created = new Date(now).toISOString().replace('Z', `${String(inMs).padStart(3, '0')}Z`)
    const expires = new Date(now + EXPIRES_AFTER_MS).toISOString()
    // Each text below is already its own exclusive C14N (namespaces on the element, attributes in order).
    const timestamp = `<Timestamp xmlns="${WSU_NS}" Id="_1"><Created>${created}</Created><Expires>${expires}</Expires></Timestamp>`
    const canonicalBody = `<soap:Body xmlns:soap="${NS.soap11}" Id="_0">${body}</soap:Body>`
    const signedInfo = `<SignedInfo xmlns="${DS_NS}"><CanonicalizationMethod Algorithm="${EXC_C14N}"></CanonicalizationMethod>` +
      '<SignatureMethod Algorithm="http://www.w3.org/2001/04/xmldsig-more#rsa-sha256"></SignatureMethod>' +
      reference('_0', sha256(canonicalBody)) + reference('_1', sha256(timestamp)) + '</SignedInfo>'
    const signature = sign('sha256', Buffer.from(signedInfo), key).toString('base64')
    return `<soap:Envelope xmlns:soap="${NS.soap11}"><soap:Header>` +
      `<wsse:Security xmlns:wsse="${WSSE_NS}" xmlns:wsu="${WSU_NS}" soap:mustUnderstand="1">` +
      `<wsse:BinarySecurityToken EncodingType="${BASE64_BINARY}" ValueType="${X509V3}" wsu:Id="${tokenId}">${der}</wsse:BinarySecurityToken>` +
      timestamp +
      `<Signature xmlns="${DS_NS}">${signedInfo}<SignatureValue>${signature}</SignatureValue>` +
      `<KeyInfo><wsse:SecurityTokenReference><wsse:Reference URI="#${tokenId}" ValueType="${X509V3}"/></wsse:SecurityTokenReference></KeyInfo>` +
      '</Signature></wsse:Security></soap:Header>' +
      `<soap:Body Id="_0">${body}</soap:Body></soap:Envelope>`
  }
}
