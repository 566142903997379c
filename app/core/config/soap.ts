// The SOAP binding for partners: its contract's addresses, the size of a message, WS-Security, signed
// replies, and the key that seals partners' passwords.
import { X509Certificate, createPrivateKey } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { area, optional } from './area.ts'

const DEV_PARTNER_SECRET_KEY = 'development-only-partner-key-change-me-0123456789'

// The contract's namespace must not change with the deployment (stubs generated against one
// environment must work against every other): a fixed URI. A URN, so it is never mistaken for an address.
const DEFAULT_SOAP_NAMESPACE_BASE = 'urn:graphql-query-service:soap'

export const soap = area({
  key: 'soap',
  title: 'SOAP binding',
  about: 'The contract partners\' stubs are generated from, the size of one message, WS-Security, signed replies, and the key sealing partners\' passwords.',
  settings: {
    SOAP_PUBLIC_URL: { type: 'string', doc: 'endpoint address written into the WSDL; unset: the forwarded host from TRUST_PROXY peers, else the listening address (never the Host header)' },
    SOAP_NAMESPACE_BASE: { type: 'string', default: DEFAULT_SOAP_NAMESPACE_BASE, doc: 'the contract\'s namespaces are <base>/v1/UserService...: fixed, never the listening address; choose once and keep' },
    SOAP_MAX_ELEMENTS: { type: 'integer', minimum: 10, default: 1000, doc: 'most elements in one SOAP request (BAD_REQUEST fault beyond)' },
    SOAP_MAX_ATTRIBUTES: { type: 'integer', minimum: 4, default: 32, doc: 'most attributes (namespace declarations included) on one element' },
    WSSE_MAX_AGE_SEC: { type: 'integer', minimum: 1, default: 300, doc: 'WS-Security Created freshness (and how long nonces and signatures are remembered)' },
    WSSE_ALLOW_SHA1: { type: 'boolean', default: false, doc: 'accept RSA-SHA1 signatures and SHA-1 digests from signing partners (legacy toolkits only)' },
    SOAP_SIGNING_KEY: { type: 'string', shownDefault: 'unset: replies unsigned', doc: 'PEM file of the service\'s RSA private key (unencrypted); with `SOAP_SIGNING_CERT`, every reply to a request whose signature verified is signed (faults included), as zeep, WCF and CXF expect. Unset by default because the key is the deployment\'s own (no safe default exists); the service then says at start, in one log line, that replies are unsigned. Both or neither; checked at start' },
    SOAP_SIGNING_CERT: { type: 'string', doc: 'PEM file of the certificate of `SOAP_SIGNING_KEY` (must match it and be valid at start); served at `GET /v1/UserService?cert` (and v2) for partners to verify replies with' },
    PARTNER_SECRET_KEY: { type: 'string', shownDefault: 'a development key; required in production', doc: 'at least 32 characters, required in production: seals partner passwords (PasswordDigest needs them); instances must share it' }
  },
  read: (e, { production, problems }) => {
    const partnerSecretKey = optional(e.PARTNER_SECRET_KEY) ?? (production ? null : DEV_PARTNER_SECRET_KEY)
    if (!partnerSecretKey || partnerSecretKey.length < 32) {
      problems.push('set PARTNER_SECRET_KEY (at least 32 characters) in production; it seals partner passwords')
    }
    const signing = soapSigning(e.SOAP_SIGNING_KEY, e.SOAP_SIGNING_CERT, problems)
    const namespaceBase = e.SOAP_NAMESPACE_BASE.replace(/\/+$/, '')
    if (!/^[A-Za-z][A-Za-z0-9+.-]*:[^\s"<>&']+$/.test(namespaceBase)) {
      problems.push('SOAP_NAMESPACE_BASE must be an absolute URI (e.g. urn:example:users or https://example.com/soap)')
    }
    const publicUrl = optional(e.SOAP_PUBLIC_URL)?.replace(/\/+$/, '') ?? null
    if (publicUrl !== null && !/^https?:\/\/[^\s"<>&']+$/.test(publicUrl)) {
      problems.push('SOAP_PUBLIC_URL must be an http(s) URL')
    }
    return {
      /** The public base URL written as the WSDL's endpoint address; null: the address the request came to. */
      publicUrl,
      /** Base of the contract's namespaces (one per version: <base>/v1/UserService); never the listening address. */
      namespaceBase,
      maxAgeSec: e.WSSE_MAX_AGE_SEC,
      /** Seals partners' passwords at rest (PasswordDigest needs them in plain); '' only when a problem is reported. */
      partnerSecretKey: partnerSecretKey ?? '',
      maxElements: e.SOAP_MAX_ELEMENTS,
      maxAttributes: e.SOAP_MAX_ATTRIBUTES,
      allowSha1: e.WSSE_ALLOW_SHA1,
      /** Replies to signed requests are signed with this key and certificate; null: replies unsigned. */
      signing
    }
  }
})

/** The service's RSA key and certificate for signed SOAP replies (PEM text, read from the configured files). */
export interface SoapSigning {
  keyPem: string
  certificatePem: string
}

/**
 * SOAP_SIGNING_KEY and SOAP_SIGNING_CERT (PEM file paths): both or neither. Read and checked at start
 * (an RSA private key, the certificate of that key, valid now), so a mistake stops the start with one
 * line instead of failing the first signed reply.
 */
function soapSigning (
  keySetting: string | undefined, certificateSetting: string | undefined, problems: string[]
): SoapSigning | null {
  const keyPath = optional(keySetting)
  const certificatePath = optional(certificateSetting)
  if (keyPath === null && certificatePath === null) return null
  if (keyPath === null || certificatePath === null) {
    problems.push('set both SOAP_SIGNING_KEY and SOAP_SIGNING_CERT (PEM files) to sign SOAP replies, or neither')
    return null
  }
  const read = (setting: string, path: string) => {
    try {
      return readFileSync(path, 'utf8')
    } catch (err) {
      problems.push(`${setting} cannot be read (${err instanceof Error && 'code' in err ? String(err.code) : 'error'}: ${path})`)
      return null
    }
  }
  const keyPem = read('SOAP_SIGNING_KEY', keyPath)
  const certificatePem = read('SOAP_SIGNING_CERT', certificatePath)
  if (keyPem === null || certificatePem === null) return null
  let key: ReturnType<typeof createPrivateKey>
  let certificate: X509Certificate
  try {
    key = createPrivateKey(keyPem)
  } catch {
    problems.push(`SOAP_SIGNING_KEY is not an unencrypted PEM private key (${keyPath})`)
    return null
  }
  try {
    certificate = new X509Certificate(certificatePem)
  } catch {
    problems.push(`SOAP_SIGNING_CERT is not a PEM certificate (${certificatePath})`)
    return null
  }
  if (key.asymmetricKeyType !== 'rsa') problems.push('SOAP_SIGNING_KEY must be an RSA key (replies are signed with RSA-SHA256)')
  else if (!certificate.checkPrivateKey(key)) problems.push('SOAP_SIGNING_CERT is not the certificate of SOAP_SIGNING_KEY')
  else if (Date.parse(certificate.validTo) < Date.now()) problems.push(`SOAP_SIGNING_CERT expired on ${certificate.validTo}`)
  else return { keyPem, certificatePem }
  return null
}
