// npm run partner:create -- --login partner --password s3cret [--user-id
// 5] [--name "Acme"] [--email ops@acme.example] [--text-only]
// Creates (or re-keys) a partner account for the SOAP binding in the configured store. Without --user-id
// a new user with role SERVICE is created for the partner; with it, the login is bound to that user and
// the partner acts with that user's role. The password is stored twice: a scrypt hash (PasswordText)
// and sealed with PARTNER_SECRET_KEY (PasswordDigest); --text-only stores the hash alone, and the
// partner can then use PasswordText only.
import { parseArgs } from 'node:util'
import { loadConfigOrExit } from '../app/config.ts'
import { openStore } from '../app/store/index.ts'
import type { Store, UserRow } from '../app/store/types.ts'
import { hashPassword, sealPassword } from '../app/auth/partner-secrets.ts'

export interface PartnerAccountInput {
  login: string
  password: string
  userId?: string
  name?: string
  email?: string
  textOnly?: boolean
}

export async function createPartnerAccount (
  store: Store,
  partnerSecretKey: string,
  input: PartnerAccountInput
): Promise<UserRow> {
  if (!/^[A-Za-z0-9_.@-]{1,100}$/.test(input.login)) throw new Error('login: 1 to 100 letters, digits or _ . @ -')
  if (input.password.length < 6) throw new Error('password: at least 6 characters')
  let user: UserRow | undefined
  if (input.userId) {
    user = (await store.usersByIds([input.userId]))[0]
    if (!user) throw new Error(`user ${input.userId} not found`)
  } else {
    user = await store.createUser({
      name: input.name ?? input.login,
      email: input.email ?? `${input.login.toLowerCase()}@partners.invalid`,
      role: 'SERVICE'
    })
  }
  const hash = await hashPassword(input.password)
  const sealed = input.textOnly ? null : sealPassword(input.password, input.login, partnerSecretKey)
  await store.setCredentials(user.id, input.login, hash, sealed)
  return user
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      login: { type: 'string' },
      password: { type: 'string' },
      'user-id': { type: 'string' },
      name: { type: 'string' },
      email: { type: 'string' },
      'text-only': { type: 'boolean', default: false }
    }
  })
  if (!values.login || !values.password) {
    console.error(
      'usage: npm run partner:create -- --login <login> --password <password> [--user-id <id>] [--name <name>] [--email <email>] [--text-only]'
    )
    process.exit(2)
  }
  const config = loadConfigOrExit()
  const store = await openStore(config)
  try {
    const user = await createPartnerAccount(store, config.soap.partnerSecretKey, {
      login: values.login,
      password: values.password,
      userId: values['user-id'],
      name: values.name,
      email: values.email,
      textOnly: values['text-only']
    })
    console.log(
      `partner "${values.login}" → user ${user.id} (${user.role}) in ${store.kind}${values['text-only'] ? ', PasswordText only' : ''}`
    )
  } catch (err) {
    console.error((err as Error).message)
    process.exitCode = 1
  } finally {
    await store.close()
  }
}
