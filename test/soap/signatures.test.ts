// WS-Security X.509 signatures: a certificate registered by `npm run partner:create -- --certificate`
// authenticates node-soap's WSSecurityCert on both service versions; and every way of presenting a
// signature that does not vouch for the message that would run is refused with a WS-Security fault
// before anything runs (a counting store sees no domain call): a tampered Body, signature wrapping,
// duplicate Ids, an unregistered or expired certificate, a stale or unsigned Timestamp, a replay,
// SHA-1 (unless WSSE_ALLOW_SHA1), transforms and methods outside the list. Certificates are made with openssl.
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { X509Certificate, randomUUID } from 'node:crypto'
import { test } from 'tap'
import soap from 'soap'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { countingStore, domainMethods } from '../helpers/counting-store.ts'
import { TEST_PARTNER_SECRET_KEY, type TestLike } from '../helpers/app.ts'
import { listenSoapApp, post, readFault, seededCliEnv } from './helpers.ts'
import { makeCertificate, signedEnvelope, type TestCertificate } from './x509.ts'

const run = promisify(execFile)
const SCRIPT = new URL('../../cli/create-partner.ts', import.meta.url).pathname
const NS = 'urn:graphql-query-service:soap'
const XML = { 'content-type': 'text/xml; charset=utf-8' }
const SHA1_OPTIONS = {
  signatureAlgorithm: 'http://www.w3.org/2000/09/xmldsig#rsa-sha1',
  digestAlgorithm: 'http://www.w3.org/2000/09/xmldsig#sha1'
}
// Store calls authentication makes; any other call is the domain running.
const THUMBPRINT = 'http://docs.oasis-open.org/wss/oasis-wss-soap-message-security-1.1#ThumbprintSHA1'
const ENVELOPED = 'http://www.w3.org/2000/09/xmldsig#enveloped-signature'
const INCLUSIVE_C14N = 'http://www.w3.org/TR/2001/REC-xml-c14n-20010315'

function tempDir (t: TestLike): string {
  const dir = mkdtempSync(join(tmpdir(), 'x509-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Base64 of the SHA-1 of the certificate's DER, as a ThumbprintSHA1 KeyIdentifier carries it. */
function thumbprintOf (who: TestCertificate): string {
  return Buffer.from(new X509Certificate(who.cert).fingerprint.replaceAll(':', ''), 'hex').toString('base64')
}

type Client = soap.Client & Record<string, (args: unknown) => Promise<[any, string, unknown, string]>>

test('npm run partner:create --certificate: node-soap WSSecurityCert calls both versions', async (t) => {
  const dir = tempDir(t)
  const env = await seededCliEnv(dir)
  const signer = makeCertificate(dir, 'signer', { days: 30 })
  // Bound to the administrator (user 1), who may also list users; without a password.
  const created = await run(process.execPath,
    [SCRIPT, '--login', 'signer', '--certificate', signer.certPath, '--user-id', '1'], { env })
  t.match(created.stdout, /partner "signer" → user 1 \(ADMIN\) in sqlite/)
  t.match(created.stdout, /certificates of "signer": sha256:[0-9a-f]{64}\n/)

  const store = openSqliteStore(env.SQLITE_PATH)
  t.teardown(() => store.close())
  t.match(await store.findCredentials('signer'), { userId: '1', passwordHash: null, passwordSecret: null })
  const { url } = await listenSoapApp(t, {}, { store })

  for (const [version, soapVersion] of [['v1', '1.1'], ['v2', '1.1'], ['v2', '1.2']] as const) {
    const path = `/${version}/UserService`
    const options = { forceSoap12Headers: soapVersion === '1.2' }
    const client = await soap.createClientAsync(`${url}${path}?wsdl`, options, `${url}${path}`) as Client
    client.setSecurity(new soap.WSSecurityCert(signer.key, signer.cert, ''))
    const [got, , , rawRequest] = await client.GetUserAsync({ id: '2' })
    t.match(rawRequest, '<SignatureValue>', `${version} SOAP ${soapVersion}: the request is signed`)
    t.notMatch(rawRequest, 'UsernameToken')
    t.equal(got.user.id, '2')
    t.match(got.user.email, /@/, 'the signer acts as its user (an administrator sees e-mails)')
    const email = `signed-${version}-${soapVersion}@example.com`.replace('.1', '1').replace('.2', '2')
    const [made] = await client.CreateUserAsync({ name: 'Signed Caller', email })
    t.equal(made.user.email, email, `${version}: CreateUser ran`)
    t.same((await store.usersByIds([made.user.id]))[0]?.email, email, 'and the user is stored')
    if (version === 'v2') {
      const [listed] = await client.ListUsersAsync({ limit: 2 })
      t.equal(listed.user.length, 2, 'v2: ListUsers')
    }
  }
})

test('partner:create refuses expired and not-yet-valid certificates; --keep-previous overlaps two', async (t) => {
  const dir = tempDir(t)
  const env = await seededCliEnv(dir)
  const cli = (...args: string[]) => run(process.execPath, [SCRIPT, ...args], { env })
  const refused = (args: string[]) => cli(...args).then(() => null, (err: { code: number; stderr: string }) => err)

  const expired = makeCertificate(dir, 'expired', { start: '20200101000000Z', end: '20200201000000Z' })
  const future = makeCertificate(dir, 'future', { start: '20900101000000Z', end: '20910101000000Z' })
  t.match(await refused(['--login', 'old', '--certificate', expired.certPath]), { code: 1, stderr: /expired/ })
  t.match(await refused(['--login', 'early', '--certificate', future.certPath]),
    { code: 1, stderr: /not valid before/ })
  t.match(await refused(['--login', 'x']), { code: 2, stderr: /--certificate <cert\.pem>/ },
    'a password or a certificate is required')

  const first = makeCertificate(dir, 'first')
  const second = makeCertificate(dir, 'second')
  const third = makeCertificate(dir, 'third')
  await cli('--login', 'rotating', '--password', 'rotating-pw', '--certificate', first.certPath)
  const overlap = await cli('--login', 'rotating', '--certificate', second.certPath, '--keep-previous')
  t.match(overlap.stdout, /certificates of "rotating": sha256:[0-9a-f]{64}, sha256:[0-9a-f]{64}\n/,
    'two during the changeover')

  const store = openSqliteStore(env.SQLITE_PATH)
  t.teardown(() => store.close())
  t.equal(await store.findCertificate('0'.repeat(64)), null)
  t.match(await store.findCredentials('rotating'), { passwordHash: /^scrypt\$/ },
    'the password stays when only the certificate changes')
  const { url } = await listenSoapApp(t, {}, { store })
  const getUser = `<GetUser xmlns="${NS}/v1/UserService"><id>2</id></GetUser>`
  const call = (who: TestCertificate) => post(`${url}/v1/UserService`, signedEnvelope('1.1', getUser, who), XML)
  t.equal((await call(first)).status, 200, 'the previous certificate still works')
  t.equal((await call(second)).status, 200, 'the new one works')

  // Replacing without --keep-previous leaves only the new certificate.
  await cli('--login', 'rotating', '--certificate', third.certPath)
  for (const retired of [first, second]) {
    t.match(readFault((await call(retired)).text), { code: 'wsse:FailedAuthentication', reason: /not registered/ })
  }
  t.equal((await call(third)).status, 200)
  t.match(await refused(['--login', 'thief', '--certificate', third.certPath]),
    { code: 1, stderr: /registered to the partner "rotating"/ })
})

/** A listening app whose store counts calls; the partner "signer" (user 5, SERVICE) holds `signer`'s certificate. */
async function refusalSetup (t: TestLike, env: Record<string, string> = {}, clock?: () => number) {
  const dir = tempDir(t)
  const signer = makeCertificate(dir, 'signer')
  const base = openSqliteStore(':memory:')
  t.teardown(() => base.close())
  await loadDemoData(base)
  await createPartnerAccount(base, TEST_PARTNER_SECRET_KEY, { login: 'partner', password: 's3cret', userId: '5' })
  await createPartnerAccount(base, TEST_PARTNER_SECRET_KEY, { login: 'signer', certificate: signer.cert, userId: '5' })
  const { store, calls } = countingStore(base)
  const app = await listenSoapApp(t, env, { store, clock })
  const domainCalls = () => domainMethods(calls)
  return { ...app, dir, signer, calls, domainCalls }
}

const CREATE = (email: string) =>
  `<CreateUser xmlns="${NS}/v1/UserService"><name>Mallory</name><email>${email}</email></CreateUser>`

test('refusals: each a WS-Security fault, and nothing runs', async (t) => {
  const { url, dir, signer, calls, domainCalls } = await refusalSetup(t)
  const endpoint = `${url}/v1/UserService`
  const other = makeCertificate(dir, 'stranger')

  // A correctly signed message is accepted (the baseline the variants below depart from).
  const ok = await post(endpoint, signedEnvelope('1.1', CREATE('ok@example.com'), signer), XML)
  t.equal(ok.status, 200, ok.text)
  t.ok(domainCalls().includes('createUser'), 'the baseline ran')
  // Ids as wsu:Id (zeep, WCF and WSS4J write them so) are read the same way.
  const wsuIds = signedEnvelope('1.1', CREATE('wsu@example.com'), signer, { signerOptions: { idMode: 'wssecurity' } })
  t.match(wsuIds, /<soap:Body [^>]*wsu:Id="_0"/)
  const withWsuIds = await post(endpoint, wsuIds, XML)
  t.equal(withWsuIds.status, 200, withWsuIds.text)
  // The key named by its SHA-1 thumbprint instead of a BinarySecurityToken (KeyInfo is not signed: rewritten here).
  const byThumbprint = (xml: string, who: TestCertificate) => xml
    .replace(/<wsse:BinarySecurityToken [^>]*>[^<]*<\/wsse:BinarySecurityToken>/, '')
    .replace(/<wsse:Reference URI="#x509-[^"]*" ValueType="[^"]*"\/>/,
      `<wsse:KeyIdentifier ValueType="${THUMBPRINT}">${thumbprintOf(who)}</wsse:KeyIdentifier>`)
  const thumbprinted = byThumbprint(signedEnvelope('1.1', CREATE('thumb@example.com'), signer), signer)
  t.notMatch(thumbprinted, 'BinarySecurityToken')
  t.match(thumbprinted, 'KeyIdentifier')
  const withThumbprint = await post(endpoint, thumbprinted, XML)
  t.equal(withThumbprint.status, 200, withThumbprint.text)

  const refusals: Array<[string, string, { code: string; reason?: RegExp | string }]> = []
  const signedCreate = () => signedEnvelope('1.1', CREATE('mallory@example.com'), signer)
  const body = (xml: string) => /<soap:Body Id="_0">[\s\S]*<\/soap:Body>/.exec(xml)![0]

  refusals.push(['tampered Body', signedCreate().replace('>Mallory<', '>Mallory2<'),
    { code: 'wsse:FailedCheck', reason: /does not match/ }])

  // Wrapping: the signed Body moved into a header wrapper, an unsigned Body in its place.
  {
    const xml = signedCreate()
    const signedBody = body(xml)
    const moved = (replacement: string) => xml.replace(signedBody, replacement)
      .replace('</soap:Header>', `<Wrapper xmlns="urn:x">${signedBody}</Wrapper></soap:Header>`)
    const wrapped = moved(`<soap:Body>${CREATE('wrapped@example.com')}</soap:Body>`)
    refusals.push(['signed Body moved into a header, unsigned Body in its place', wrapped,
      { code: 'wsse:InvalidSecurity', reason: /does not cover the message's Body/ }])
    const sameId = moved(`<soap:Body Id="_0">${CREATE('wrapped@example.com')}</soap:Body>`)
    refusals.push(['the moved Body\'s Id on the new Body too', sameId,
      { code: 'wsse:InvalidSecurity', reason: /appears more than once/ }])
    // A Reference that resolves to another element than the dispatched Body (here its operation element).
    const inner = xml.replace('<soap:Body Id="_0"><CreateUser ', '<soap:Body><CreateUser Id="_0" ')
    refusals.push(['a Reference to the operation element, not the Body', inner,
      { code: 'wsse:InvalidSecurity', reason: /does not cover the message's Body/ }])
    // A duplicate Id anywhere (here on an extra header block, the Timestamp's Id).
    const duplicate = xml.replace('</soap:Header>', '<Extra xmlns="urn:x" Id="_1"/></soap:Header>')
    refusals.push(['a duplicate Id in another header', duplicate,
      { code: 'wsse:InvalidSecurity', reason: /appears more than once/ }])
  }

  refusals.push(['a thumbprint registered to nobody',
    byThumbprint(signedEnvelope('1.1', CREATE('m@example.com'), other), other),
    { code: 'wsse:FailedAuthentication', reason: /not registered/ }])
  refusals.push(['a certificate registered to nobody', signedEnvelope('1.1', CREATE('m@example.com'), other),
    { code: 'wsse:FailedAuthentication', reason: /not registered/ }])
  refusals.push(['a Timestamp the signature does not cover',
    signedEnvelope('1.1', CREATE('m@example.com'), signer, { excludeReferencesFromSigning: ['Timestamp'] }),
    { code: 'wsse:InvalidSecurity', reason: /Timestamp/ }])
  refusals.push(['no Timestamp', signedEnvelope('1.1', CREATE('m@example.com'), signer, { hasTimeStamp: false }),
    { code: 'wsse:InvalidSecurity', reason: /Timestamp/ }])
  refusals.push(['RSA-SHA1 with SHA-1 digests (not allowed by default)',
    signedEnvelope('1.1', CREATE('m@example.com'), signer, SHA1_OPTIONS),
    { code: 'wsse:InvalidSecurity', reason: /rsa-sha1 is not accepted/ }])
  refusals.push(['inclusive C14N, a transform outside the list (validly signed)',
    signedEnvelope('1.1', CREATE('m@example.com'), signer, {
      signatureTransformations: [ENVELOPED, INCLUSIVE_C14N]
    }),
    { code: 'wsse:InvalidSecurity', reason: `The transform ${INCLUSIVE_C14N} is not accepted` }])
  refusals.push(['an XSLT transform',
    signedCreate().replace(ENVELOPED, 'http://www.w3.org/TR/1999/REC-xslt-19991116'),
    { code: 'wsse:InvalidSecurity', reason: /xslt/ }])
  refusals.push(['an HMAC signature method', signedCreate().replace('http://www.w3.org/2001/04/xmldsig-more#rsa-sha256',
    'http://www.w3.org/2000/09/xmldsig#hmac-sha1'),
  { code: 'wsse:InvalidSecurity', reason: /hmac-sha1 is not accepted/ }])
  refusals.push(['a whole-document Reference', signedCreate().replace('URI="#_0"', 'URI=""'),
    { code: 'wsse:InvalidSecurity', reason: /by its Id/ }])
  {
    const xml = signedCreate()
    const signature = /<Signature [\s\S]*<\/Signature>/.exec(xml)![0]
    const copy = `<X xmlns="urn:x">${signature.replaceAll('Id="', 'Idx="')}</X>`
    refusals.push(['a second Signature', xml.replace('</soap:Header>', `${copy}</soap:Header>`),
      { code: 'wsse:InvalidSecurity', reason: /exactly one ds:Signature/ }])
    const references = /<Reference URI="#_0">[\s\S]*?<\/Reference>/.exec(xml)![0]
    refusals.push(['more References than the cap', xml.replace(references, references.repeat(9)),
      { code: 'wsse:InvalidSecurity', reason: 'SignedInfo holds at most 8 Reference' }])
  }

  for (const [what, xml, fault] of refusals) {
    const before = calls.length
    const response = await post(endpoint, xml, XML)
    t.equal(response.status, 500, `${what}: a fault`)
    t.match(readFault(response.text), { ...fault, errorCode: 'UNAUTHENTICATED' }, what)
    t.same(domainMethods(calls.slice(before)), [], `${what}: nothing ran`)
  }

  // Replay: an accepted message again, byte for byte.
  const once = signedEnvelope('1.1', CREATE('once@example.com'), signer)
  t.equal((await post(endpoint, once, XML)).status, 200)
  const before = calls.length
  const replayed = await post(endpoint, once, XML)
  t.match(readFault(replayed.text), { code: 'wsse:FailedAuthentication', reason: /already been received/ },
    'a replay is refused')
  t.same(domainMethods(calls.slice(before)), [], 'the replay ran nothing')
})

test('a stale Timestamp is refused; SHA-1 passes only with WSSE_ALLOW_SHA1', async (t) => {
  // The server's clock is past the freshness window of a message signed now.
  const late = await refusalSetup(t, {}, () => Date.now() + 400_000)
  const lateMessage = signedEnvelope('1.1', CREATE('late@example.com'), late.signer)
  const stale = await post(`${late.url}/v1/UserService`, lateMessage, XML)
  t.match(readFault(stale.text), { code: 'wsse:FailedAuthentication', reason: /older than 300 seconds/ })
  t.same(late.domainCalls(), [], 'nothing ran')

  const legacy = await refusalSetup(t, { WSSE_ALLOW_SHA1: 'true' })
  const signed = signedEnvelope('1.1', CREATE('legacy@example.com'), legacy.signer, SHA1_OPTIONS)
  t.match(signed, '#rsa-sha1')
  const accepted = await post(`${legacy.url}/v1/UserService`, signed, XML)
  t.equal(accepted.status, 200, accepted.text)
})

test('a signed message accepted by one instance is refused by another (replays shared through Redis)', async (t) => {
  const dir = tempDir(t)
  const signer = makeCertificate(dir, 'signer')
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  await loadDemoData(store)
  await createPartnerAccount(store, TEST_PARTNER_SECRET_KEY, { login: 'signer', certificate: signer.cert, userId: '5' })
  const prefix = `test-soap-sig-${randomUUID()}:`
  const env = { REDIS_URL: process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379', REDIS_PREFIX: prefix }
  const first = await listenSoapApp(t, env, { store })
  const second = await listenSoapApp(t, env, { store })
  t.teardown(async () => {
    const keys = await first.app.redis.client!.keys(`${prefix}*`)
    if (keys.length > 0) await first.app.redis.client!.del(...keys)
  })
  const xml = signedEnvelope('1.2', `<GetUser xmlns="${NS}/v2/UserService"><id>2</id></GetUser>`, signer)
  const soap12 = { 'content-type': 'application/soap+xml; charset=utf-8' }
  t.equal((await post(`${first.url}/v2/UserService`, xml, soap12)).status, 200)
  const replay = await post(`${second.url}/v2/UserService`, xml, soap12)
  t.equal(replay.status, 400)
  t.match(readFault(replay.text), { subcode: 'wsse:FailedAuthentication', reason: /already been received/ })
  const keys = await first.app.redis.client!.keys(`${prefix}wsse-nonce:signature:*`)
  t.equal(keys.length, 1, 'remembered under the deployment prefix, through the nonce store')
})

test('a certificate that expired after its registration authenticates nobody', async (t) => {
  const dir = tempDir(t)
  const asn1 = (ms: number) => new Date(ms).toISOString().replace(/[-:T]/g, '').replace(/\.\d+Z$/, 'Z')
  const ends = Date.now() + 3_000
  const brief = makeCertificate(dir, 'brief', { start: asn1(Date.now() - 3_600_000), end: asn1(ends) })
  const { store, url, partnerSecretKey } = await listenSoapApp(t)
  await createPartnerAccount(store, partnerSecretKey, { login: 'brief', certificate: brief.cert, userId: '5' })
  const getUser = `<GetUser xmlns="${NS}/v1/UserService"><id>2</id></GetUser>`
  const early = await post(`${url}/v1/UserService`, signedEnvelope('1.1', getUser, brief), XML)
  t.equal(early.status, 200, 'valid: accepted')
  // Certificate times have whole seconds: wait until its notAfter is past.
  await new Promise((resolve) => setTimeout(resolve, ends - Date.now() + 1_500))
  const late = await post(`${url}/v1/UserService`, signedEnvelope('1.1', getUser, brief), XML)
  t.match(readFault(late.text), { code: 'wsse:FailedAuthentication', reason: /expired/ })
})
