// npm run partner -- list [--json]
// npm run partner -- remove --login <login>
// The SOAP partner accounts of the configured store (DATABASE_URL, else SQLITE_PATH): which there are, how
// each can authenticate, and ending one. Creating or changing one is `npm run partner:create`
// (cli/create-partner.ts). Exit 0 on success, 1 when the login is unknown, 2 on a usage error.
import { X509Certificate } from 'node:crypto'
import { readCommandLine, refuseCommandLine } from '../app/core/command-line.ts'
import { loadSettingsOrExit, SERVICE_AREAS } from '../app/core/config/index.ts'
import { openStore } from '../app/core/store/index.ts'
import type { PartnerAccount, PartnerCertificate, Store } from '../app/core/store/types.ts'

/**
 * How long a running instance may still accept a removed partner: the life of the SOAP room's credentials
 * cache (CREDENTIAL_CACHE_MS, app/soap/ws-security.ts; test/ops/partner-migrate.test.ts keeps them equal).
 */
export const REMOVAL_SEEN_WITHIN_SEC = 30

const USAGE = `usage: npm run partner -- list [--json]
       npm run partner -- remove --login <login>
The SOAP partner accounts in the configured store (DATABASE_URL, else SQLITE_PATH). list: each login, the
user it acts as, its password styles (PasswordText, PasswordDigest) and registered certificates (SHA-256
fingerprint, expiry). remove: ends an account (its login, passwords and certificates; the user and its
data stay): running instances refuse it within ${REMOVAL_SEEN_WITHIN_SEC} s (they keep a partner's credentials that long).
Create or change one with npm run partner:create.`

interface Listed extends PartnerAccount {
  certificates: { fingerprint: string; notAfter: string; addedAt: string }[]
}

/** Every partner account with its certificates. */
export async function listedPartners (store: Store): Promise<Listed[]> {
  const accounts = await store.listPartners()
  return Promise.all(accounts.map(async (account) => ({
    ...account,
    certificates: (await store.certificatesOf(account.login)).map(describeCertificate)
  })))
}

function describeCertificate (certificate: PartnerCertificate): Listed['certificates'][number] {
  const notAfter = new Date(new X509Certificate(certificate.pem).validTo).toISOString()
  return { fingerprint: `sha256:${certificate.fingerprint}`, notAfter, addedAt: certificate.addedAt }
}

/** One account a line: login, user, password styles, certificates. */
export function partnerLines (partners: Listed[]): string[] {
  if (partners.length === 0) return ['no partner accounts']
  return partners.map((p) => {
    const passwords = [p.passwordText && 'PasswordText', p.passwordDigest && 'PasswordDigest'].filter(Boolean)
    const certificates = p.certificates.map((c) => `${c.fingerprint} (expires ${c.notAfter.slice(0, 10)})`)
    return [
      p.login,
      `user ${p.userId} "${p.name}" (${p.role})`,
      passwords.length > 0 ? passwords.join(', ') : 'no password',
      certificates.length > 0 ? `certificates ${certificates.join(', ')}` : 'no certificate'
    ].join('  ')
  })
}

if (import.meta.main) {
  const { values, positionals } = readCommandLine(USAGE, {
    allowPositionals: true,
    options: { login: { type: 'string' }, json: { type: 'boolean', default: false } }
  })
  const [verb, ...extra] = positionals
  if (extra.length > 0) refuseCommandLine(USAGE, `unexpected argument: ${extra.join(' ')}`)
  if (verb !== 'list' && verb !== 'remove') refuseCommandLine(USAGE, verb ? `unknown command: ${verb}` : 'list or remove?')
  if (verb === 'remove' && !values.login) refuseCommandLine(USAGE, 'remove needs --login')
  if (verb === 'list' && values.login) refuseCommandLine(USAGE, 'list takes no --login')

  // The service's whole configuration: run beside a deployment, the command refuses what the service would.
  const store = await openStore(loadSettingsOrExit(SERVICE_AREAS))
  try {
    if (verb === 'list') {
      const partners = await listedPartners(store)
      console.log(values.json ? JSON.stringify(partners, null, 2) : partnerLines(partners).join('\n'))
    } else if (await store.removePartner(values.login!)) {
      console.log(`removed partner "${values.login}": running instances refuse it within ${REMOVAL_SEEN_WITHIN_SEC} s; its user stays`)
    } else {
      console.error(`no partner account has the login "${values.login}" (npm run partner -- list)`)
      process.exitCode = 1
    }
  } finally {
    await store.close()
  }
}
