// npm run partner:create -- --login partner --password s3cret [--user-id 5] [--name "Acme"]
//                            [--email ops@acme.example] [--text-only]
// npm run partner:create -- --login partner --certificate cert.pem [--keep-previous]
// Creates (or re-keys) a partner account for the SOAP binding in the configured store. Without --user-id
// a new user with role SERVICE is created for the partner; with it, the login is bound to that user and
// the partner acts with that user's role. The password is stored twice: a scrypt hash (PasswordText)
// and sealed with PARTNER_SECRET_KEY (PasswordDigest); --text-only stores the hash alone, and the
// partner can then use PasswordText only.
// --certificate registers the partner's X.509 certificate (PEM) for WS-Security signatures, with or
// without a password; re-running replaces it, or with --keep-previous keeps the newest one already
// registered beside it (at most two: a changeover, see docs/soap.md). Re-running for an existing login
// keeps its user, and its password unless --password is given.
import { readFileSync } from 'node:fs'
import { readCommandLine, refuseCommandLine } from '../app/core/command-line.ts'
import { loadSettingsOrExit, SERVICE_AREAS } from '../app/core/config/index.ts'
import { openStore } from '../app/core/store/index.ts'
import { certificateIssuerSerial, type Store, type UserRow } from '../app/core/store/types.ts'
import { hashPassword, sealPassword } from '../app/core/auth/partner-secrets.ts'
import { fingerprintOf, thumbprintOf, usableCertificate } from '../app/core/domain/partners.ts'

export interface PartnerAccountInput {
  login: string
  /** Optional when a certificate is given. */
  password?: string
  /** An X.509 certificate (PEM) for WS-Security signatures. */
  certificate?: string
  /** Keep the newest certificate already registered beside the new one (a changeover). */
  keepPrevious?: boolean
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
  if (input.password === undefined && input.certificate === undefined) {
    throw new Error('a password or a certificate is required')
  }
  if (input.password !== undefined && input.password.length < 6) throw new Error('password: at least 6 characters')
  const now = Date.now()
  const certificate = input.certificate === undefined ? undefined : usableCertificate(input.certificate, now)
  const fingerprint = certificate && fingerprintOf(certificate)
  if (fingerprint) {
    const holder = await store.findCertificate(fingerprint)
    if (holder && holder.login !== input.login) {
      throw new Error(`this certificate is registered to the partner "${holder.login}"`)
    }
  }
  const existing = await store.findCredentials(input.login)
  let user: UserRow | undefined
  if (input.userId || existing) {
    const id = input.userId ?? existing!.userId
    user = (await store.usersByIds([id]))[0]
    if (!user) throw new Error(`user ${id} not found`)
  } else {
    user = await store.createUser({ name: input.name ?? input.login, email: input.email ?? `${input.login.toLowerCase()}@partners.invalid`, role: 'SERVICE' })
  }
  if (input.password !== undefined) {
    const hash = await hashPassword(input.password)
    const sealed = input.textOnly ? null : sealPassword(input.password, input.login, partnerSecretKey)
    await store.setCredentials(user.id, input.login, hash, sealed)
  } else if (existing?.userId !== user.id) {
    // A certificate-only partner: the login, without a password.
    await store.setCredentials(user.id, input.login, null, null)
  }
  if (certificate && fingerprint) {
    const current = {
      fingerprint,
      thumbprint: thumbprintOf(certificate),
      issuerSerial: certificateIssuerSerial(certificate.raw),
      login: input.login,
      pem: certificate.toString(),
      addedAt: new Date(now).toISOString()
    }
    const registered = input.keepPrevious ? await store.certificatesOf(input.login) : []
    const previous = registered.find((c) => c.fingerprint !== fingerprint)
    await store.replaceCertificates(input.login, previous ? [current, previous] : [current])
  }
  return user
}

const USAGE = `usage: npm run partner:create -- --login <login> --password <password> [--user-id <id>] [--name <name>]
                                  [--email <email>] [--text-only]
       npm run partner:create -- --login <login> --certificate <cert.pem> [--keep-previous] [--password <password>]
Creates or changes a SOAP partner account in the configured store (DATABASE_URL, else SQLITE_PATH): a login
bound to a new SERVICE user (or to --user-id), with a password (PasswordText and PasswordDigest; --text-only:
PasswordText only) and/or an X.509 certificate for signed requests (--keep-previous keeps the newest one
already registered beside it, for a changeover). PARTNER_SECRET_KEY seals the password for PasswordDigest.
npm run partner -- list | remove: the accounts there are, and removing one (docs/soap.md#partner-accounts).`

if (import.meta.main) {
  const { values } = readCommandLine(USAGE, {
    options: {
      login: { type: 'string' },
      password: { type: 'string' },
      'user-id': { type: 'string' },
      name: { type: 'string' },
      email: { type: 'string' },
      'text-only': { type: 'boolean', default: false },
      certificate: { type: 'string' },
      'keep-previous': { type: 'boolean', default: false }
    }
  })
  if (!values.login) refuseCommandLine(USAGE, '--login is required')
  if (!values.password && !values.certificate) refuseCommandLine(USAGE, '--password or --certificate is required')
  let certificate: string | undefined
  try {
    certificate = values.certificate === undefined ? undefined : readFileSync(values.certificate, 'utf8')
  } catch (err) {
    console.error(`--certificate ${values.certificate}: ${(err as Error).message}`)
    process.exit(1)
  }
  // The service's whole configuration: run beside a deployment, the command refuses what the service would.
  const config = loadSettingsOrExit(SERVICE_AREAS)
  const store = await openStore(config)
  try {
    const user = await createPartnerAccount(store, config.soap.partnerSecretKey, {
      login: values.login,
      password: values.password,
      certificate,
      keepPrevious: values['keep-previous'],
      userId: values['user-id'],
      name: values.name,
      email: values.email,
      textOnly: values['text-only']
    })
    console.log(`partner "${values.login}" → user ${user.id} (${user.role}) in ${store.kind}${values['text-only'] ? ', PasswordText only' : ''}`)
    if (values.certificate) {
      const registered = await store.certificatesOf(values.login)
      console.log(`certificates of "${values.login}": ${registered.map((c) => `sha256:${c.fingerprint}`).join(', ')}`)
    }
  } catch (err) {
    console.error((err as Error).message)
    process.exitCode = 1
  } finally {
    await store.close()
  }
}
