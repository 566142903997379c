// How tokens are verified and minted, from the configuration: algorithms pinned, exp required,
// iss/aud checked when configured, a small clock tolerance.
import type { FastifyJWTOptions } from '@fastify/jwt'
import type { Config } from '../app/core/config/index.ts'

export function jwtOptions (jwt: Config['jwt']): FastifyJWTOptions {
  const verifyKey = jwt.publicKey ?? jwt.secret!
  const signKey = jwt.privateKey ?? jwt.secret
  return {
    secret: signKey ? { public: verifyKey, private: signKey } : { public: verifyKey, private: '' },
    sign: {
      algorithm: jwt.algorithms[0] as 'HS256',
      ...(jwt.issuer ? { iss: jwt.issuer } : {}),
      ...(jwt.audience ? { aud: jwt.audience } : {})
    },
    verify: {
      algorithms: jwt.algorithms as ['HS256'],
      // fast-jwt checks iss/aud only when present: configured ones are required too.
      requiredClaims: ['exp', 'sub', ...(jwt.issuer ? ['iss'] : []), ...(jwt.audience ? ['aud'] : [])],
      clockTolerance: jwt.clockToleranceSec * 1000,
      ...(jwt.issuer ? { allowedIss: jwt.issuer } : {}),
      ...(jwt.audience ? { allowedAud: jwt.audience } : {}),
      // No cache here: plugins/auth.ts keeps verified tokens itself, keyed by the token text.
      cache: false
    }
  }
}
