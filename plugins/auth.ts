// The identity boundary: a bearer token becomes a Caller before any execution. A present but invalid
// token is refused (UNAUTHENTICATED, HTTP 401), never treated as anonymous. The same `authenticate`
// serves HTTP requests and WebSocket connection_init.
import fp from 'fastify-plugin'
import fastifyJwt from '@fastify/jwt'
import type { FastifyInstance } from 'fastify'
import { jwtOptions } from './jwt-options.ts'
import type { Caller } from '../app/core/domain/context.ts'
import { AppError } from '../app/core/errors.ts'
import { LruMap } from '../app/core/lru-map.ts'
import { ROLES, type Role } from '../app/core/store/types.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Resolves an `Authorization` value ("Bearer <token>") to a
     * caller; null when absent; throws UNAUTHENTICATED when invalid.
     */
    authenticate (authorization: string | undefined): Caller | null
  }
  interface FastifyRequest {
    caller: Caller | null
  }
}

/** Verified tokens kept at most; beyond it the oldest is forgotten (and verified again if it comes back). */
const VERIFIED_TOKENS_MAX = 10_000
/** And their estimated bytes: a header may be as long as Node's 16 KB header limit allows. */
const VERIFIED_TOKENS_MAX_BYTES = 16 * 1024 * 1024
/**
 * What an entry keeps alive: its header at two bytes a character
 * (the worst case of V8's strings), and the frozen caller.
 */
const verifiedEntryBytes = (header: string) => header.length * 2 + 512

export default fp(async function auth (app: FastifyInstance) {
  await app.register(fastifyJwt, jwtOptions(app.config.jwt))

  // Verified tokens by the exact Authorization header that carried them, until their `exp`: a client
  // sends the same header with every request. (fast-jwt's own cache keys entries by a sha256 of the
  // token, which costs more per request than the signature check it saves; a Map keyed by the string
  // itself costs a lookup.) Only tokens that passed every check are kept, and a kept caller is frozen,
  // so no request can alter another's.
  // Looked up with peek (no reordering on the hot path): the oldest entry is forgotten first.
  const verified = new LruMap<string, { caller: Caller; expiresAt: number }>(
    VERIFIED_TOKENS_MAX,
    VERIFIED_TOKENS_MAX_BYTES
  )

  const { clockToleranceSec, maxLifetimeSec } = app.config.jwt
  /**
   * A token's claimed times, beyond what fast-jwt checks (exp is required and not past): it was not
   * issued in the future (beyond the clock tolerance), and it lives at most JWT_MAX_LIFETIME_SEC, counted
   * from `iat`, or from now when it has none (what is left of its life is what it can still be used for).
   * A token minted for a hundred years would otherwise carry its roles for as long.
   */
  function assertLifetime (exp: unknown, iat: unknown): void {
    const now = Date.now() / 1000
    if (iat !== undefined && (typeof iat !== 'number' || !Number.isFinite(iat))) {
      throw new AppError('UNAUTHENTICATED', 'Invalid token claims')
    }
    if (iat !== undefined && iat > now + clockToleranceSec) {
      throw new AppError('UNAUTHENTICATED', 'Token issued in the future')
    }
    if ((exp as number) - (iat ?? now) > maxLifetimeSec) {
      throw new AppError('UNAUTHENTICATED', `Token lifetime longer than ${maxLifetimeSec} s`)
    }
  }

  /** Checks a token; a token that passes is remembered under the header that carried it, until its `exp`. */
  function verify (token: string, header: string): Caller {
    let claims: { sub?: unknown; role?: unknown; exp?: unknown; iat?: unknown }
    try {
      claims = app.jwt.verify(token)
    } catch (err) {
      const code = (err as { code?: string }).code
      throw new AppError('UNAUTHENTICATED', code === 'FAST_JWT_EXPIRED' ? 'Token expired' : 'Invalid token')
    }
    assertLifetime(claims.exp, claims.iat)
    const role = claims.role ?? 'USER'
    if (typeof claims.sub !== 'string' || claims.sub === '' || !ROLES.includes(role as Role)) {
      throw new AppError('UNAUTHENTICATED', 'Invalid token claims')
    }
    const expiresAt = typeof claims.exp === 'number' ? claims.exp * 1000 : undefined
    const caller: Caller = Object.freeze({
      id: claims.sub,
      role: role as Role,
      ...(expiresAt !== undefined ? { expiresAt } : {})
    })
    if (expiresAt !== undefined) verified.set(header, { caller, expiresAt }, verifiedEntryBytes(header))
    return caller
  }

  app.decorate('authenticate', function authenticate (authorization: string | undefined): Caller | null {
    if (authorization === undefined || authorization === '') return null
    // A header seen before, whose token passed every check (the usual case: a client sends the same
    // header with every request): one lookup by the header as received, no parsing.
    const seen = verified.peek(authorization)
    if (seen !== undefined && seen.expiresAt > Date.now()) return seen.caller
    // The scheme name is case-insensitive (RFC 7235): "bearer", "BEARER" are "Bearer".
    const match = /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)$/i.exec(authorization)
    if (!match) {
      // "Bearer abc" has the right form with a token that is not a JWT: say which part is wrong.
      throw new AppError('UNAUTHENTICATED', /^Bearer /i.test(authorization)
        ? 'Malformed bearer token: a JWT is three base64url parts separated by dots'
        : 'Invalid Authorization header: expected "Bearer <token>"')
    }
    if (seen !== undefined) verified.delete(authorization) // expired
    return verify(match[1]!, authorization)
  })
  app.decorateRequest('caller', null)
}, { name: 'auth', dependencies: ['config'] })
