// WS-Security UsernameToken Profile 1.0/1.1 for partner accounts: every SOAP message must carry a
// wsse:Security header with a UsernameToken; it becomes a Caller (the partner's user, normally role
// SERVICE), or a fault: wsse:InvalidSecurity when the header or its token is missing, wsse:FailedAuthentication
// when the token does not authenticate. Partners always identify themselves: there is no anonymous SOAP caller.
// - PasswordText: the password as sent; PasswordDigest: Base64(SHA-1(decoded Nonce + Created + password)),
//   where Created is hashed as the literal string received (zeep sends "+00:00", node-soap "Z").
// - Created (of the UsernameToken and of a wsu:Timestamp) must be at most maxAge old and not in the
//   future (beyond a small clock skew); a Timestamp's Expires must not have passed.
// - A Nonce must be canonical Base64 and is claimed once per partner for as long as its message could
//   still be fresh, remembered by its decoded bytes (a re-spelled Nonce is the same Nonce): in-process
//   by default, in Redis (SET NX PX) when configured, so a replay to another instance is refused too.
//   PasswordDigest requires Nonce and Created. A PasswordText message without a Nonce is not checked for
//   replay: it carries the password itself, so whoever captured it can make new messages at will and
//   refusing its replay protects nothing; the UsernameToken profile allows it (and zeep's default
//   UsernameToken repeats byte for byte). Its Created, when present, must still be fresh.
// - Who a login is (its user, role and secrets) is the domain's rule (app/core/domain/partners.ts).
// - Every refusal of a password costs one scrypt verification (against the account's hash, or a dummy
//   hash for an unknown login), so a refusal takes the same work whether the login exists or not.
// Performance: checking a password must not cost a scrypt per request (a SOAP call would then be
// CPU-bound on hashing). Credentials are cached per login for CREDENTIAL_CACHE_MS: the partner and the
// unsealed password (so both digest and text checks are a hash and a constant-time compare); accounts
// without a sealed password remember, for the same time, the SHA-256 of a text password that scrypt
// accepted. A password change or a removed account therefore takes effect within CREDENTIAL_CACHE_MS.
// X.509 signatures instead of (or beside) a password: signature.ts; a signed message's replay is
// refused by what was signed (its signed references) through the same NonceCache, and its freshness is
// judged on the Timestamp as signed.
// Capacity: without Redis, the NonceCache is this process's memory of REPLAY_MEMORY_ENTRIES live nonces
// and signatures; full of live ones, it refuses a new message with SERVICE_UNAVAILABLE and a Retry-After
// (HTTP 503) rather than forget one, and counts it (soap_replay_memory_full_total).
import { createHash, timingSafeEqual } from 'node:crypto'
import type { Cluster, Redis } from 'ioredis'
import type { Caller } from '../core/domain/context.ts'
import { findPartner, verifyPartnerPassword, type Partner } from '../core/domain/partners.ts'
import { AppError } from '../core/errors.ts'
import { LruMap } from '../core/lru-map.ts'
import type { Store } from '../core/store/types.ts'
import { attribute, child, type XmlElement } from './envelope.ts'
import { SoapFault, WSSE_NS } from './faults.ts'
import { DS_NS, createSignatureCheck, type SignedMessage } from './signature.ts'

export const WSU_NS = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'
const TOKEN_PROFILE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0'
const PASSWORD_TEXT = `${TOKEN_PROFILE}#PasswordText`
const PASSWORD_DIGEST = `${TOKEN_PROFILE}#PasswordDigest`
const BASE64_BINARY = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary'

/** Tolerated difference between the partner's clock and ours for "not in the future". */
export const CLOCK_SKEW_MS = 5_000
export const CREDENTIAL_CACHE_MS = 30_000
const CREDENTIAL_CACHE_MAX = 10_000
/** Bytes of cached credentials at most (an entry weighs its login, its password and its record's overhead). */
const CREDENTIAL_CACHE_BYTES = 16 * 1024 * 1024
/** A cached entry's fixed overhead besides its strings: the partner record, the Set, the Map slot. */
const CREDENTIAL_ENTRY_BYTES = 1024

// xs:dateTime with a mandatory zone: a Created without one has no defined instant.
const DATE_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/

/** Remembers nonces; `claim` is true the first time a key is seen within its lifetime. */
export interface NonceCache {
  claim (key: string, ttlMs: number, now: number): Promise<boolean>
}

/**
 * Live nonces and signatures one instance remembers in process (without Redis): its capacity. Each is
 * remembered for WSSE_MAX_AGE_SEC plus the clock skew (305 s by default), so an instance holds a
 * sustained 1000000 / 305 = about 3300 fresh messages a second (UsernameToken nonces and signed
 * messages together, every partner): several times what one core verifies of signed messages, though
 * not all one core answers with PasswordDigest (the benchmark's soap-get-user row: 3000 to 4500 a
 * second). At full, about 60 MB (an entry is about 61 bytes, measured with Node 24: see memoryNonceCache).
 */
export const REPLAY_MEMORY_ENTRIES = 1_000_000

/** The in-process NonceCache, with what the metrics read of it. */
export interface MemoryNonceCache extends NonceCache {
  /** Claims refused because the memory was full of live entries (SERVICE_UNAVAILABLE), since it was made. */
  readonly refusedFull: number
}

/**
 * In-process, bounded and expiring. Entries are added in time order with the same lifetime, so the
 * oldest sit at the front of the Map and expire first. When full of live nonces it refuses new ones
 * (fail closed) rather than forget a live nonce and let its replay through: SERVICE_UNAVAILABLE with
 * the seconds until its oldest entry expires as retryAfter (the carrier answers 503 with Retry-After).
 * Compact, so that the capacity above costs tens of megabytes: a key is kept as the first 16 bytes of
 * its SHA-256 (a one-byte string of 16 characters; two different keys share them with a probability of
 * 2^-128 a pair) and its expiry as milliseconds from the first claim (a small integer, not a heap number).
 */
export function memoryNonceCache (maxEntries = REPLAY_MEMORY_ENTRIES): MemoryNonceCache {
  const seen = new Map<string, number>()
  let origin: number | null = null
  let refusedFull = 0
  return {
    get refusedFull () { return refusedFull },
    async claim (key, ttlMs, now) {
      origin ??= now
      const at = now - origin
      for (const [k, expires] of seen) {
        if (expires > at) break
        seen.delete(k)
      }
      const id = createHash('sha256').update(key).digest().toString('latin1', 0, 16)
      const expires = seen.get(id)
      if (expires !== undefined && expires > at) return false
      if (seen.size >= maxEntries) {
        refusedFull++
        const oldest = seen.values().next().value!
        throw new AppError('SERVICE_UNAVAILABLE', 'Too many WS-Security nonces and signatures in flight; retry later',
          { retryAfter: Math.max(1, Math.ceil((oldest - at) / 1000)) })
      }
      seen.set(id, at + ttlMs)
      return true
    }
  }
}

/** Shared by every instance through Redis: SET key NX PX. Fails closed when Redis does not answer. */
export function redisNonceCache (redis: Redis | Cluster, keyOf: (name: string) => string): NonceCache {
  return {
    async claim (key, ttlMs) {
      let result: string | null
      try {
        result = await redis.set(keyOf(`wsse-nonce:${key}`), '1', 'PX', Math.max(1, Math.ceil(ttlMs)), 'NX')
      } catch {
        throw new AppError('SERVICE_UNAVAILABLE', 'The nonce store is unavailable; retry later')
      }
      return result === 'OK'
    }
  }
}

interface PartnerEntry {
  partner: Partner
  /** The unsealed password's bytes, when the account has a sealed one (PasswordDigest possible). */
  password: Buffer | null
  /** SHA-256 of text passwords scrypt accepted (accounts without a sealed password). */
  acceptedText: Set<string>
  expires: number
}

/** Who a message authenticates, and whether by a signature that verified (its reply is then signed). */
export interface Authenticated {
  caller: Caller
  signed: boolean
  /** A signed message's Body as it was signed (signature.ts): the operation and its arguments are read from it. */
  signedBody?: XmlElement
}

export interface WsSecurityOptions {
  store: Store
  partnerSecretKey: string
  maxAgeMs: number
  nonces: NonceCache
  clock: () => number
  /** Accept RSA-SHA1 signatures and SHA-1 digests from signing partners (WSSE_ALLOW_SHA1). */
  allowSha1?: boolean
}

interface UsernameToken {
  username: string
  password: string
  digest: boolean
  nonce: Buffer | null
  created: string | null
}

const sha256 = (value: Buffer | string) => createHash('sha256').update(value).digest()

function text (element: XmlElement | undefined): string | undefined {
  return element?.text.trim()
}

function instant (value: string, what: string): number {
  const ms = DATE_TIME.test(value) ? Date.parse(value) : NaN
  if (Number.isNaN(ms)) throw SoapFault.failedAuthentication(`${what} is not an xs:dateTime with a time zone`)
  return ms
}

export function createWsSecurity (options: WsSecurityOptions) {
  const { store, partnerSecretKey, maxAgeMs, nonces, clock } = options
  const partners = new LruMap<string, PartnerEntry>(CREDENTIAL_CACHE_MAX, CREDENTIAL_CACHE_BYTES)
  const signatures = createSignatureCheck({ store, allowSha1: options.allowSha1 ?? false })

  async function partner (login: string, now: number): Promise<PartnerEntry | null> {
    const cached = partners.get(login)
    if (cached && cached.expires > now) return cached
    const found = await findPartner(store, login, partnerSecretKey)
    if (!found) {
      partners.delete(login)
      return null
    }
    const entry: PartnerEntry = {
      partner: found,
      password: found.password === null ? null : Buffer.from(found.password, 'utf8'),
      acceptedText: new Set(),
      expires: now + CREDENTIAL_CACHE_MS
    }
    // UTF-16 strings: two bytes a character; the password's bytes as kept.
    partners.set(login, entry, CREDENTIAL_ENTRY_BYTES + 2 * login.length + (entry.password?.length ?? 0))
    return entry
  }

  function checkFresh (created: string, what: string, now: number): void {
    const at = instant(created, what)
    if (at > now + CLOCK_SKEW_MS) throw SoapFault.failedAuthentication(`${what} is in the future`)
    if (now - at > maxAgeMs) throw SoapFault.failedAuthentication(`${what} is older than ${Math.round(maxAgeMs / 1000)} seconds`)
  }

  /** A wsu:Timestamp's Created must be fresh, and its Expires (when given) not past. */
  function checkTimestamp (timestamp: XmlElement, now: number): void {
    const created = text(child(timestamp, WSU_NS, 'Created'))
    if (!created) throw SoapFault.failedAuthentication('The Timestamp needs a Created')
    checkFresh(created, 'The Timestamp Created', now)
    const expires = text(child(timestamp, WSU_NS, 'Expires'))
    if (expires !== undefined && instant(expires, 'The Timestamp Expires') <= now - CLOCK_SKEW_MS) {
      throw SoapFault.failedAuthentication('The message has expired (Timestamp Expires)')
    }
  }

  function readToken (element: XmlElement): UsernameToken {
    const username = text(child(element, WSSE_NS, 'Username'))
    const passwordElement = child(element, WSSE_NS, 'Password')
    if (!username || !passwordElement) throw SoapFault.failedAuthentication('The UsernameToken needs a Username and a Password')
    const type = attribute(passwordElement, '', 'Type') ?? PASSWORD_TEXT
    if (type !== PASSWORD_TEXT && type !== PASSWORD_DIGEST) throw SoapFault.failedAuthentication(`Unsupported password type ${type}`)
    const nonceElement = child(element, WSSE_NS, 'Nonce')
    let nonce: Buffer | null = null
    if (nonceElement) {
      const encoding = attribute(nonceElement, '', 'EncodingType') ?? BASE64_BINARY
      const given = nonceElement.text.trim()
      nonce = Buffer.from(given, 'base64')
      // Canonical Base64 only (padding as required, unused bits zero): Buffer.from ignores what it
      // cannot use, so the same bytes have many spellings; only the one that re-encodes to itself passes.
      if (encoding !== BASE64_BINARY || !/^[A-Za-z0-9+/]+={0,2}$/.test(given) || nonce.toString('base64') !== given) {
        throw SoapFault.failedAuthentication('The Nonce must be canonical Base64Binary')
      }
    }
    // Created is wsu:Created; some older toolkits put it in the wsse namespace.
    const created = text(child(element, WSU_NS, 'Created') ?? child(element, WSSE_NS, 'Created')) ?? null
    return { username, password: passwordElement.text, digest: type === PASSWORD_DIGEST, nonce, created }
  }

  /** True when the token's password is the partner's; every refusal has cost one scrypt verification. */
  async function passwordMatches (
    entry: PartnerEntry | null,
    token: UsernameToken,
    beforeScrypt: () => Promise<void>
  ): Promise<boolean> {
    if (entry && token.digest) {
      if (entry.password) {
        const expected = createHash('sha1').update(token.nonce!).update(token.created!, 'utf8').update(entry.password).digest()
        const given = Buffer.from(token.password.trim(), 'base64')
        if (given.length === expected.length && timingSafeEqual(given, expected)) return true
      }
    } else if (entry) {
      const given = sha256(token.password)
      if (entry.password) {
        if (timingSafeEqual(given, sha256(entry.password))) return true
      } else {
        const key = given.toString('base64')
        if (entry.acceptedText.has(key)) return true
        // A text-only account: scrypt is the check itself, and its refusal has paid the work already.
        await beforeScrypt()
        const ok = await verifyPartnerPassword(entry.partner, token.password)
        if (ok) entry.acceptedText.add(key)
        return ok
      }
    }
    await beforeScrypt()
    await verifyPartnerPassword(null, token.password)
    return false
  }

  /** The caller the header's UsernameToken authenticates (see the top of this file). */
  async function usernameCaller (
    security: XmlElement, now: number, beforeScrypt: () => Promise<void>
  ): Promise<Caller> {
    const tokenElement = child(security, WSSE_NS, 'UsernameToken')
    if (!tokenElement) throw SoapFault.invalidSecurity('The Security header has no UsernameToken')
    const token = readToken(tokenElement)
    if (token.digest && (!token.nonce || !token.created)) {
      throw SoapFault.failedAuthentication('PasswordDigest requires a Nonce and a Created')
    }
    if (token.created) checkFresh(token.created, 'The UsernameToken Created', now)

    const entry = await partner(token.username, now)
    // One message for an unknown login and a wrong password: the fault must not confirm logins.
    if (!(await passwordMatches(entry, token, beforeScrypt)) || !entry) throw SoapFault.failedAuthentication()

    // Claimed after authentication, so nobody can burn a partner's nonce with a forged message; keyed
    // by the partner's user and the nonce's bytes (canonical Base64 of them).
    if (token.nonce) {
      const fresh = await nonces.claim(`${entry.partner.caller.id}:${token.nonce.toString('base64')}`, maxAgeMs + CLOCK_SKEW_MS, now)
      if (!fresh) throw SoapFault.failedAuthentication('The Nonce has already been used (replayed message)')
    }
    return entry.partner.caller
  }

  /**
   * The caller a message's wsse:Security header (one addressed to us) authenticates; a WS-Security
   * fault otherwise. `beforeScrypt` runs before each scrypt verification and before a signature's
   * cryptography (the carrier refuses there a client that has spent its budget, before the costly
   * work rather than after). A header with a ds:Signature is checked by signature.ts against
   * `message` (the document's text and tree); a UsernameToken beside it must name the same partner.
   */
  async function authenticate (security: XmlElement | undefined, beforeScrypt: () => Promise<void> = async () => {},
    message?: SignedMessage): Promise<Authenticated> {
    if (!security) throw SoapFault.invalidSecurity('A wsse:Security header with a UsernameToken is required')
    const now = clock()

    const timestamp = child(security, WSU_NS, 'Timestamp')
    if (timestamp) checkTimestamp(timestamp, now)

    if (!child(security, DS_NS, 'Signature')) return { caller: await usernameCaller(security, now, beforeScrypt), signed: false }
    if (!message) throw SoapFault.invalidSecurity('Signed messages are not accepted here')
    const verified = await signatures.verify(message, security, timestamp, now, beforeScrypt)
    // The header's Timestamp above was a cheap early refusal; the signed one is what counts.
    checkTimestamp(verified.timestamp, now)
    const caller = verified.partner.caller
    const beside = child(security, WSSE_NS, 'UsernameToken') && await usernameCaller(security, now, beforeScrypt)
    if (beside && beside.id !== caller.id) {
      throw SoapFault.failedAuthentication('The UsernameToken and the signing certificate name different partners')
    }
    // The same signature again is the same message again: remembered for as long as its Timestamp is fresh.
    if (!(await nonces.claim(`signature:${verified.replayKey}`, maxAgeMs + CLOCK_SKEW_MS, now))) {
      throw SoapFault.failedAuthentication('This signed message has already been received (replayed message)')
    }
    return { caller, signed: true, signedBody: verified.body }
  }

  return { authenticate }
}

export type WsSecurity = ReturnType<typeof createWsSecurity>
