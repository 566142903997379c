// Attacks on signature checking, each through a listening server, each asserting that nothing ran (the
// store did not change, the domain was not called), not only the fault:
// - a captured signed message replayed past the replay cache by an element the XML Signature schema
//   does not allow inside ds:Signature (a foreign SignatureValue carrying the original value);
// - a forged message (the attacker's own key naming a registered partner's certificate) that is wide
//   and carries correct digests: its server CPU is bounded (a bound, not a speed claim), and a forgery
//   is refused by the SignatureValue check, before any Reference is digested;
// - the signed Body moved into a header while the Body that runs, unsigned, has a fresh unique Id;
// - a signed element that our XML reader and xmldom (which the canonicaliser reads) read differently:
//   an attribute of the Body (refused: what xmldom read does not match its digest), and text inside it
//   (served as signed, never as the message's text reads it);
// - a message whose signature check throws after the references were digested: nothing of it runs,
//   with xml-crypto as installed and with one that leaves the references readable (issue #575).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { test } from 'tap'
import soap from 'soap'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { countingStore, domainMethods } from '../helpers/counting-store.ts'
import { TEST_PARTNER_SECRET_KEY, type TestLike } from '../helpers/app.ts'
import { SOAP11, listenSoapApp, post, readFault } from './helpers.ts'
import { makeCertificate, signedEnvelope, type TestCertificate } from './x509.ts'

const NS = 'urn:graphql-query-service:soap/v1/UserService'
const XML = { 'content-type': 'text/xml; charset=utf-8' }
/** The server CPU a refused forgery may cost, at most (user + system, this process: the server is in it). */
const FORGERY_CPU_BOUND_MS = 100

/** A listening app; the partner "admin-signer" (user 1, ADMIN: may rename users) holds `signer`'s certificate. */
async function setup (t: TestLike) {
  const dir = mkdtempSync(join(tmpdir(), 'x509-attacks-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const signer = makeCertificate(dir, 'signer')
  const attacker = makeCertificate(dir, 'attacker')
  const base = openSqliteStore(':memory:')
  t.teardown(() => base.close())
  await loadDemoData(base)
  await createPartnerAccount(base, TEST_PARTNER_SECRET_KEY, { login: 'admin-signer', certificate: signer.cert, userId: '1' })
  const { store, calls } = countingStore(base)
  const { url } = await listenSoapApp(t, {}, { store })
  /** Posts a message expected to be refused; the fault, and the domain calls it made (none expected). */
  const refused = async (xml: string) => {
    const before = calls.length
    const response = await post(`${url}/v1/UserService`, xml, XML)
    const ran = domainMethods(calls.slice(before))
    return { status: response.status, fault: response.status === 200 ? null : readFault(response.text), ran }
  }
  return { url, base, signer, attacker, refused }
}

const rename = (name: string) => `<UpdateUser xmlns="${NS}"><id>2</id><name>${name}</name></UpdateUser>`
const create = (email: string) => `<CreateUser xmlns="${NS}"><name>Mallory</name><email>${email}</email></CreateUser>`
/** node-soap writes the Signature in the default namespace: its SignatureValue element, whole. */
const SIGNATURE_VALUE = /<SignatureValue>([^<]*)<\/SignatureValue>/

test('a captured message with a foreign element inside ds:Signature is not served again', async (t) => {
  const { url, base, signer, refused } = await setup(t)
  const captured = signedEnvelope('1.1', rename('First Rename'), signer)
  t.equal((await post(`${url}/v1/UserService`, captured, XML)).status, 200, 'the captured message was served once')
  const later = await post(`${url}/v1/UserService`, signedEnvelope('1.1', rename('Later Rename'), signer), XML)
  t.equal(later.status, 200, 'a later rename')

  const original = SIGNATURE_VALUE.exec(captured)![1]!
  const random = randomBytes(Buffer.from(original, 'base64').length).toString('base64')
  const foreign = (value: string) => `<x:SignatureValue xmlns:x="urn:attacker">${value}</x:SignatureValue>`
  const replays: Array<[string, string]> = [
    // The original value in a foreign-namespace SignatureValue, random Base64 in ds:SignatureValue: a
    // verifier that reads the first element named SignatureValue verifies the original, and a replay
    // cache keyed by ds:SignatureValue sees a new message.
    ['a foreign SignatureValue before ds:SignatureValue',
      captured.replace(SIGNATURE_VALUE, `${foreign(original)}<SignatureValue>${random}</SignatureValue>`)],
    ['a foreign SignatureValue inside SignedInfo',
      captured.replace('</SignedInfo>', `${foreign(original)}</SignedInfo>`)
        .replace(SIGNATURE_VALUE, `<SignatureValue>${random}</SignatureValue>`)],
    ['a foreign element inside KeyInfo', captured.replace('</KeyInfo>', '<x:Extra xmlns:x="urn:attacker"/></KeyInfo>')],
    ['a ds:Object in the Signature', captured.replace('</KeyInfo>', '</KeyInfo><Object>x</Object>')]
  ]
  for (const [what, xml] of replays) {
    const { fault, ran } = await refused(xml)
    t.match(fault, { code: 'wsse:InvalidSecurity', reason: /may not hold/, errorCode: 'UNAUTHENTICATED' }, `${what}: refused`)
    t.same(ran, [], `${what}: nothing ran`)
    t.equal((await base.usersByIds(['2']))[0]?.name, 'Later Rename', `${what}: the later rename stands`)
  }
  const again = await refused(captured)
  t.match(again.fault, { code: 'wsse:FailedAuthentication', reason: /already been received/ }, 'the plain replay too')
  t.equal((await base.usersByIds(['2']))[0]?.name, 'Later Rename')
})

/** An envelope with header blocks, signed by node-soap's WSSecurityCert with `signer`'s key, `references` too. */
function signedWith (signer: TestCertificate, headers: string, body: string, references: string[]): string {
  const xml = `<soap:Envelope xmlns:soap="${SOAP11}"><soap:Header>${headers}</soap:Header><soap:Body>${body}</soap:Body></soap:Envelope>`
  return new soap.WSSecurityCert(signer.key, signer.cert, '', { additionalReferences: references }).postProcess(xml, 'soap')
}

/** The attacker's message made to name `victim`'s (public, registered) certificate in its BinarySecurityToken. */
function naming (xml: string, attacker: TestCertificate, victim: TestCertificate): string {
  const base64 = (pem: string) => pem.replace(/-----[^-]+-----|\s/g, '')
  if (!xml.includes(base64(attacker.cert))) throw new Error('the message does not carry the certificate it was signed with')
  return xml.replace(base64(attacker.cert), base64(victim.cert))
}

test('a forged wide message costs a bounded server CPU; a forgery fails on its SignatureValue', async (t) => {
  const { signer, attacker, refused } = await setup(t)
  // 900 elements of 31 attributes each (within SOAP_MAX_ELEMENTS and SOAP_MAX_ATTRIBUTES) in six
  // header blocks, all signed with correct digests (anyone can compute digests) beside Body and Timestamp.
  const row = ' ' + Array.from({ length: 31 }, (_, i) => `a${i}="value-${i}"`).join(' ')
  const blocks = Array.from({ length: 6 }, (_, b) =>
    `<w:Wide${b} xmlns:w="urn:wide">${`<w:e${row}/>`.repeat(150)}</w:Wide${b}>`)
  const wide = naming(signedWith(attacker, blocks.join(''), create('wide@example.com'),
    blocks.map((_, b) => `w:Wide${b}`)), attacker, signer)
  t.equal((wide.match(/<Reference /g) ?? []).length, 8, '8 References')
  t.ok(wide.length > 300_000, `${wide.length} bytes`)

  // The least of three sends of the same forgery (each is refused before anything is remembered, so each
  // does the same work): this process also runs the test and other suites run beside it, and a bound on
  // the work a message can cause must not fail for a collection or a neighbour's burst.
  const costs: number[] = []
  for (let i = 0; i < 3; i++) {
    const before = process.cpuUsage()
    const { fault, ran } = await refused(wide)
    const cpu = process.cpuUsage(before)
    costs.push((cpu.user + cpu.system) / 1000)
    t.match(fault, { code: /^wsse:/, errorCode: 'UNAUTHENTICATED' }, 'refused')
    t.same(ran, [], 'nothing ran')
  }
  const cpuMs = Math.min(...costs)
  t.ok(cpuMs < FORGERY_CPU_BOUND_MS, `the forged wide message cost ${cpuMs.toFixed(1)} ms of CPU (bound ${FORGERY_CPU_BOUND_MS} ms; least of ${costs.map((c) => c.toFixed(1)).join(', ')})`)

  // A forgery of ordinary size: refused by the SignatureValue, before any Reference is digested.
  const forged = naming(signedWith(attacker, '', create('forged@example.com'), []), attacker, signer)
  const small = await refused(forged)
  t.match(small.fault, { code: 'wsse:FailedCheck', reason: 'The SignatureValue does not verify with the registered certificate' })
  t.same(small.ran, [], 'nothing ran')
})

test('the signed Body moved into a header, the unsigned Body given a fresh unique Id: refused, nothing runs', async (t) => {
  const { base, signer, refused } = await setup(t)
  const xml = signedEnvelope('1.1', create('signed@example.com'), signer)
  const signedBody = /<soap:Body Id="_0">[\s\S]*<\/soap:Body>/.exec(xml)![0]
  const wrapped = xml.replace(signedBody, `<soap:Body Id="fresh-unique-id">${create('unsigned@example.com')}</soap:Body>`)
    .replace('</soap:Header>', `<Wrapper xmlns="urn:x">${signedBody}</Wrapper></soap:Header>`)
  const { fault, ran } = await refused(wrapped)
  t.match(fault, { code: 'wsse:InvalidSecurity', reason: 'The signature does not cover the message\'s Body' })
  t.same(ran, [], 'nothing ran')
  const count = await base.countUsers()
  t.notOk((await base.listUsers(count)).some((u) => u.email === 'unsigned@example.com'), 'the unsigned user was not created')
})

test('a signed element that our reader and xmldom read differently is refused, nothing runs', async (t) => {
  const { signer, refused } = await setup(t)
  const xml = signedEnvelope('1.1', create('differential@example.com'), signer)
  // A second Id on the Body with U+2028 in it: XML 1.0 (our reader) keeps it, xmldom reads it as a space,
  // so the Body xmldom read (which the signature is checked on) is not the one that was signed.
  const differential = xml.replace('<soap:Body Id="_0">', '<soap:Body Id="_0" xmlns:x="urn:x" x:Id="_0\u2028b">')
  const { fault, ran } = await refused(differential)
  t.match(fault, { code: 'wsse:InvalidSecurity', reason: /could not be read consistently/ })
  t.same(ran, [], 'nothing ran')
})

test('a Body whose text our reader and xmldom read differently runs as it was signed, never as the message reads', async (t) => {
  const { url, base, signer } = await setup(t)
  // U+2028 in a name: XML 1.0 (our reader) keeps it; xmldom reads it as a line feed. The partner signed
  // "Signed\nName" (node-soap writes what xmldom read, a line feed); the message carries U+2028 in its
  // place, which xmldom reads as the same line feed, so the signature verifies. The service runs the
  // signed Body (the canonical text its digest is of), never its own reading of the message ("Signed\u2028Name").
  const email = 'line-separator@example.com'
  const signed = signedEnvelope('1.1', `<CreateUser xmlns="${NS}"><name>Signed\nName</name><email>${email}</email></CreateUser>`, signer)
  const xml = signed.replace('Signed\nName', 'Signed\u2028Name')
  t.not(xml, signed)
  const response = await post(`${url}/v1/UserService`, xml, XML)
  t.equal(response.status, 200, 'answered')
  const count = await base.countUsers()
  const created = (await base.listUsers(count)).filter((u) => u.email === email)
  // Compared with their non-ASCII characters spelled out: a raw U+2028 in a report breaks its lines.
  const visible = (text: string) => text.replace(/[^\x20-\x7e]/g, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`)
  t.same(created.map((u) => visible(u.name)), [visible('Signed\nName')], 'created once, with the name as signed')
})

test('a signed message whose last Reference fails after the Body and the Timestamp digested: nothing of it runs', async (t) => {
  const { base, signer, refused } = await setup(t)
  // A third Reference, to a header block changed after signing: the Body and the Timestamp verify first,
  // then its digest fails. Nothing read on the way may run.
  const signed = signedWith(signer, '<x:Extra xmlns:x="urn:x" Id="extra">as signed</x:Extra>', create('after-throw@example.com'), ['x:Extra'])
  const xml = signed.replace('>as signed</x:Extra>', '>changed</x:Extra>')
  t.not(xml, signed)
  const { fault, ran } = await refused(xml)
  t.match(fault, { code: 'wsse:FailedCheck', reason: /The digest of #extra does not match/ })
  t.same(ran, [], 'nothing ran')
  const count = await base.countUsers()
  t.notOk((await base.listUsers(count)).some((u) => u.email === 'after-throw@example.com'), 'no user created')
})
