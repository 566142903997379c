// Signed replies (SOAP_SIGNING_KEY, SOAP_SIGNING_CERT): every reply to a request whose signature verified
// is signed (Body and Timestamp, exclusive C14N, RSA-SHA256, the service certificate as a
// BinarySecurityToken), faults included; a request refused before its signature verified, a replay and a
// UsernameToken request get unsigned replies. The certificate is served at GET <path>?cert and the WSDL's
// policy says replies are signed. Without the settings the service starts as before and says so in one
// log line. The settings are checked at start. zeep's own verification of these replies: zeep.test.ts.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { DOMParser } from '@xmldom/xmldom'
import { test } from 'tap'
import { SignedXml } from 'xml-crypto'
import { buildApp } from '../../app/app.ts'
import { loadConfig } from '../../app/core/config/index.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { TEST_PARTNER_SECRET_KEY, testConfig, type TestLike } from '../helpers/app.ts'
import { envelope, listenSoapApp, post, readFault, textToken } from './helpers.ts'
import { makeCertificate, signedEnvelope, type TestCertificate } from './x509.ts'

const NS = 'urn:graphql-query-service:soap/v1/UserService'
const XML = { 'content-type': 'text/xml; charset=utf-8' }
const getUser = (id: string) => `<GetUser xmlns="${NS}"><id>${id}</id></GetUser>`

function tempDir (t: TestLike): string {
  const dir = mkdtempSync(join(tmpdir(), 'signed-replies-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const signingEnv = (service: TestCertificate) =>
  ({ SOAP_SIGNING_KEY: service.certPath.replace(/\.pem$/, '.key'), SOAP_SIGNING_CERT: service.certPath })

/** Verifies a reply's signature with `certificate` (xml-crypto, not the service's code); the Ids it covers. */
function verifiedReply (xml: string, certificate: string): string[] {
  const doc = new DOMParser().parseFromString(xml, 'text/xml')
  const verifier = new SignedXml({ publicCert: certificate, getCertFromKeyInfo: () => null })
  const signatures = verifier.findSignatures(doc)
  if (signatures.length !== 1) throw new Error(`expected one signature in the reply: ${xml}`)
  verifier.loadSignature(signatures[0]!)
  if (!verifier.checkSignature(xml)) throw new Error('the reply\'s signature does not verify')
  return verifier.getSignedReferences().map((canonical) => /wsu:Id="([^"]+)"/.exec(canonical)?.[1] ?? '')
}

test('with SOAP_SIGNING_KEY/CERT: replies to verified requests are signed, faults included; others are not', async (t) => {
  const dir = tempDir(t)
  const service = makeCertificate(dir, 'service')
  const partner = makeCertificate(dir, 'partner-signer')
  const stranger = makeCertificate(dir, 'stranger')
  const { url, store } = await listenSoapApp(t, signingEnv(service))
  // User 3 (user 5 is the UsernameToken partner "partner" of listenSoapApp).
  await createPartnerAccount(store, TEST_PARTNER_SECRET_KEY, { login: 'signer', certificate: partner.cert, userId: '3' })
  const endpoint = `${url}/v1/UserService`

  const ok = await post(endpoint, signedEnvelope('1.1', getUser('2'), partner), XML)
  t.equal(ok.status, 200)
  const signedIds = verifiedReply(ok.text, service.cert)
  t.match(ok.text, /<soap:Body [^>]*wsu:Id="(body-[^"]+)"/)
  t.same(signedIds.map((id) => id.replace(/-.*/, '')).sort(), ['body', 'ts'], 'the Body and the Timestamp are signed')
  t.match(ok.text, /<wsse:BinarySecurityToken [^>]*ValueType="[^"]*#X509v3"[^>]*>MII/, 'the service certificate travels with it')
  t.match(ok.text, 'http://www.w3.org/2001/04/xmldsig-more#rsa-sha256')
  t.match(ok.text, '<name>')

  // A fault after the signature verified (here NOT_FOUND) is signed too; on SOAP 1.2 as well.
  const missing = await post(`${url}/v2/UserService`,
    signedEnvelope('1.2', getUser('999999').replace('/v1/', '/v2/'), partner),
    { 'content-type': 'application/soap+xml; charset=utf-8' })
  t.equal(missing.status, 400)
  t.match(readFault(missing.text), { errorCode: 'NOT_FOUND' })
  t.equal(verifiedReply(missing.text, service.cert).length, 2, 'the fault is signed')

  // Not signed: a refusal before the signature verified, a replay, a UsernameToken request.
  const forged = await post(endpoint, signedEnvelope('1.1', getUser('2'), stranger), XML)
  t.match(readFault(forged.text), { code: 'wsse:FailedAuthentication' })
  const once = signedEnvelope('1.1', getUser('3'), partner)
  t.equal((await post(endpoint, once, XML)).status, 200)
  const replayed = await post(endpoint, once, XML)
  t.match(readFault(replayed.text), { reason: /already been received/ })
  const password = await post(endpoint, envelope('1.1', getUser('2'), textToken('partner', 's3cret')), XML)
  t.equal(password.status, 200, password.text)
  for (const [what, reply] of [['forged', forged], ['replayed', replayed], ['UsernameToken', password]] as const) {
    t.notMatch(reply.text, /Signature|BinarySecurityToken/, `${what}: unsigned`)
  }

  const cert = await fetch(`${endpoint}?cert`)
  t.equal(cert.status, 200)
  t.match(cert.headers.get('content-type'), 'application/x-pem-file')
  t.equal(await cert.text(), service.cert, 'GET ?cert serves the service certificate')
  const wsdl = await (await fetch(`${endpoint}?wsdl`)).text()
  t.match(wsdl, 'IncludeToken/AlwaysToInitiator', 'the policy: the recipient token comes with replies')
  t.match(wsdl, 'Replies to signed requests are signed')
})

test('without the settings: unsigned replies, one log line at start, no certificate to GET', async (t) => {
  const dir = tempDir(t)
  const partner = makeCertificate(dir, 'partner-signer')
  const lines: string[] = []
  const stream = new PassThrough()
  stream.on('data', (chunk: Buffer) => lines.push(...chunk.toString().split('\n').filter((l) => l !== '')))
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  await loadDemoData(store)
  const app = await buildApp(testConfig({ LOG_LEVEL: 'info' }), { store, logger: { stream } })
  t.teardown(() => app.close())
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  const unsigned = lines.filter((l) => l.includes('SOAP replies are unsigned'))
  t.equal(unsigned.length, 1, 'one line says replies are unsigned')
  t.match(JSON.parse(unsigned[0]!), { level: 30, msg: /set SOAP_SIGNING_KEY and SOAP_SIGNING_CERT/ })

  await createPartnerAccount(store, TEST_PARTNER_SECRET_KEY, { login: 'signer', certificate: partner.cert, userId: '1' })
  const ok = await post(`${url}/v1/UserService`, signedEnvelope('1.1', getUser('1'), partner), XML)
  t.equal(ok.status, 200)
  t.notMatch(ok.text, 'Signature', 'the reply is not signed')
  const cert = await fetch(`${url}/v1/UserService?cert`)
  t.equal(cert.status, 404)
  t.match(readFault(await cert.text()), { errorCode: 'NOT_FOUND', reason: /not signed here/ })
  t.match(await (await fetch(`${url}/v1/UserService?wsdl`)).text(), 'IncludeToken/Never')
})

test('SOAP_SIGNING_KEY and SOAP_SIGNING_CERT are checked at start, each problem in one line', async (t) => {
  const dir = tempDir(t)
  const service = makeCertificate(dir, 'service')
  const other = makeCertificate(dir, 'other')
  writeFileSync(join(dir, 'not-a-key.pem'), 'hello')
  const base = { JWT_SECRET: 'x'.repeat(32), PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY }
  const problem = (env: Record<string, string>) => {
    try {
      loadConfig({ ...base, ...env })
      return null
    } catch (err) {
      return (err as Error).message
    }
  }
  const { SOAP_SIGNING_KEY: key, SOAP_SIGNING_CERT: cert } = signingEnv(service)
  t.equal(problem({ SOAP_SIGNING_KEY: key, SOAP_SIGNING_CERT: cert }), null, 'a key and its certificate')
  const configured = loadConfig({ ...base, SOAP_SIGNING_KEY: key, SOAP_SIGNING_CERT: cert })
  t.equal(configured.soap.signing?.certificatePem, service.cert)
  t.equal(loadConfig(base).soap.signing, null, 'neither: unsigned')
  t.equal(problem({ SOAP_SIGNING_KEY: key }),
    'Configuration: set both SOAP_SIGNING_KEY and SOAP_SIGNING_CERT (PEM files) to sign SOAP replies, or neither')
  t.equal(problem({ SOAP_SIGNING_KEY: key, SOAP_SIGNING_CERT: other.certPath }),
    'Configuration: SOAP_SIGNING_CERT is not the certificate of SOAP_SIGNING_KEY')
  t.equal(problem({ SOAP_SIGNING_KEY: join(dir, 'missing.key'), SOAP_SIGNING_CERT: cert }),
    `Configuration: SOAP_SIGNING_KEY cannot be read (ENOENT: ${join(dir, 'missing.key')})`)
  t.equal(problem({ SOAP_SIGNING_KEY: join(dir, 'not-a-key.pem'), SOAP_SIGNING_CERT: cert }),
    `Configuration: SOAP_SIGNING_KEY is not an unencrypted PEM private key (${join(dir, 'not-a-key.pem')})`)
  t.equal(problem({ SOAP_SIGNING_KEY: key, SOAP_SIGNING_CERT: key }),
    `Configuration: SOAP_SIGNING_CERT is not a PEM certificate (${key})`)
})
