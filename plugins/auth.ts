// The identity boundary: a bearer token becomes a Caller before any execution. A present but invalid
// token is refused (UNAUTHENTICATED, HTTP 401), never treated as anonymous. The same `authenticate`
// serves HTTP requests and WebSocket connection_init.
import fp from 'fastify-plugin'
import fastifyJwt from '@fastify/jwt'
import type { FastifyInstance } from 'fastify'
import { jwtOptions } from '../app/auth/jwt-options.ts'
import type { Caller } from '../app/domain/context.ts'
import { AppError } from '../app/errors.ts'
import { ROLES, type Role } from '../app/store/types.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /** Resolves an `Authorization` value ("Bearer <token>") to a caller; null when absent; throws UNAUTHENTICATED when invalid. */
    authenticate (authorization: string | undefined): Caller | null
  }
  interface FastifyRequest {
    caller: Caller | null
  }
}

export default fp(async function auth (app: FastifyInstance) {
  await app.register(fastifyJwt, jwtOptions(app.config.jwt))

  app.decorate('authenticate', function authenticate (authorization: string | undefined): Caller | null {
    if (authorization === undefined || authorization === '') return null
    const match = /^Bearer ([A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)$/.exec(authorization)
    if (!match) throw new AppError('UNAUTHENTICATED', 'Invalid Authorization header: expected "Bearer <token>"')
    let claims: { sub?: unknown; role?: unknown }
    try {
      claims = app.jwt.verify(match[1]!)
    } catch (err) {
      const code = (err as { code?: string }).code
      throw new AppError('UNAUTHENTICATED', code === 'FAST_JWT_EXPIRED' ? 'Token expired' : 'Invalid token')
    }
    const role = claims.role ?? 'USER'
    if (typeof claims.sub !== 'string' || claims.sub === '' || !ROLES.includes(role as Role)) {
      throw new AppError('UNAUTHENTICATED', 'Invalid token claims')
    }
    return { id: claims.sub, role: role as Role }
  })
  app.decorateRequest('caller', null)
}, { name: 'auth', dependencies: ['config'] })
