// Who a partner is: the one home of the rule that turns a partner login into a Caller (the user the
// login is bound to, with that user's role) and of the secrets its password is checked against.
// WS-Security (routes/soap/ws-security.ts) asks here; nothing else reads partner credentials.
import { randomBytes } from 'node:crypto'
import { hashPassword, unsealPassword, verifyPassword } from '../auth/partner-secrets.ts'
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
