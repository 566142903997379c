// Bearer tokens: how the service verifies them (jwt), and the key `npm run token` signs them with
// (tokenSigning: the same declarations, read alone, so minting a token needs no other secret).
import { area, list, optional } from './area.ts'

/** The development profile's fixed secret (and `npm run token`'s without JWT_SECRET): never accepted in production. */
export const DEV_JWT_SECRET = 'development-only-secret-change-me-0123456789abcdef'

/** The HS256 secret's one rule, for verifying and for signing alike. */
const SHORT_SECRET = 'JWT_SECRET must be at least 32 characters'
const isShort = (secret: string | null) => secret !== null && secret.length < 32

export const jwt = area({
  key: 'jwt',
  title: 'Bearer tokens (JWT)',
  about: 'HS256 with a secret (at least 32 characters), or RS256/ES256 with a public key.',
  settings: {
    JWT_ALGORITHMS: { type: 'string', shownDefault: '`HS256` (`RS256` with `JWT_PUBLIC_KEY`)', doc: 'the pinned list of accepted algorithms' },
    JWT_SECRET: { type: 'string', shownDefault: 'a development key; required in production unless `JWT_PUBLIC_KEY`', doc: 'HS256 secret, at least 32 characters; instances must share it' },
    JWT_PUBLIC_KEY: { type: 'string', doc: 'RS256/ES256 verification key (PEM) instead of a secret' },
    JWT_PRIVATE_KEY: { type: 'string', doc: 'the signing key of `npm run token` with RS256/ES256 (verification uses `JWT_PUBLIC_KEY`)' },
    JWT_ISSUER: { type: 'string', doc: 'when set, `iss` is required and checked (and put in minted tokens)' },
    JWT_AUDIENCE: { type: 'string', doc: 'when set, `aud` is required and checked (and put in minted tokens)' },
    JWT_CLOCK_TOLERANCE_SEC: { type: 'integer', minimum: 0, maximum: 300, default: 5, doc: 'seconds of leeway when checking a token\'s times (0 to 300)' },
    JWT_MAX_LIFETIME_SEC: { type: 'integer', minimum: 60, maximum: 2592000, default: 86400, doc: 'longest life a token may claim, seconds (60 to 2592000): `exp - iat`, or `exp - now` without `iat`; longer ones are refused (401 / close 4403). A day covers the access tokens identity providers issue (an hour is usual, a day the longest common default) while a token minted for years, or leaked, cannot carry its roles for longer; a user\'s role change or deletion also ends their subscriptions at once (docs/subscriptions.md)' }
  },
  read: (e, { production, problems }) => {
    const publicKey = optional(e.JWT_PUBLIC_KEY)
    const secret = optional(e.JWT_SECRET) ?? (production || publicKey ? null : DEV_JWT_SECRET)
    if (!secret && !publicKey) problems.push('set JWT_SECRET (HS256) or JWT_PUBLIC_KEY (RS256/ES256) in production')
    if (isShort(secret)) problems.push(SHORT_SECRET)
    const algorithms = list(e.JWT_ALGORITHMS)
    return {
      algorithms: algorithms.length > 0 ? algorithms : [publicKey ? 'RS256' : 'HS256'],
      secret,
      publicKey,
      privateKey: optional(e.JWT_PRIVATE_KEY),
      issuer: optional(e.JWT_ISSUER),
      audience: optional(e.JWT_AUDIENCE),
      clockToleranceSec: e.JWT_CLOCK_TOLERANCE_SEC,
      /** Longest lifetime a token may claim (`exp - iat`, or `exp - now` without `iat`), seconds. */
      maxLifetimeSec: e.JWT_MAX_LIFETIME_SEC
    }
  }
})

const { JWT_ALGORITHMS, JWT_SECRET, JWT_PRIVATE_KEY, JWT_ISSUER, JWT_AUDIENCE } = jwt.settings

/**
 * What signing a token needs (`npm run token`): the key (JWT_PRIVATE_KEY, else JWT_SECRET; the development
 * key in the development profile), its algorithm and the claims' settings. Not part of the service's
 * configuration (the service only verifies), and documented with jwt, whose declarations it shares.
 */
export const tokenSigning = area({
  key: 'tokenSigning',
  title: 'Signing tokens (npm run token)',
  about: 'The signing key and the claims of minted tokens.',
  settings: { JWT_ALGORITHMS, JWT_SECRET, JWT_PRIVATE_KEY, JWT_ISSUER, JWT_AUDIENCE },
  read: (e, { production, problems }) => {
    const privateKey = optional(e.JWT_PRIVATE_KEY)
    const secret = optional(e.JWT_SECRET) ?? (production || privateKey ? null : DEV_JWT_SECRET)
    if (!privateKey && !secret) problems.push('set JWT_PRIVATE_KEY (RS256/ES256) or JWT_SECRET (HS256) to sign tokens in production')
    else if (!privateKey && isShort(secret)) problems.push(SHORT_SECRET)
    const algorithms = list(e.JWT_ALGORITHMS)
    return {
      // A private key signs asymmetrically: RS256 unless JWT_ALGORITHMS names another.
      algorithms: algorithms.length > 0 ? algorithms : [privateKey ? 'RS256' : 'HS256'],
      secret,
      privateKey,
      issuer: optional(e.JWT_ISSUER),
      audience: optional(e.JWT_AUDIENCE)
    }
  }
})
