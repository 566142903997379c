// Who a partner is: the one home of the rule that turns a partner login into a Caller (the user the
// login is bound to, with that user's role) and of the secrets its password is checked against.
// WS-Security (app/soap/ws-security.ts) asks here; nothing else reads partner credentials.
import { X509Certificate, randomBytes, type KeyObject } from 'node:crypto'
import { hashPassword, unsealPassword, verifyPassword } from '../auth/partner-secrets.ts'
import { LruMap } from '../lru-map.ts'
import type { Store } from '../store/types.ts'
import type { Caller } from './context.ts'

export interface Partner {
  caller: Caller
  /** The plain password when the account has a sealed one (PasswordDigest possible); null otherwise. */
  password: string | null
  /** scrypt hash of the password (PasswordText); null when the account has none. */
  passwordHash: string | null
}

/** The partner a login names, or null when no account has that login. */
export async function findPartner (store: Store, login: string, partnerSecretKey: string): Promise<Partner | null> {
  const credentials = await store.findCredentials(login)
  if (!credentials) return null
  return {
    caller: { id: credentials.userId, role: credentials.role },
    password: credentials.passwordSecret ? unsealPassword(credentials.passwordSecret, login, partnerSecretKey) : null,
    passwordHash: credentials.passwordHash
  }
}

// A hash of a random password nobody knows, made with the current scrypt parameters on first need.
let dummyHash: Promise<string> | undefined

/**
 * Checks a text password against the partner's scrypt hash. Without a partner (unknown login) or a
 * hash, the same scrypt verification runs against a dummy hash and fails: the answer then takes as
 * long as for a known login with a wrong password, so its timing does not tell which logins exist.
 */
export async function verifyPartnerPassword (partner: Partner | null, password: string): Promise<boolean> {
  if (partner?.passwordHash) return verifyPassword(password, partner.passwordHash)
  await verifyPassword(password, await (dummyHash ??= hashPassword(randomBytes(16).toString('base64'))))
  return false
}

/** A partner authenticated by a registered X.509 certificate (WS-Security signatures). */
export interface CertificatePartner {
  caller: Caller
  login: string
  certificate: X509Certificate
  /** Its public key, read once per certificate text (X509Certificate.publicKey makes a new KeyObject each read). */
  publicKey: KeyObject
}

/** The SHA-256 fingerprint a certificate is registered and found by: lowercase hex, no separators. */
export function fingerprintOf (certificate: X509Certificate): string {
  return certificate.fingerprint256.replaceAll(':', '').toLowerCase()
}

/** A certificate as parsed once, with what each use checks. */
interface ParsedCertificate {
  certificate: X509Certificate
  publicKey: KeyObject
  validFrom: number
  validTo: number
}

// Certificates already parsed, by their text (PEM, or the Base64 of the DER): parsing one costs about
// 140 µs (measured), and a partner sends the same certificate with every signed message, as the store
// answers the same PEM. Parsing is a pure function of the text, so a remembered one is the same answer;
// only certificates that parsed are kept (garbage costs its parse every time, as a good one did once).
// Bounded by count and bytes (a key is the text; the parsed certificate holds its DER again).
const PARSED_CERTIFICATES_MAX = 1_000
const PARSED_CERTIFICATES_BYTES = 8 * 1024 * 1024
const parsedCertificates = new LruMap<string, ParsedCertificate>(PARSED_CERTIFICATES_MAX, PARSED_CERTIFICATES_BYTES)

function parseCertificate (pem: string | Buffer): ParsedCertificate {
  const key = typeof pem === 'string' ? pem : pem.toString('base64')
  const known = parsedCertificates.get(key)
  if (known) return known
  let certificate: X509Certificate
  try {
    certificate = new X509Certificate(pem)
  } catch {
    throw new Error('not an X.509 certificate (PEM or DER)')
  }
  const parsed = {
    certificate,
    publicKey: certificate.publicKey,
    validFrom: Date.parse(certificate.validFrom),
    validTo: Date.parse(certificate.validTo)
  }
  parsedCertificates.set(key, parsed, 2 * key.length + certificate.raw.length + 1024)
  return parsed
}

/** parseCertificate, and the rule of usableCertificate. */
function usableParsed (pem: string | Buffer, now: number): ParsedCertificate {
  const parsed = parseCertificate(pem)
  const { certificate, publicKey, validFrom, validTo } = parsed
  if (validFrom > now) throw new Error(`the certificate is not valid before ${certificate.validFrom}`)
  if (validTo < now) throw new Error(`the certificate expired on ${certificate.validTo}`)
  if (publicKey.asymmetricKeyType !== 'rsa') throw new Error('only RSA certificates are accepted')
  return parsed
}

/**
 * Reads one PEM certificate and checks it is valid at `now` (epoch ms): the same rule at registration
 * and at each use, so an expired or not-yet-valid certificate authenticates nobody.
 */
export function usableCertificate (pem: string | Buffer, now: number): X509Certificate {
  return usableParsed(pem, now).certificate
}

/** The SHA-1 thumbprint a ThumbprintSHA1 key identifier names a certificate by: lowercase hex. */
export function thumbprintOf (certificate: X509Certificate): string {
  return certificate.fingerprint.replaceAll(':', '').toLowerCase()
}

/** How a signed message may name a certificate without sending it: its SHA-1 thumbprint or its issuerSerialKey. */
export type CertificateName = { thumbprint: string } | { issuerSerial: string }

/**
 * The partner a certificate (or a certificate named by its thumbprint or its issuer and serial number)
 * is registered to, or null: unknown, or no longer valid at `now`.
 */
export async function findCertificatePartner (
  store: Store, certificate: X509Certificate | CertificateName, now: number
): Promise<CertificatePartner | null> {
  const row = certificate instanceof X509Certificate
    ? await store.findCertificate(fingerprintOf(certificate))
    : 'thumbprint' in certificate
      ? await store.findCertificateByThumbprint(certificate.thumbprint)
      : await store.findCertificateByIssuerSerial(certificate.issuerSerial)
  if (!row) return null
  let registered: ParsedCertificate
  try {
    registered = usableParsed(row.pem, now)
  } catch {
    return null
  }
  return {
    caller: { id: row.userId, role: row.role },
    login: row.login,
    certificate: registered.certificate,
    publicKey: registered.publicKey
  }
}
