// Where a WebSocket's identity comes from: connection_init's payload only (never the upgrade's headers or
// cookies), in the shapes clients' documented examples use.
import { AppError } from '../../app/core/errors.ts'

/**
 * Where clients put the token in connection_init's payload (Apollo's and graphql-ws's documented
 * examples): `authToken`, `authorization`, `Authorization`, `token`, or a `headers` object holding
 * `Authorization`/`authorization`; as "Bearer <JWT>" or the bare JWT.
 */
const CREDENTIAL_KEYS = ['authToken', 'authorization', 'Authorization', 'token'] as const
const HEADER_KEYS = ['Authorization', 'authorization'] as const
/** Other keys that look like a credential: refused rather than ignored (the client meant to authenticate). */
const CREDENTIAL_LIKE = /auth|token|bearer|jwt|credential|session|secret|password|api.?key/i
const READ_POSITIONS = new Set<string>([...CREDENTIAL_KEYS, ...HEADER_KEYS.map((key) => `headers.${key}`)])
const BARE_JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$/

const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value)

/**
 * The connection_init payload's credential as an Authorization value ("Bearer <JWT>"); undefined when
 * the payload carries none (anonymous). A credential in a field we do not read, a non-string one, or
 * two different ones are refused, never taken as anonymous.
 */
export function credentialOf (payload: unknown): string | undefined {
  if (payload === undefined || payload === null) return undefined
  if (!isRecord(payload)) throw new AppError('UNAUTHENTICATED', 'connection_init payload must be an object')
  const headers = payload.headers
  if (headers !== undefined && headers !== null && !isRecord(headers)) {
    throw new AppError('UNAUTHENTICATED', 'connection_init payload.headers must be an object')
  }
  const found: { where: string; value: unknown }[] = [
    ...CREDENTIAL_KEYS.map((key) => ({ where: key, value: payload[key] })),
    ...HEADER_KEYS.map((key) => ({ where: `headers.${key}`, value: headers?.[key] }))
  ].filter(({ value }) => value !== undefined && value !== null && value !== '')
  const unknown = [...Object.keys(payload), ...Object.keys(headers ?? {}).map((key) => `headers.${key}`)]
    .filter((key) => CREDENTIAL_LIKE.test(key) && !READ_POSITIONS.has(key))
  if (unknown.length > 0) {
    throw new AppError(
      'UNAUTHENTICATED',
      `Unrecognised credential ${unknown[0]}: send the token as authToken (or authorization, token, headers.Authorization)`
    )
  }
  if (found.length === 0) return undefined
  const values = new Set<string>()
  for (const { where, value } of found) {
    if (typeof value !== 'string') {
      throw new AppError('UNAUTHENTICATED', `${where} must be a string: "Bearer <token>" or the token itself`)
    }
    // Another scheme (Basic …) is refused here, naming the payload's field: the caller sent no header.
    if (!BARE_JWT.test(value) && !/^Bearer /i.test(value)) {
      throw new AppError('UNAUTHENTICATED', `${where} must be "Bearer <token>" or the token itself`)
    }
    values.add(BARE_JWT.test(value) ? `Bearer ${value}` : value)
  }
  if (values.size > 1) {
    throw new AppError(
      'UNAUTHENTICATED',
      `Different credentials in ${found.map(({ where }) => where).join(' and ')}: send one`
    )
  }
  return [...values][0]
}
