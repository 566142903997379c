// npm run token -- --sub 42 --role ADMIN [--expires-in 1h]
// Mints a token with the configured key, for development and load tests (issuance is outside the interface).
import { parseArgs } from 'node:util'
import { createSigner } from 'fast-jwt'
import { loadConfig } from '../config.ts'
import { ROLES, type Role } from '../store/types.ts'

export function mintToken (jwt: ReturnType<typeof loadConfig>['jwt'], sub: string, role: Role, expiresInSec = 3600): string {
  const key = jwt.privateKey ?? jwt.secret
  if (!key) throw new Error('Set JWT_PRIVATE_KEY (or JWT_SECRET) to mint tokens')
  const sign = createSigner({
    key,
    algorithm: jwt.algorithms[0] as 'HS256',
    expiresIn: expiresInSec * 1000,
    ...(jwt.issuer ? { iss: jwt.issuer } : {}),
    ...(jwt.audience ? { aud: jwt.audience } : {})
  })
  return sign({ sub, role })
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      sub: { type: 'string' },
      role: { type: 'string', default: 'USER' },
      'expires-in': { type: 'string', default: '3600' }
    }
  })
  const role = values.role as Role
  if (!values.sub || !ROLES.includes(role)) {
    console.error(`usage: npm run token -- --sub <user id> [--role ${ROLES.join('|')}] [--expires-in seconds]`)
    process.exit(2)
  }
  console.log(mintToken(loadConfig().jwt, values.sub, role, Number(values['expires-in'])))
}
