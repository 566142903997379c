// The SOAP core (app/soap/service.ts, createSoapService) driven with plain objects: no Fastify, no
// listening server. A real store (in-memory sqlite with the demo users and partner accounts), a real
// WS-Security (in-process nonces, a clock the test sets) and a fake Admission that records every budget
// call and can refuse (RATE_LIMITED) at any step. What is checked is the core's own rules: the envelope
// shapes of SOAP 1.1/1.2 and of each service version, every fault it can produce (its code, its
// errorCode, its reason), what each message is charged, and that nothing reaches the domain on a refusal.
// The listening-server tests (faults.test.ts, budgets.test.ts, ws-security.test.ts, client.test.ts,
// zeep.test.ts) cover the HTTP carrier: status lines, content types, headers and real SOAP clients.
import { createHash, randomBytes } from 'node:crypto'
import { test } from 'tap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import type { Caller, DomainEvent, Events } from '../../app/core/domain/context.ts'
import { cursorKey } from '../../app/core/domain/pages.ts'
import { AppError, type ErrorCode } from '../../app/core/errors.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import type { Store } from '../../app/core/store/types.ts'
import { parseXml, type SoapVersion, type XmlElement } from '../../app/soap/envelope.ts'
import type { FaultKind } from '../../app/soap/faults.ts'
import { SERVICE_VERSIONS, costOf, namespaceOf, type ServiceVersion } from '../../app/soap/operations.ts'
import { createSoapService, type Admission } from '../../app/soap/service.ts'
import { createWsSecurity, memoryNonceCache, type NonceCache } from '../../app/soap/ws-security.ts'
import { testConfig, type TestLike } from '../helpers/app.ts'
import { AUTHENTICATION_CALLS, countingStore } from '../helpers/counting-store.ts'
import { SOAP11, SOAP12, WSSE, WSU, envelope, readFault, textToken, type FaultInfo } from './helpers.ts'

const config = testConfig()
const [V1, V2] = SERVICE_VERSIONS as [ServiceVersion, ServiceVersion]
const NS1 = namespaceOf(V1, config.soap.namespaceBase)
const NS2 = namespaceOf(V2, config.soap.namespaceBase)
const XSI = 'http://www.w3.org/2001/XMLSchema-instance'
const TOKEN_PROFILE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0'
const DIGEST = `${TOKEN_PROFILE}#PasswordDigest`
/** The instant WS-Security judges freshness against (the service's injected clock), unless a test moves it. */
const NOW = Date.parse('2030-03-01T12:00:00.000Z')
const PARTNER: Caller = { id: '5', role: 'SERVICE' }
const pricing = { maxPageSize: config.input.maxPageSize, mutationCost: config.budgets.mutationCost }

/**
 * A fresh in-memory store with the demo users (5 = "Partner Inc.", SERVICE), the partner "partner"/"s3cret"
 * bound to user 5 (password sealed: text and digest checks without scrypt) and "textonly"/"t3xt-only"
 * bound to user 4 (a scrypt hash only: its text password is verified by scrypt).
 */
async function seededStore (t: TestLike): Promise<Store> {
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  await loadDemoData(store)
  await createPartnerAccount(store, config.soap.partnerSecretKey, { login: 'partner', password: 's3cret', userId: '5' })
  await createPartnerAccount(store, config.soap.partnerSecretKey, { login: 'textonly', password: 't3xt-only', userId: '4', textOnly: true })
  return store
}

type Step = 'checkAddress' | 'spendOnAddress' | 'spendRequest' | 'spendCost'

/** An Admission recording each call (with its caller and cost), refusing with RATE_LIMITED at `refuseAt`. */
function fakeAdmission (refuseAt?: Step) {
  const calls: Array<{ step: Step; caller?: Caller; cost?: number }> = []
  const at = (step: Step, caller?: Caller, cost?: number) => {
    calls.push({ step, ...(caller ? { caller } : {}), ...(cost === undefined ? {} : { cost }) })
    if (step === refuseAt) throw new AppError('RATE_LIMITED', `Too many requests (${step})`, { retryAfter: 7 })
  }
  const admission: Admission = {
    async checkAddress () { at('checkAddress') },
    async spendOnAddress () { at('spendOnAddress') },
    async spendRequest (caller) { at('spendRequest', caller) },
    async spendCost (caller, cost) { at('spendCost', caller, cost) }
  }
  return { admission, calls, steps: () => calls.map((c) => c.step) }
}

/**
 * The core over `store` (wrapped to count its calls), built from the test configuration as
 * app/app.ts and routes/soap/index.ts build it.
 */
function serviceOver (
  store: Store,
  options: { timeoutMs?: number; nonces?: NonceCache; clock?: () => number } = {}
) {
  const counted = countingStore(store)
  const published: DomainEvent[] = []
  const events: Events = { async publish (event) { published.push(event) } }
  const wsSecurity = createWsSecurity({
    store: counted.store,
    partnerSecretKey: config.soap.partnerSecretKey,
    maxAgeMs: config.soap.maxAgeSec * 1000,
    nonces: options.nonces ?? memoryNonceCache(),
    clock: options.clock ?? (() => NOW),
    allowSha1: config.soap.allowSha1
  })
  const service = createSoapService({
    namespaceBase: config.soap.namespaceBase,
    store: counted.store,
    events,
    caps: config.input,
    cursorKey: cursorKey(config.cursors.secret),
    mutationCost: config.budgets.mutationCost,
    xmlLimits: { maxElements: config.soap.maxElements, maxAttributes: config.soap.maxAttributes },
    timeoutMs: options.timeoutMs ?? config.execution.timeoutMs,
    wsSecurity
  })
  /** The store calls the domain made (the authentication lookups left out). */
  const domainCalls = () => counted.calls.filter((c) => !AUTHENTICATION_CALLS.has(c.method))
  return { service, domainCalls, published }
}

type Core = ReturnType<typeof serviceOver>

/** One exchange: the response, the budget calls and what reached onInternalError. */
async function exchange (
  core: Core,
  version: ServiceVersion,
  soapVersion: SoapVersion,
  text: string,
  options: { actions?: Array<string | undefined>; refuseAt?: Step } = {}
) {
  const fake = fakeAdmission(options.refuseAt)
  const internal: unknown[] = []
  const response = await core.service.handle(
    version,
    { soapVersion, envelope: text, actions: options.actions ?? [undefined, undefined] },
    fake.admission,
    (err) => internal.push(err)
  )
  return { response, calls: fake.calls, steps: fake.steps(), internal }
}

const AUTH = textToken('partner', 's3cret')
const getUser = (id = '2', ns = NS1) => `<GetUser xmlns="${ns}"><id>${id}</id></GetUser>`

/** A PasswordDigest UsernameToken for `login`: Base64(SHA-1(nonce + Created + password)). */
function digestToken (created: string, options: { password?: string; nonce?: Buffer; login?: string } = {}): string {
  const nonce = options.nonce ?? randomBytes(16)
  const digest = createHash('sha1').update(nonce).update(created).update(options.password ?? 's3cret').digest('base64')
  return `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}"><wsse:UsernameToken><wsse:Username>${options.login ?? 'partner'}</wsse:Username>` +
    `<wsse:Password Type="${DIGEST}">${digest}</wsse:Password><wsse:Nonce>${nonce.toString('base64')}</wsse:Nonce>` +
    `<wsu:Created>${created}</wsu:Created></wsse:UsernameToken></wsse:Security>`
}

/** A PasswordText token (no Nonce) with its own Created. */
function createdToken (created: string, password = 's3cret'): string {
  return `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}"><wsse:UsernameToken><wsse:Username>partner</wsse:Username>` +
    `<wsse:Password>${password}</wsse:Password><wsu:Created>${created}</wsu:Created></wsse:UsernameToken></wsse:Security>`
}

/** The fault of a response, or a failed assertion (and an empty fault) when it is not one: the table goes on. */
function faultOf (t: { fail (message: string): unknown }, body: string, label: string): FaultInfo {
  try {
    return readFault(body)
  } catch {
    t.fail(`${label}: expected a fault, got ${body.slice(0, 400)}`)
    return { soapVersion: '1.1', code: '', subcode: null, reason: '', errorCode: '' }
  }
}

const iso = (ms: number) => new Date(ms).toISOString()

/** The Body's single child of a (non-fault) response envelope, with the envelope's namespace. */
function responseElement (xml: string): { envelopeNs: string; element: XmlElement } {
  const root = parseXml(xml)
  const body = root.children.find((c) => c.local === 'Body')
  if (!body || body.children.length !== 1) throw new Error(`no single Body child: ${xml}`)
  return { envelopeNs: root.ns, element: body.children[0]! }
}

/** The text of each child of `element`, by local name (the last one wins). */
function fields (element: XmlElement | undefined): Record<string, string> {
  return Object.fromEntries((element?.children ?? []).map((c) => [c.local, c.text]))
}

test('GetUser with a PasswordText UsernameToken: the user in SOAP 1.1 and 1.2, for v1 and v2', async (t) => {
  const store = await seededStore(t)
  t.not(NS1, NS2, 'the two service versions have their own namespaces')
  for (const version of [V1, V2]) {
    const ns = namespaceOf(version, config.soap.namespaceBase)
    for (const [soapVersion, envNs, contentType] of [
      ['1.1', SOAP11, 'text/xml; charset=utf-8'],
      ['1.2', SOAP12, 'application/soap+xml; charset=utf-8']
    ] as const) {
      const label = `${version.id}, SOAP ${soapVersion}`
      const core = serviceOver(store)
      const { response, internal } = await exchange(core, version, soapVersion, envelope(soapVersion, getUser('2', ns), AUTH))
      t.equal(response.status, 200, `${label}: answered 200`)
      t.equal(response.contentType, contentType, `${label}: the SOAP version's media type`)
      t.equal(response.fault, undefined, `${label}: not a fault`)
      const { envelopeNs, element } = responseElement(response.body)
      t.equal(envelopeNs, envNs, `${label}: the envelope namespace of SOAP ${soapVersion}`)
      t.equal(element.local, 'GetUserResponse', `${label}: the operation's response element`)
      t.equal(element.ns, ns, `${label}: in the namespace of ${version.id}`)
      const user = element.children.find((c) => c.local === 'user')
      t.equal(user?.ns, ns, `${label}: the user element is qualified (elementFormDefault)`)
      const got = fields(user)
      t.equal(got.id, '2', `${label}: the user asked for`)
      t.equal(got.name, 'Ada Lovelace', `${label}: read from the store`)
      t.equal(got.email, undefined, `${label}: another user's email is hidden from a SERVICE partner`)
      if (version === V1) t.equal(got.createdAt, undefined, 'v1: User has no createdAt')
      else t.match(got.createdAt, /^\d{4}-\d\d-\d\dT/, 'v2: User has createdAt')
      t.same(core.domainCalls().map((c) => c.method), ['usersByIds'], `${label}: one store read`)
      t.same(internal, [], `${label}: no internal error`)
    }
  }
})

test('PasswordDigest with a Nonce and a Created authenticates; the digest is over the Created as sent', async (t) => {
  const store = await seededStore(t)
  for (const soapVersion of ['1.1', '1.2'] as const) {
    const core = serviceOver(store)
    const created = iso(NOW - 10_000)
    const ok = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), digestToken(created)))
    t.equal(ok.response.status, 200, `SOAP ${soapVersion}: a correct digest answers`)
    t.equal(fields(responseElement(ok.response.body).element.children[0]).name, 'Ada Lovelace')
    t.same(ok.calls.map((c) => c.step), ['spendRequest', 'spendCost'], 'a sealed password is checked without scrypt, so checkAddress is not needed')
    // The same instant spelled "+00:00" (zeep's spelling) is hashed as received.
    const zeep = created.replace('Z', '+00:00')
    const other = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), digestToken(zeep)))
    t.equal(other.response.status, 200, `SOAP ${soapVersion}: Created with +00:00`)
    const wrong = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), digestToken(created, { password: 'nope!!' })))
    t.match(faultOf(t, wrong.response.body, 'the response'), { errorCode: 'UNAUTHENTICATED', reason: 'The security token could not be authenticated or authorized' }, 'a wrong digest is refused')
  }
})

test('unqualified child elements are accepted; xsi:nil is an absent value', async (t) => {
  const store = await seededStore(t)
  const core = serviceOver(store)
  // The operation element qualified by a prefix, its child in no namespace (as several toolkits send it).
  const unqualified = `<u:GetUser xmlns:u="${NS1}"><id>3</id></u:GetUser>`
  const plain = await exchange(core, V1, '1.1', envelope('1.1', unqualified, AUTH))
  t.equal(plain.response.status, 200, 'an unqualified <id> is read')
  t.equal(fields(responseElement(plain.response.body).element.children[0]).name, 'Alan Turing')

  // xsi:nil on an optional element: absent (not the empty string, which a name may not be).
  const update = `<UpdateUser xmlns="${NS1}" xmlns:xsi="${XSI}"><id>5</id><name xsi:nil="true"/><email>ops@partner.example</email></UpdateUser>`
  const updated = await exchange(core, V1, '1.1', envelope('1.1', update, AUTH))
  t.equal(updated.response.status, 200, `a partner updates its own user: ${updated.response.body}`)
  const user = fields(responseElement(updated.response.body).element.children[0])
  t.equal(user.name, 'Partner Inc.', 'the nil name is left as it was')
  t.equal(user.email, 'ops@partner.example', 'the email is changed (and visible to the user itself)')
  const write = core.domainCalls().find((c) => c.method === 'updateUser')
  t.same(write?.args, ['5', { email: 'ops@partner.example' }], 'the store is asked to change the email only')

  // xsi:nil="1" on an optional xs:int: absent, so the default page size (not an xs:int error).
  const list = `<ListUsers xmlns="${NS2}" xmlns:xsi="${XSI}"><pageSize xsi:nil="1"/></ListUsers>`
  const listed = await exchange(core, V2, '1.1', envelope('1.1', list, AUTH))
  t.equal(listed.response.status, 200, `a nil pageSize is no page size: ${listed.response.body}`)
  t.equal(listed.calls.find((c) => c.step === 'spendCost')?.cost, 20 * V2.userFields.length, 'priced at the default page size')
})

test('the SOAP action: absent, empty ("") or matching (quoted or not) is accepted', async (t) => {
  const store = await seededStore(t)
  const core = serviceOver(store)
  const action = `${NS1}/GetUser`
  for (const actions of [[undefined, undefined], ['""', undefined], ['', undefined], [action, undefined], [`"${action}"`, undefined], [undefined, ` ${action} `], ['""', `"${action}"`]]) {
    const soapVersion = actions[1] === undefined ? '1.1' : '1.2'
    const { response } = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), AUTH), { actions })
    t.equal(response.status, 200, `actions ${JSON.stringify(actions)} are accepted`)
  }
})

test('a header for another actor/role is ignored, even with mustUnderstand; one for us is a MustUnderstand fault', async (t) => {
  const store = await seededStore(t)
  for (const soapVersion of ['1.1', '1.2'] as const) {
    const core = serviceOver(store)
    const target = soapVersion === '1.1' ? 's:actor' : 's:role'
    const elsewhere = `<x:Transaction xmlns:x="urn:example:tx" s:mustUnderstand="1" ${target}="http://example.com/another-node">1</x:Transaction>`
    const ignored = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), AUTH + elsewhere))
    t.equal(ignored.response.status, 200, `SOAP ${soapVersion}: a header for another node is not ours to understand`)
    const next = soapVersion === '1.1' ? 'http://schemas.xmlsoap.org/soap/actor/next' : SOAP12 + '/role/ultimateReceiver'
    const forUs = `<x:Transaction xmlns:x="urn:example:tx" s:mustUnderstand="true" ${target}="${next}">1</x:Transaction>`
    const refused = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), AUTH + forUs))
    t.match(faultOf(t, refused.response.body, 'the response'), { errorCode: 'BAD_REQUEST', reason: 'Header not understood: {urn:example:tx}Transaction' },
      `SOAP ${soapVersion}: the "next" node is us`)
    if (soapVersion === '1.2') {
      t.match(refused.response.body, /<env:Header><env:NotUnderstood xmlns:h="urn:example:tx" qname="h:Transaction"\/><\/env:Header>/,
        'SOAP 1.2 names the header in a NotUnderstood block')
    }
    // A mustUnderstand="0" header is optional: ignored.
    const optional = '<x:Transaction xmlns:x="urn:example:tx" s:mustUnderstand="0">1</x:Transaction>'
    const skipped = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), AUTH + optional))
    t.equal(skipped.response.status, 200, `SOAP ${soapVersion}: an optional header is ignored`)
    t.same(core.domainCalls().map((c) => c.method), ['usersByIds', 'usersByIds'], 'only the accepted messages reached the domain')
  }
})

interface FaultCase {
  name: string
  version?: ServiceVersion
  message: (soapVersion: SoapVersion) => string
  actions?: (soapVersion: SoapVersion) => Array<string | undefined>
  refuseAt?: Step
  kind: FaultKind
  /** A WS-Security fault code (wsse:...). */
  wsse?: string
  errorCode: ErrorCode
  reason: string | RegExp | ((soapVersion: SoapVersion) => string)
  /** The Admission calls the message makes, in order. */
  steps: Step[]
}

const other = (v: SoapVersion): SoapVersion => (v === '1.1' ? '1.2' : '1.1')
const envNs = (v: SoapVersion) => (v === '1.1' ? SOAP11 : SOAP12)
const ANONYMOUS: Step[] = ['spendOnAddress']
const REFUSED_LOGIN: Step[] = ['checkAddress', 'spendOnAddress']
const AUTHENTICATED: Step[] = ['spendRequest']
const CHARGED: Step[] = ['spendRequest', 'spendCost']
const AUTH_FAILED = 'The security token could not be authenticated or authorized'

const FAULTS: FaultCase[] = [
  // The envelope: nobody authenticated yet, the address is charged.
  { name: 'malformed XML', message: () => '<?xml version="1.0"?><s:Envelope xmlns:s="x"><s:Body>', kind: 'Client', errorCode: 'BAD_REQUEST', reason: /^Malformed XML: /, steps: ANONYMOUS },
  { name: 'a DOCTYPE', message: (v) => `<!DOCTYPE x [<!ENTITY a "b">]>${envelope(v, getUser(), AUTH).replace(/^<\?xml[^>]*>/, '')}`, kind: 'Client', errorCode: 'BAD_REQUEST', reason: 'DOCTYPE and other markup declarations are not allowed', steps: ANONYMOUS },
  { name: 'more elements than SOAP_MAX_ELEMENTS', message: (v) => envelope(v, getUser(), AUTH + `<x:Pad xmlns:x="urn:pad">${'<x:p/>'.repeat(config.soap.maxElements)}</x:Pad>`), kind: 'Client', errorCode: 'BAD_REQUEST', reason: `The message has more than ${config.soap.maxElements} elements`, steps: ANONYMOUS },
  { name: 'not an Envelope', message: () => `<?xml version="1.0"?>${getUser()}`, kind: 'VersionMismatch', errorCode: 'BAD_REQUEST', reason: 'The root element is not a SOAP Envelope', steps: ANONYMOUS },
  { name: 'an Envelope of the other SOAP version', message: (v) => envelope(other(v), getUser(), AUTH), kind: 'VersionMismatch', errorCode: 'BAD_REQUEST', reason: (v) => `A SOAP ${other(v)} envelope was sent with the Content-Type of SOAP ${v}`, steps: ANONYMOUS },
  { name: 'no Body', message: (v) => `<s:Envelope xmlns:s="${envNs(v)}"><s:Header>${AUTH}</s:Header></s:Envelope>`, kind: 'Client', errorCode: 'BAD_REQUEST', reason: 'The Envelope has no Body', steps: ANONYMOUS },
  { name: 'two operations in the Body', message: (v) => envelope(v, getUser() + getUser(), AUTH), kind: 'Client', errorCode: 'BAD_REQUEST', reason: 'The Body must hold exactly one element (the operation); it holds 2', steps: ANONYMOUS },
  { name: 'a Header after the Body', message: (v) => `<s:Envelope xmlns:s="${envNs(v)}"><s:Body>${getUser()}</s:Body><s:Header/></s:Envelope>`, kind: 'Client', errorCode: 'BAD_REQUEST', reason: /^Unexpected element \{http[^}]+\}Header in the Envelope/, steps: ANONYMOUS },
  { name: 'a mandatory header not understood', message: (v) => envelope(v, getUser(), AUTH + '<x:Transaction xmlns:x="urn:example:tx" s:mustUnderstand="1">1</x:Transaction>'), kind: 'MustUnderstand', errorCode: 'BAD_REQUEST', reason: 'Header not understood: {urn:example:tx}Transaction', steps: ANONYMOUS },
  { name: 'two Security headers', message: (v) => envelope(v, getUser(), AUTH + AUTH), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: 'Only one wsse:Security header may be addressed to this service', steps: ANONYMOUS },
  { name: 'an unknown operation', message: (v) => envelope(v, `<Frobnicate xmlns="${NS1}"/>`, AUTH), kind: 'Client', errorCode: 'OPERATION_NOT_FOUND', reason: `UserService v1 has no operation {${NS1}}Frobnicate`, steps: ANONYMOUS },
  { name: 'an operation v1 does not have (ListUsers)', message: (v) => envelope(v, `<ListUsers xmlns="${NS1}"/>`, AUTH), kind: 'Client', errorCode: 'OPERATION_NOT_FOUND', reason: `UserService v1 has no operation {${NS1}}ListUsers`, steps: ANONYMOUS },
  { name: 'a v1 operation sent to v2', version: V2, message: (v) => envelope(v, getUser('2', NS1), AUTH), kind: 'Client', errorCode: 'OPERATION_NOT_FOUND', reason: `UserService v2 has no operation {${NS1}}GetUser`, steps: ANONYMOUS },
  { name: 'an operation in no namespace', message: (v) => envelope(v, '<GetUser><id>2</id></GetUser>', AUTH), kind: 'Client', errorCode: 'OPERATION_NOT_FOUND', reason: 'UserService v1 has no operation {}GetUser', steps: ANONYMOUS },
  { name: 'a SOAPAction naming another operation', message: (v) => envelope(v, getUser(), AUTH), actions: () => [`"${NS1}/DeleteUser"`, undefined], kind: 'Client', errorCode: 'BAD_REQUEST', reason: `The SOAP action "${NS1}/DeleteUser" does not match the Body's operation GetUser (expected "${NS1}/GetUser")`, steps: ANONYMOUS },
  { name: 'an action parameter disagreeing while the SOAPAction agrees', message: (v) => envelope(v, getUser(), AUTH), actions: () => [`${NS1}/GetUser`, 'urn:other'], kind: 'Client', errorCode: 'BAD_REQUEST', reason: `The SOAP action "urn:other" does not match the Body's operation GetUser (expected "${NS1}/GetUser")`, steps: ANONYMOUS },
  // WS-Security.
  { name: 'no Security header', message: (v) => envelope(v, getUser()), kind: 'Client', wsse: 'InvalidSecurity', errorCode: 'UNAUTHENTICATED', reason: 'A wsse:Security header with a UsernameToken is required', steps: ANONYMOUS },
  { name: 'a Security header for another actor only', message: (v) => envelope(v, getUser(), textToken('partner', 's3cret', ` s:${v === '1.1' ? 'actor' : 'role'}="http://example.com/gateway"`)), kind: 'Client', wsse: 'InvalidSecurity', errorCode: 'UNAUTHENTICATED', reason: 'A wsse:Security header with a UsernameToken is required', steps: ANONYMOUS },
  { name: 'a Security header without a UsernameToken', message: (v) => envelope(v, getUser(), `<wsse:Security xmlns:wsse="${WSSE}"/>`), kind: 'Client', wsse: 'InvalidSecurity', errorCode: 'UNAUTHENTICATED', reason: 'The Security header has no UsernameToken', steps: ANONYMOUS },
  { name: 'an unsupported password type', message: (v) => envelope(v, getUser(), AUTH.replace(/Type="[^"]*"/, 'Type="urn:x"')), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: 'Unsupported password type urn:x', steps: ANONYMOUS },
  { name: 'a PasswordDigest without a Nonce', message: (v) => envelope(v, getUser(), digestToken(iso(NOW)).replace(/<wsse:Nonce>[^<]*<\/wsse:Nonce>/, '')), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: 'PasswordDigest requires a Nonce and a Created', steps: ANONYMOUS },
  { name: 'a stale Created', message: (v) => envelope(v, getUser(), digestToken(iso(NOW - config.soap.maxAgeSec * 1000 - 1000))), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: `The UsernameToken Created is older than ${config.soap.maxAgeSec} seconds`, steps: ANONYMOUS },
  { name: 'a stale Created on a PasswordText token', message: (v) => envelope(v, getUser(), createdToken(iso(NOW - config.soap.maxAgeSec * 1000 - 1000))), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: `The UsernameToken Created is older than ${config.soap.maxAgeSec} seconds`, steps: ANONYMOUS },
  { name: 'a Created in the future', message: (v) => envelope(v, getUser(), digestToken(iso(NOW + 60_000))), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: 'The UsernameToken Created is in the future', steps: ANONYMOUS },
  { name: 'a Created without a time zone', message: (v) => envelope(v, getUser(), createdToken(iso(NOW).replace('Z', ''))), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: 'The UsernameToken Created is not an xs:dateTime with a time zone', steps: ANONYMOUS },
  { name: 'a non-canonical Nonce', message: (v) => envelope(v, getUser(), digestToken(iso(NOW)).replace(/(<wsse:Nonce>[^<=]*)=*</, '$1<')), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: 'The Nonce must be canonical Base64Binary', steps: ANONYMOUS },
  { name: 'an expired Timestamp', message: (v) => envelope(v, getUser(), AUTH.replace('<wsse:UsernameToken>', `<wsu:Timestamp><wsu:Created>${iso(NOW - 120_000)}</wsu:Created><wsu:Expires>${iso(NOW - 60_000)}</wsu:Expires></wsu:Timestamp><wsse:UsernameToken>`)), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: 'The message has expired (Timestamp Expires)', steps: ANONYMOUS },
  // A refused password: one scrypt verification, preceded by the address check.
  { name: 'a wrong password', message: (v) => envelope(v, getUser(), textToken('partner', 'wrong!')), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: AUTH_FAILED, steps: REFUSED_LOGIN },
  { name: 'an unknown login', message: (v) => envelope(v, getUser(), textToken('nobody', 's3cret')), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: AUTH_FAILED, steps: REFUSED_LOGIN },
  { name: 'a wrong password of a text-only account', message: (v) => envelope(v, getUser(), textToken('textonly', 'wrong!')), kind: 'Client', wsse: 'FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: AUTH_FAILED, steps: REFUSED_LOGIN },
  // Budgets refusing at each step.
  { name: 'an address out of requests (checkAddress), before the password is verified', message: (v) => envelope(v, getUser(), textToken('partner', 'wrong!')), refuseAt: 'checkAddress', kind: 'Client', errorCode: 'RATE_LIMITED', reason: 'Too many requests (checkAddress)', steps: REFUSED_LOGIN },
  { name: 'an address out of requests, a text-only partner\'s right password', message: (v) => envelope(v, getUser(), textToken('textonly', 't3xt-only')), refuseAt: 'checkAddress', kind: 'Client', errorCode: 'RATE_LIMITED', reason: 'Too many requests (checkAddress)', steps: REFUSED_LOGIN },
  { name: 'a partner out of requests (spendRequest)', message: (v) => envelope(v, getUser(), AUTH), refuseAt: 'spendRequest', kind: 'Client', errorCode: 'RATE_LIMITED', reason: 'Too many requests (spendRequest)', steps: AUTHENTICATED },
  { name: 'a partner out of requests, before its arguments are read', message: (v) => envelope(v, `<GetUser xmlns="${NS1}"/>`, AUTH), refuseAt: 'spendRequest', kind: 'Client', errorCode: 'RATE_LIMITED', reason: 'Too many requests (spendRequest)', steps: AUTHENTICATED },
  { name: 'a partner out of cost units (spendCost)', message: (v) => envelope(v, getUser(), AUTH), refuseAt: 'spendCost', kind: 'Client', errorCode: 'RATE_LIMITED', reason: 'Too many requests (spendCost)', steps: CHARGED },
  // Arguments: read after the partner's request is spent, before its cost.
  { name: 'an unknown argument element', message: (v) => envelope(v, `<GetUser xmlns="${NS1}"><id>2</id><bogus>1</bogus></GetUser>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: `GetUser has no element {${NS1}}bogus`, steps: AUTHENTICATED },
  { name: 'an argument in another namespace', message: (v) => envelope(v, `<GetUser xmlns="${NS1}"><o:id xmlns:o="urn:other">2</o:id></GetUser>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'GetUser has no element {urn:other}id', steps: AUTHENTICATED },
  { name: 'a duplicate element', message: (v) => envelope(v, `<GetUser xmlns="${NS1}"><id>2</id><id>3</id></GetUser>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'GetUser: the element id appears more than once', steps: AUTHENTICATED },
  { name: 'an element with children', message: (v) => envelope(v, `<GetUser xmlns="${NS1}"><id><x>2</x></id></GetUser>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'GetUser: id must be text', steps: AUTHENTICATED },
  { name: 'a bad xs:int', version: V2, message: (v) => envelope(v, `<ListUsers xmlns="${NS2}"><pageSize>ten</pageSize></ListUsers>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'ListUsers: pageSize must be an xs:int', steps: AUTHENTICATED },
  { name: 'an xs:int out of range', version: V2, message: (v) => envelope(v, `<ListUsers xmlns="${NS2}"><limit>3000000000</limit></ListUsers>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'ListUsers: limit must be an xs:int', steps: AUTHENTICATED },
  { name: 'a missing required argument', message: (v) => envelope(v, `<GetUser xmlns="${NS1}"/>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'GetUser: the element id is required', steps: AUTHENTICATED },
  { name: 'a required argument sent as xsi:nil', message: (v) => envelope(v, `<GetUser xmlns="${NS1}" xmlns:xsi="${XSI}"><id xsi:nil="true"/></GetUser>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'GetUser: the element id is required', steps: AUTHENTICATED },
  { name: 'a string over MAX_STRING_LENGTH', message: (v) => envelope(v, getUser('x'.repeat(config.input.maxStringLength + 1)), AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'Too long', steps: AUTHENTICATED },
  { name: 'a page size over MAX_PAGE_SIZE', version: V2, message: (v) => envelope(v, `<ListUsers xmlns="${NS2}"><pageSize>${config.input.maxPageSize + 1}</pageSize></ListUsers>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: `pageSize must be between 1 and ${config.input.maxPageSize}`, steps: AUTHENTICATED },
  // The domain's refusals before it reads or writes anything.
  { name: 'limit with pageSize', version: V2, message: (v) => envelope(v, `<ListUsers xmlns="${NS2}"><limit>2</limit><pageSize>2</pageSize></ListUsers>`, AUTH), kind: 'Client', errorCode: 'BAD_USER_INPUT', reason: 'ListUsers: send limit or pageSize/pageToken, not both', steps: CHARGED },
  { name: 'a SERVICE partner deleting a user (FORBIDDEN)', message: (v) => envelope(v, `<DeleteUser xmlns="${NS1}"><id>2</id></DeleteUser>`, AUTH), kind: 'Client', errorCode: 'FORBIDDEN', reason: 'Only administrators may delete users', steps: CHARGED },
  { name: 'a SERVICE partner updating another user (FORBIDDEN)', message: (v) => envelope(v, `<UpdateUser xmlns="${NS1}"><id>2</id><name>Eve</name></UpdateUser>`, AUTH), kind: 'Client', errorCode: 'FORBIDDEN', reason: 'Only the user themself or an administrator may update a user', steps: CHARGED }
]

/** What a fault of `kind` (and WSS code) says in each SOAP version, and its status. */
function expectedShape (c: FaultCase, soapVersion: SoapVersion) {
  const value = c.kind === 'Client' ? 'Sender' : c.kind === 'Server' ? 'Receiver' : c.kind
  const status = c.errorCode === 'RATE_LIMITED' ? 429 : soapVersion === '1.2' && value === 'Sender' ? 400 : 500
  return soapVersion === '1.1'
    ? { status, contentType: 'text/xml; charset=utf-8', code: c.wsse ? `wsse:${c.wsse}` : `soap:${c.kind}`, subcode: null }
    : { status, contentType: 'application/soap+xml; charset=utf-8', code: `env:${value}`, subcode: c.wsse ? `wsse:${c.wsse}` : null }
}

test('every fault the core produces: its code, errorCode, reason and charges; nothing reaches the domain', async (t) => {
  const store = await seededStore(t)
  for (const c of FAULTS) {
    for (const soapVersion of ['1.1', '1.2'] as const) {
      const label = `${c.name} (SOAP ${soapVersion})`
      const core = serviceOver(store)
      const out = await exchange(core, c.version ?? V1, soapVersion, c.message(soapVersion), {
        actions: c.actions?.(soapVersion),
        refuseAt: c.refuseAt
      })
      const shape = expectedShape(c, soapVersion)
      t.equal(out.response.status, shape.status, `${label}: status`)
      t.equal(out.response.contentType, shape.contentType, `${label}: media type`)
      t.equal(out.response.fault, c.errorCode, `${label}: the fault's code for tracing`)
      const fault = faultOf(t, out.response.body, label)
      t.equal(fault.soapVersion, soapVersion, `${label}: answered in the request's SOAP version`)
      t.equal(fault.code, shape.code, `${label}: ${soapVersion === '1.1' ? 'faultcode' : 'Code/Value'}`)
      t.equal(fault.subcode, shape.subcode, `${label}: Subcode`)
      t.equal(fault.errorCode, c.errorCode, `${label}: errorCode in the detail`)
      const reason = typeof c.reason === 'function' ? c.reason(soapVersion) : c.reason
      if (typeof reason === 'string') t.equal(fault.reason, reason, `${label}: reason`)
      else t.match(fault.reason, reason, `${label}: reason`)
      t.same(out.steps, c.steps, `${label}: budget calls ${c.steps.join(', ')}`)
      if (c.steps.includes('spendRequest')) {
        t.same(out.calls.find((x) => x.step === 'spendRequest')?.caller, PARTNER, `${label}: the partner's request spent`)
      }
      t.equal(out.response.retryAfter, c.errorCode === 'RATE_LIMITED' ? 7 : undefined, `${label}: Retry-After`)
      t.same(core.domainCalls(), [], `${label}: no domain call`)
      t.same(out.internal, [], `${label}: not an internal error`)
    }
  }
})

test('SOAP 1.2 fault details: VersionMismatch says which envelopes are supported', async (t) => {
  const store = await seededStore(t)
  const core = serviceOver(store)
  const { response } = await exchange(core, V1, '1.2', envelope('1.1', getUser(), AUTH))
  t.match(response.body, /<env:Header><env:Upgrade><env:SupportedEnvelope qname="e12:Envelope"/, 'an Upgrade header')
  t.match(response.body, new RegExp(`<f:ServiceFault xmlns:f="${NS1}">`), 'the detail is in the service version\'s namespace')
  const v2 = await exchange(core, V2, '1.1', '<nope/>')
  t.match(v2.response.body, new RegExp(`<f:ServiceFault xmlns:f="${NS2}">`), 'v2\'s detail in v2\'s namespace')
})

test('a replayed Nonce is refused after its first use; another partner\'s same Nonce is not a replay', async (t) => {
  const store = await seededStore(t)
  const core = serviceOver(store)
  for (const soapVersion of ['1.1', '1.2'] as const) {
    const nonce = randomBytes(16)
    const message = envelope(soapVersion, getUser(), digestToken(iso(NOW - 1000), { nonce }))
    const first = await exchange(core, V1, soapVersion, message)
    t.equal(first.response.status, 200, `SOAP ${soapVersion}: the first use`)
    const replay = await exchange(core, V1, soapVersion, message)
    t.match(faultOf(t, replay.response.body, 'the response'), {
      code: soapVersion === '1.1' ? 'wsse:FailedAuthentication' : 'env:Sender',
      errorCode: 'UNAUTHENTICATED',
      reason: 'The Nonce has already been used (replayed message)'
    }, `SOAP ${soapVersion}: the replay`)
    t.same(replay.steps, ['spendOnAddress'], 'a replay authenticates nobody: the address pays')
    const textReplay = envelope(soapVersion, getUser(), AUTH)
    t.equal((await exchange(core, V1, soapVersion, textReplay)).response.status, 200)
    t.match(faultOf(t, (await exchange(core, V1, soapVersion, textReplay)).response.body, 'the response'), {
      reason: 'The Nonce has already been used (replayed message)'
    }, `SOAP ${soapVersion}: a PasswordText token's Nonce is claimed too`)
  }
  t.same(core.domainCalls().map((c) => c.method), ['usersByIds', 'usersByIds', 'usersByIds', 'usersByIds'], 'the replays never reached the domain')

  // The same Nonce, from another partner: keyed by partner, so not a replay of the first.
  await createPartnerAccount(store, config.soap.partnerSecretKey, { login: 'acme', password: 'acme-secret' })
  const nonce = randomBytes(16)
  const created = iso(NOW)
  const ours = await exchange(core, V1, '1.1', envelope('1.1', getUser(), digestToken(created, { nonce })))
  const theirs = await exchange(core, V1, '1.1', envelope('1.1', getUser(), digestToken(created, { nonce, login: 'acme', password: 'acme-secret' })))
  t.equal(ours.response.status, 200)
  t.equal(theirs.response.status, 200, 'nonces are remembered per partner')

  // A nonce lives as long as its message could be fresh: later, the Created is stale anyway.
  let now = NOW
  const moving = serviceOver(store, { clock: () => now })
  const message = envelope('1.1', getUser(), digestToken(iso(NOW)))
  t.equal((await exchange(moving, V1, '1.1', message)).response.status, 200)
  now += config.soap.maxAgeSec * 1000 + 10_000
  t.match(faultOf(t, (await exchange(moving, V1, '1.1', message)).response.body, 'the response'), { reason: /older than/ },
    'once the nonce could be forgotten, the Created refuses the message')
})

test('a nonce cache full of live nonces refuses (SERVICE_UNAVAILABLE, 503 with Retry-After) rather than forget one', async (t) => {
  const store = await seededStore(t)
  const core = serviceOver(store, { nonces: memoryNonceCache(1) })
  t.equal((await exchange(core, V1, '1.1', envelope('1.1', getUser(), AUTH))).response.status, 200)
  for (const soapVersion of ['1.1', '1.2'] as const) {
    const { response, steps, internal } = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), AUTH))
    t.equal(response.status, 503, `SOAP ${soapVersion}: status`)
    t.ok(response.retryAfter! >= 1 && response.retryAfter! <= 305, `SOAP ${soapVersion}: retry once the nonce is forgotten`)
    t.match(faultOf(t, response.body, 'the response'), {
      code: soapVersion === '1.1' ? 'soap:Server' : 'env:Receiver',
      errorCode: 'SERVICE_UNAVAILABLE',
      reason: 'Too many WS-Security nonces and signatures in flight; retry later'
    })
    t.same(steps, ['spendOnAddress'], 'authenticated nobody')
    t.same(internal, [], 'an expected refusal, not an internal error')
  }
  t.same(core.domainCalls().map((c) => c.method), ['usersByIds'])
})

test('budget charges: nobody pays the address once; a partner pays its request and the operation\'s cost', async (t) => {
  const store = await seededStore(t)
  const core = serviceOver(store)

  const anonymous = await exchange(core, V1, '1.1', envelope('1.1', getUser()))
  t.same(anonymous.steps, ['spendOnAddress'], 'no credentials: the address spends exactly one request, no partner budget')
  const malformed = await exchange(core, V1, '1.1', 'not xml')
  t.same(malformed.steps, ['spendOnAddress'], 'a malformed message too')
  const guessed = await exchange(core, V1, '1.1', envelope('1.1', getUser(), textToken('partner', 'guess!')))
  t.same(guessed.steps, ['checkAddress', 'spendOnAddress'], 'a wrong password: the address is checked before the verification, then charged')

  type Args = Record<string, string | number>
  const priced = async (version: ServiceVersion, body: string, args: Args, operation: string) => {
    const out = await exchange(core, version, '1.1', envelope('1.1', body, AUTH))
    t.equal(out.response.status, 200, `${version.id} ${operation}: ${out.response.body.slice(0, 300)}`)
    const expected = costOf(version.operations.get(operation)!, args, version, pricing)
    t.same(out.calls, [
      { step: 'spendRequest', caller: PARTNER },
      { step: 'spendCost', caller: PARTNER, cost: expected }
    ], `${version.id} ${operation}: one request and ${expected} cost units, on the partner`)
    return expected
  }
  const getV1 = await priced(V1, getUser(), { id: '2' }, 'GetUser')
  const getV2 = await priced(V2, getUser('2', NS2), { id: '2' }, 'GetUser')
  t.equal(getV1, 1 + V1.userFields.length, 'a user: 1 plus one per field of v1\'s User')
  t.equal(getV2, getV1 + 1, 'v2\'s User has one more field (createdAt)')
  const page = await priced(V2, `<ListUsers xmlns="${NS2}"><pageSize>3</pageSize></ListUsers>`, { pageSize: 3 }, 'ListUsers')
  t.equal(page, 3 * V2.userFields.length, 'a page: its size times the fields of a user')
  t.ok(page > getV2, 'ListUsers with a page size costs more than GetUser')
  const limited = await priced(V2, `<ListUsers xmlns="${NS2}"><limit>7</limit></ListUsers>`, { limit: 7 }, 'ListUsers')
  t.equal(limited, 7 * V2.userFields.length, 'limit is priced like pageSize')
  const whole = await priced(V2, `<ListUsers xmlns="${NS2}"/>`, {}, 'ListUsers')
  t.equal(whole, 20 * V2.userFields.length, 'no size: the default page size')
  const created = await priced(V1, `<CreateUser xmlns="${NS1}"><name>New Partner User</name><email>new@partner.example</email></CreateUser>`,
    { name: 'New Partner User', email: 'new@partner.example' }, 'CreateUser')
  t.equal(created, getV1 + config.budgets.mutationCost - 1, 'a write: its selection plus MUTATION_COST - 1')

  // A text-only partner's password is verified by scrypt: the address is checked first.
  const textOnly = await exchange(core, V1, '1.1', envelope('1.1', getUser(), textToken('textonly', 't3xt-only')))
  t.equal(textOnly.response.status, 200)
  t.same(textOnly.calls, [
    { step: 'checkAddress' },
    { step: 'spendRequest', caller: { id: '4', role: 'USER' } },
    { step: 'spendCost', caller: { id: '4', role: 'USER' }, cost: getV1 }
  ], 'checkAddress before the scrypt verification, then the partner\'s user pays')
})

test('a refused budget: no cost spent, the store untouched', async (t) => {
  const store = await seededStore(t)
  for (const operation of [getUser(), `<DeleteUser xmlns="${NS1}"><id>3</id></DeleteUser>`, `<CreateUser xmlns="${NS1}"><name>X</name><email>x@example.com</email></CreateUser>`]) {
    const core = serviceOver(store)
    const byRequest = await exchange(core, V1, '1.1', envelope('1.1', operation, AUTH), { refuseAt: 'spendRequest' })
    t.equal(faultOf(t, byRequest.response.body, 'the response').errorCode, 'RATE_LIMITED')
    t.same(byRequest.steps, ['spendRequest'], 'spendRequest refused: spendCost never called')
    const byCost = await exchange(core, V1, '1.1', envelope('1.1', operation, AUTH), { refuseAt: 'spendCost' })
    t.equal(faultOf(t, byCost.response.body, 'the response').errorCode, 'RATE_LIMITED')
    t.same(byCost.steps, ['spendRequest', 'spendCost'])
    t.same(core.domainCalls(), [], `no store call for ${operation.slice(1, 11)}`)
    t.same(core.published, [], 'no event')
  }
  t.equal((await store.usersByIds(['3'])).length, 1, 'user 3 is still there')
})

test('domain outcomes: NOT_FOUND; a store that never answers is a TIMEOUT; a failing one an internal error without internals', async (t) => {
  const store = await seededStore(t)
  for (const soapVersion of ['1.1', '1.2'] as const) {
    const core = serviceOver(store)
    const missing = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser('999'), AUTH))
    t.equal(missing.response.status, soapVersion === '1.1' ? 500 : 400)
    t.match(faultOf(t, missing.response.body, 'the response'), {
      code: soapVersion === '1.1' ? 'soap:Client' : 'env:Sender', errorCode: 'NOT_FOUND', reason: 'User 999 not found'
    }, `SOAP ${soapVersion}: NOT_FOUND`)
    t.same(core.domainCalls().map((c) => c.method), ['usersByIds'], 'the domain looked')
    t.same(missing.steps, ['spendRequest', 'spendCost'])
  }

  const hanging: Store = new Proxy(store, {
    get (target, property, receiver) {
      if (property === 'usersByIds') return () => new Promise(() => {})
      return Reflect.get(target, property, receiver)
    }
  })
  for (const soapVersion of ['1.1', '1.2'] as const) {
    const core = serviceOver(hanging, { timeoutMs: 40 })
    const started = Date.now()
    // The deadline timer does not hold the process open (unref): this interval does, while the store hangs.
    const keepAlive = setInterval(() => {}, 1000)
    const slow = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), AUTH))
    clearInterval(keepAlive)
    t.ok(Date.now() - started < 2000, `SOAP ${soapVersion}: answered promptly after the timeout`)
    t.equal(slow.response.status, 500)
    t.match(faultOf(t, slow.response.body, 'the response'), {
      code: soapVersion === '1.1' ? 'soap:Server' : 'env:Receiver', errorCode: 'TIMEOUT', reason: 'Query timeout'
    }, `SOAP ${soapVersion}: TIMEOUT`)
    t.same(slow.internal, [], 'a timeout is expected, not an internal error')
  }

  const secret = new Error('disk on fire under /var/lib/secret-path')
  const failing: Store = new Proxy(store, {
    get (target, property, receiver) {
      if (property === 'usersByIds') return async () => { throw secret }
      return Reflect.get(target, property, receiver)
    }
  })
  for (const soapVersion of ['1.1', '1.2'] as const) {
    const core = serviceOver(failing)
    const broken = await exchange(core, V1, soapVersion, envelope(soapVersion, getUser(), AUTH))
    t.equal(broken.response.status, 500)
    t.match(faultOf(t, broken.response.body, 'the response'), {
      code: soapVersion === '1.1' ? 'soap:Server' : 'env:Receiver', errorCode: 'INTERNAL_SERVER_ERROR', reason: 'Internal server error'
    }, `SOAP ${soapVersion}: a generic internal fault`)
    t.equal(broken.internal.length, 1, 'onInternalError called once')
    t.equal(broken.internal[0], secret, 'with the error itself')
    t.notMatch(broken.response.body, /secret-path|disk on fire/, 'not its message')
    t.notMatch(broken.response.body, /\bat .*\.ts:\d+/, 'nor its stack')
  }
})
