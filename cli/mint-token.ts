// npm run token -- --sub 42 --role ADMIN [--expires-in 1h]
// Mints a token with the configured key, for development and load tests (issuance is outside the interface).
// The token alone goes to stdout (TOKEN=$(npm run -s token -- ...)); which key signed it goes to stderr.
import { createSigner } from 'fast-jwt'
import { readCommandLine, refuseCommandLine } from '../app/core/command-line.ts'
import { DEV_JWT_SECRET, loadSettingsOrExit, tokenSigning, type SigningConfig } from '../app/core/config/index.ts'
import { ROLES, type Role } from '../app/core/store/types.ts'

export function mintToken (jwt: SigningConfig, sub: string, role: Role, expiresInSec = 3600): string {
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

/** Which configured key mintToken signs with, in words. */
export function signingKey (jwt: SigningConfig): string {
  if (jwt.privateKey) return `JWT_PRIVATE_KEY (${jwt.algorithms[0]})`
  if (jwt.secret === DEV_JWT_SECRET) {
    return 'the development key (JWT_SECRET is not set): only a service in the development profile without JWT_SECRET accepts it'
  }
  return `JWT_SECRET (${jwt.algorithms[0]})`
}

const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 }

/** "3600", "90s", "15m", "1h", "7d" → seconds; null for anything else. */
export function durationSeconds (text: string): number | null {
  const match = /^(\d{1,9})([smhd]?)$/.exec(text)
  if (!match) return null
  const seconds = Number(match[1]) * UNIT_SECONDS[match[2] || 's']!
  return seconds > 0 ? seconds : null
}

if (import.meta.main) {
  const usage = `usage: npm run token -- --sub <user id> [--role ${ROLES.join('|')}] [--expires-in 3600|90s|15m|1h|7d]
Mints a bearer token with the key the service verifies with (JWT_PRIVATE_KEY, else JWT_SECRET; the development
key in development without either) and prints it alone on standard output: TOKEN=$(npm run -s token -- --sub 2).
Role USER by default; expires in an hour by default (at most JWT_MAX_LIFETIME_SEC is accepted by the service).`
  const { values } = readCommandLine(usage, {
    options: {
      sub: { type: 'string' },
      role: { type: 'string', default: 'USER' },
      'expires-in': { type: 'string', default: '3600' }
    }
  })
  const role = values.role as Role
  const expiresInSec = durationSeconds(values['expires-in'])
  if (!values.sub) refuseCommandLine(usage, '--sub <user id> is required')
  if (!ROLES.includes(role)) refuseCommandLine(usage, `--role must be one of ${ROLES.join(', ')}`)
  if (expiresInSec === null) refuseCommandLine(usage, `--expires-in ${values['expires-in']}: seconds, or a number with s, m, h or d`)
  // Only the signing key is read: in production a missing key is a configuration error, and nothing is
  // minted with another key; the rest of the service's settings are not needed here.
  const jwt = loadSettingsOrExit([tokenSigning]).tokenSigning
  try {
    console.log(mintToken(jwt, values.sub, role, expiresInSec))
  } catch (err) {
    console.error((err as Error).message)
    process.exit(1)
  }
  console.error(`Signed with ${signingKey(jwt)}; expires in ${expiresInSec} s.`)
}
