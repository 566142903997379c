// zeep, the most common Python SOAP client, as partners run it: Debian's python3-zeep with
// python3-xmlsec, driven by test/soap/zeep-client.py through /usr/bin/python3 (the python3 on PATH may
// be another one without these modules). Without them these tests fail, naming the packages.
// - Key references: zeep's `Signature` names its key by a ds:X509Data (the certificate and its issuer
//   and serial number), `BinarySignature` by a BinarySecurityToken; both are accepted when the
//   certificate is registered, and an X509Data is only ever a way to name a registered certificate.
// - Round trips as a partner runs them (the recipe of docs/soap.md: SHA-256, a wsu:Timestamp added to
//   the Security header before signing), both styles, v1 and v2, SOAP 1.1 and 1.2, against a listening
//   server that signs its replies: zeep verifies every reply (faults included) against the service's
//   certificate, and refuses one checked against another certificate.
import { execFile } from 'node:child_process'
import { X509Certificate } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { test } from 'tap'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { countingStore, domainMethods } from '../helpers/counting-store.ts'
import { TEST_PARTNER_SECRET_KEY, type TestLike } from '../helpers/app.ts'
import { listenSoapApp, post, readFault } from './helpers.ts'
import { makeCertificate, type TestCertificate } from './x509.ts'

const run = promisify(execFile)
const PYTHON = '/usr/bin/python3'
const CLIENT = new URL('./zeep-client.py', import.meta.url).pathname
const PACKAGES = 'python3-zeep and python3-xmlsec (Debian: apt-get install python3-zeep python3-xmlsec; .ci/system-deps.sh installs them)'
const XML = { 'content-type': 'text/xml; charset=utf-8' }

export interface ZeepArgs {
  wsdl: string
  soap12: boolean
  style: 'Signature' | 'BinarySignature'
  key: string
  cert: string
  serviceCert: string | null
  operation: string
  params: Record<string, unknown>
  mode: 'call' | 'message'
}

/** Runs zeep; fails (never skips) with the packages' names when zeep or xmlsec is missing. */
export async function zeep (args: ZeepArgs): Promise<Record<string, any>> {
  let stdout: string
  try {
    ({ stdout } = await run(PYTHON, [CLIENT, JSON.stringify(args)], { timeout: 30_000 }))
  } catch (err) {
    const failure = err as { code?: number | string; stdout?: string; stderr?: string }
    if (failure.code === 3 || failure.code === 'ENOENT') {
      throw new Error(`zeep tests need ${PYTHON} with ${PACKAGES}: ${failure.stdout ?? failure.code}`)
    }
    throw new Error(`zeep failed: ${failure.stderr ?? String(err)}`)
  }
  return JSON.parse(stdout) as Record<string, any>
}

function tempDir (t: TestLike): string {
  const dir = mkdtempSync(join(tmpdir(), 'zeep-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** A listening app whose store counts calls; "zeep-partner" (user 1, ADMIN) holds `partner`'s certificate. */
async function setup (t: TestLike, env: Record<string, string> = {}) {
  const dir = tempDir(t)
  const partner = makeCertificate(dir, 'zeep-partner')
  const base = openSqliteStore(':memory:')
  t.teardown(() => base.close())
  await loadDemoData(base)
  await createPartnerAccount(base, TEST_PARTNER_SECRET_KEY, { login: 'zeep-partner', certificate: partner.cert, userId: '1' })
  const { store, calls } = countingStore(base)
  const app = await listenSoapApp(t, env, { store })
  const domainCalls = () => domainMethods(calls)
  return { ...app, dir, partner, base, calls, domainCalls }
}

/** X509IssuerName (RFC 4514, most specific first) and X509SerialNumber (decimal) of a certificate. */
function issuerSerial (who: TestCertificate, serial?: bigint): string {
  const certificate = new X509Certificate(who.cert)
  const name = certificate.issuer.split('\n').reverse().join(', ')
  const number = serial ?? BigInt(`0x${certificate.serialNumber}`)
  return `<X509IssuerName>${name}</X509IssuerName><X509SerialNumber>${number}</X509SerialNumber>`
}

const keyFiles = (who: TestCertificate) => ({ key: who.certPath.replace(/\.pem$/, '.key'), cert: who.certPath })

test('zeep Signature (ds:X509Data) and BinarySignature are served; an X509Data only names a registered certificate', async (t) => {
  const { url, dir, partner, domainCalls } = await setup(t)
  const endpoint = `${url}/v1/UserService`
  const message = async (style: ZeepArgs['style'], who: TestCertificate, name: string) => (await zeep({
    wsdl: `${endpoint}?wsdl`,
    soap12: false,
    style,
    ...keyFiles(who),
    serviceCert: null,
    operation: 'UpdateUser',
    params: { id: '2', name },
    mode: 'message'
  })).message as string

  for (const style of ['Signature', 'BinarySignature'] as const) {
    const xml = await message(style, partner, `Renamed by ${style}`)
    t.match(xml, style === 'Signature' ? /<X509Data>/ : /BinarySecurityToken/, `${style}: zeep's key reference`)
    t.match(xml, /rsa-sha256/)
    const response = await post(endpoint, xml, XML)
    t.equal(response.status, 200, `${style}: served (${response.text.slice(0, 300)})`)
    t.match(response.text, `<name>Renamed by ${style}</name>`)
  }

  // WSS4J's default key reference: the X509IssuerSerial alone (KeyInfo is not signed: rewritten here).
  const byIssuerSerial = (signed: string, named: TestCertificate, serial?: bigint) => signed
    .replace(/<X509Certificate>[^<]*<\/X509Certificate>/, '')
    .replace('<X509IssuerSerial/>', `<X509IssuerSerial>${issuerSerial(named, serial)}</X509IssuerSerial>`)
  const alone = await post(endpoint, byIssuerSerial(await message('Signature', partner, 'By Issuer Serial'), partner), XML)
  t.equal(alone.status, 200, `an X509IssuerSerial alone finds the registered certificate (${alone.text.slice(0, 200)})`)
  t.match(alone.text, '<name>By Issuer Serial</name>')

  const xml = await message('Signature', partner, 'Mallory')
  const der = (who: TestCertificate) => who.cert.replace(/-----[^-]+-----|\s/g, '')
  const stranger = makeCertificate(dir, 'stranger')
  const strangers = await message('Signature', stranger, 'Mallory')
  const refusals: Array<[string, string, { code: string, reason: RegExp }]> = [
    ['an X509IssuerSerial alone naming no registered certificate', byIssuerSerial(xml, partner, 12345n),
      { code: 'wsse:FailedAuthentication', reason: /not registered/ }],
    ['a stranger\'s signature, the X509IssuerSerial of a registered certificate', byIssuerSerial(strangers, partner),
      { code: 'wsse:FailedCheck', reason: /SignatureValue does not verify/ }],
    ['an X509IssuerSerial naming another certificate than the one sent',
      xml.replace('<X509IssuerSerial/>', `<X509IssuerSerial>${issuerSerial(partner, 12345n)}</X509IssuerSerial>`),
      { code: 'wsse:InvalidSecurity', reason: /does not name the X509Certificate/ }],
    ['an unregistered certificate', strangers, { code: 'wsse:FailedAuthentication', reason: /not registered/ }],
    // The registered partner's certificate (public) embedded in a message the stranger signed: never trusted by itself.
    ['a registered certificate embedded in a stranger\'s signature',
      strangers.replace(/<X509Certificate>[^<]*<\/X509Certificate>/, `<X509Certificate>${der(partner)}</X509Certificate>`),
      { code: 'wsse:FailedCheck', reason: /SignatureValue does not verify/ }],
    ['a foreign element in X509Data', xml.replace('</X509Data>', '<x:Extra xmlns:x="urn:x"/></X509Data>'),
      { code: 'wsse:InvalidSecurity', reason: /X509Data may not hold/ }]
  ]
  refusals.push(['a matching X509IssuerSerial, a certificate registered to nobody',
    strangers.replace('<X509IssuerSerial/>', `<X509IssuerSerial>${issuerSerial(stranger)}</X509IssuerSerial>`),
    { code: 'wsse:FailedAuthentication', reason: /not registered/ }])
  for (const [what, body, fault] of refusals) {
    const before = domainCalls().length
    const response = await post(endpoint, body, XML)
    t.match(readFault(response.text), { ...fault, errorCode: 'UNAUTHENTICATED' }, what)
    t.equal(domainCalls().length, before, `${what}: nothing ran`)
  }
})

/** The service's signing key and certificate, made for the test, as SOAP_SIGNING_KEY and SOAP_SIGNING_CERT. */
function serviceSigning (dir: string) {
  const service = makeCertificate(dir, 'service')
  return { service, env: { SOAP_SIGNING_KEY: keyFiles(service).key, SOAP_SIGNING_CERT: service.certPath } }
}

test('zeep round trips with a verified reply: both styles, v1 and v2, SOAP 1.1 and 1.2', async (t) => {
  const dir = tempDir(t)
  const { service, env } = serviceSigning(dir)
  const { url, partner, base } = await setup(t, env)
  const call = (version: string, soap12: boolean, style: ZeepArgs['style'], operation: string,
    params: Record<string, unknown>, serviceCert = service.certPath) => zeep({
    wsdl: `${url}/${version}/UserService?wsdl`,
    soap12,
    style,
    ...keyFiles(partner),
    serviceCert,
    operation,
    params,
    mode: 'call'
  })
  for (const version of ['v1', 'v2']) {
    for (const soap12 of [false, true]) {
      for (const style of ['Signature', 'BinarySignature'] as const) {
        const what = `${version} SOAP ${soap12 ? '1.2' : '1.1'} ${style}`
        const name = `Renamed ${version} ${soap12 ? '12' : '11'} ${style}`
        const renamed = await call(version, soap12, style, 'UpdateUser', { id: '2', name })
        t.match(renamed, { result: { id: '2', name } }, `${what}: served, the reply verified by zeep`)
        t.equal((await base.usersByIds(['2']))[0]?.name, name, `${what}: the rename is stored`)
        // A fault is signed too: zeep verifies it, then raises it as a Fault with its code.
        const missing = await call(version, soap12, style, 'GetUser', { id: '999999' })
        t.match(missing, { fault: /not found/i, code: 'NOT_FOUND' }, `${what}: a signed fault`)
      }
    }
  }
  const listed = await call('v2', false, 'BinarySignature', 'ListUsers', { pageSize: 2 })
  t.equal(listed.result?.user?.length, 2, 'v2 ListUsers')
  // zeep really verifies: with another certificate than the service's, the same reply is refused.
  const other = makeCertificate(dir, 'not-the-service')
  t.match(await call('v1', false, 'BinarySignature', 'GetUser', { id: '2' }, other.certPath),
    { signatureVerificationFailed: true }, 'a reply checked against another certificate fails')
})
