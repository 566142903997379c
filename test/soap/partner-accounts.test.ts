// Partner accounts: `npm run partner:create` stores a scrypt hash and the password sealed with
// PARTNER_SECRET_KEY; the sealed value opens only with that key and for that login; an account created
// by the command authenticates over SOAP with PasswordDigest and PasswordText.
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { createHash, randomBytes } from 'node:crypto'
import { test } from 'tap'
import { hashPassword, sealPassword, unsealPassword, verifyPassword } from '../../app/core/auth/partner-secrets.ts'
import { DatabaseSync } from 'node:sqlite'
import pg from 'pg'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { certificateIssuerSerial, type Store } from '../../app/core/store/types.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { TEST_DATABASE_URL, freshSchema } from '../helpers/postgres.ts'
import { makeCertificate } from './x509.ts'
import { WSSE, WSU, envelope, listenSoapApp, post, readFault, seededCliEnv, textToken } from './helpers.ts'

const run = promisify(execFile)
const SCRIPT = new URL('../../cli/create-partner.ts', import.meta.url).pathname

test('sealing: opens with the same key and login only; scrypt hashes verify', async (t) => {
  const sealed = sealPassword('s3cret', 'acme', TEST_PARTNER_SECRET_KEY)
  t.notMatch(sealed, 's3cret')
  t.equal(unsealPassword(sealed, 'acme', TEST_PARTNER_SECRET_KEY), 's3cret')
  t.equal(unsealPassword(sealed, 'acme', 'another-key-that-is-long-enough-0123456789'), null, 'another key')
  t.equal(unsealPassword(sealed, 'mallory', TEST_PARTNER_SECRET_KEY), null, 'another login')
  t.not(sealPassword('s3cret', 'acme', TEST_PARTNER_SECRET_KEY), sealed, 'a fresh IV each time')
  const hash = await hashPassword('s3cret')
  t.match(hash, /^scrypt\$16384\$8\$1\$/)
  t.equal(await verifyPassword('s3cret', hash), true)
  t.equal(await verifyPassword('s3cret!', hash), false)
})

test('npm run partner:create creates a SERVICE partner that authenticates over SOAP', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'partner-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const env = await seededCliEnv(dir)

  const created = await run(
    process.execPath,
    [SCRIPT, '--login', 'acme', '--password', 'acme-password', '--name', 'Acme Corp'],
    { env }
  )
  t.match(created.stdout, /partner "acme" → user \S+ \(SERVICE\) in sqlite/)
  const bound = await run(
    process.execPath,
    [SCRIPT, '--login', 'root', '--password', 'root-password', '--user-id', '1', '--text-only'],
    { env }
  )
  t.match(bound.stdout, /partner "root" → user 1 \(ADMIN\) in sqlite, PasswordText only/)
  const usage = await run(process.execPath, [SCRIPT, '--login', 'x'], { env }).then(
    () => null,
    (err: { code: number; stderr: string }) => err
  )
  t.equal(usage?.code, 2)
  t.match(usage?.stderr, /usage: npm run partner:create/)

  const store = openSqliteStore(env.SQLITE_PATH)
  t.teardown(() => store.close())
  const acme = await store.findCredentials('acme')
  t.match(acme, { login: 'acme', role: 'SERVICE', passwordHash: /^scrypt\$/, passwordSecret: /^v1\$/ })
  t.notMatch(JSON.stringify(acme), 'acme-password', 'the password is not stored in plain')
  t.match(await store.findCredentials('root'), { userId: '1', role: 'ADMIN', passwordSecret: null })

  const { url } = await listenSoapApp(t, { SOAP_NAMESPACE_BASE: 'http://localhost:0' }, { store })
  const ns = 'http://localhost:0/v1/UserService'
  const body = `<GetUser xmlns="${ns}"><id>2</id></GetUser>`
  const headers = { 'content-type': 'text/xml; charset=utf-8' }
  const nonce = randomBytes(16)
  const createdAt = new Date().toISOString()
  const digest = createHash('sha1').update(nonce).update(createdAt).update('acme-password').digest('base64')
  const digestToken =
    `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}"><wsse:UsernameToken><wsse:Username>acme</wsse:Username>` +
    `<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest">${digest}</wsse:Password>` +
    `<wsse:Nonce>${nonce.toString('base64')}</wsse:Nonce><wsu:Created>${createdAt}</wsu:Created></wsse:UsernameToken></wsse:Security>`
  t.equal(
    (await post(`${url}/v1/UserService`, envelope('1.1', body, digestToken), headers)).status,
    200,
    'acme with PasswordDigest'
  )
  t.equal(
    (await post(`${url}/v1/UserService`, envelope('1.1', body, textToken('acme', 'acme-password')), headers)).status,
    200,
    'acme with PasswordText'
  )

  // root has no sealed password: PasswordText works (scrypt once, then remembered), PasswordDigest cannot.
  const asRoot = await post(`${url}/v1/UserService`, envelope('1.1', body, textToken('root', 'root-password')), headers)
  t.match(asRoot.text, '<email>', 'root acts as user 1 (ADMIN) and sees the e-mail')
  t.equal(
    (await post(`${url}/v1/UserService`, envelope('1.1', body, textToken('root', 'root-password')), headers)).status,
    200,
    'again, from the cache'
  )
  t.match(
    readFault((await post(`${url}/v1/UserService`, envelope('1.1', body, textToken('root', 'wrong')), headers)).text),
    { code: 'wsse:FailedAuthentication' }
  )
  const rootDigest = digestToken.replace('>acme<', '>root<')
  t.match(
    readFault((await post(`${url}/v1/UserService`, envelope('1.1', body, rootDigest), headers)).text),
    { code: 'wsse:FailedAuthentication' },
    'no digest for a text-only account'
  )
})

test('certificates stored before issuer-serial keys existed get theirs when the store opens (sqlite, PostgreSQL)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'issuer-serial-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const signer = makeCertificate(dir, 'older-signer')
  const key = certificateIssuerSerial(signer.cert)
  const path = join(dir, 'service.db')
  const schema = await freshSchema(t, 'issuer_serial')
  const stores: Array<[string, () => Promise<Store>, (sql: string) => Promise<void>]> = [
    ['sqlite', async () => openSqliteStore(path), async (sql) => {
      const db = new DatabaseSync(path)
      db.exec(sql)
      db.close()
    }],
    ['PostgreSQL', () => openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 1, schema }), async (sql) => {
      const client = new pg.Client({ connectionString: TEST_DATABASE_URL })
      await client.connect()
      await client.query(`SET search_path TO ${schema}`)
      await client.query(sql)
      await client.end()
    }]
  ]
  for (const [kind, open, raw] of stores) {
    const before = await open()
    await loadDemoData(before)
    await createPartnerAccount(before, TEST_PARTNER_SECRET_KEY, { login: 'older', certificate: signer.cert, userId: '2' })
    t.match(await before.findCertificateByIssuerSerial(key), { login: 'older' }, `${kind}: registered with its key`)
    await before.close()
    await raw('UPDATE partner_certificates SET issuer_serial = NULL') // as a row of the previous schema
    const after = await open()
    t.match(await after.findCertificateByIssuerSerial(key), { login: 'older', userId: '2' }, `${kind}: the key is back`)
    await after.close()
  }
})
