// The SOAP core (routes/soap/service.ts createSoapService) built with plain objects: no Fastify, no
// listening server. A real store (node:sqlite in memory, counted), a recording admission that can refuse
// at any step, a real WS-Security with its nonce memory and an injected clock. What is checked is the
// core's own rules: envelope shapes in both SOAP versions and both service versions, every fault it
// answers, the budget charges in their order, and that nothing runs when a message is refused.
// HTTP status, content types on the wire and real clients (zeep, node-soap) are the listening tests'
// (client.test.ts, zeep.test.ts, faults.test.ts, budgets.test.ts).
import { createHash, randomBytes } from 'node:crypto'
import { test } from 'tap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import type { Caller } from '../../app/domain/context.ts'
import { cursorKey } from '../../app/domain/pages.ts'
import { AppError } from '../../app/errors.ts'
import { loadDemoData } from '../../app/store/sample-data.ts'
import { openSqliteStore } from '../../app/store/sqlite.ts'
import type { Store } from '../../app/store/types.ts'
import { SERVICE_VERSIONS, costOf, namespaceOf } from '../../routes/soap/operations.ts'
import { createSoapService, type Admission, type SoapRequest } from '../../routes/soap/service.ts'
import { createWsSecurity, memoryNonceCache } from '../../routes/soap/ws-security.ts'
import { countingStore } from '../helpers/counting-store.ts'
import { testConfig, type TestLike } from '../helpers/app.ts'
import { readFault, SOAP11, SOAP12, WSSE, WSU } from './helpers.ts'

const config = testConfig()
const [V1, V2] = SERVICE_VERSIONS as [typeof SERVICE_VERSIONS[0], typeof SERVICE_VERSIONS[0]]
const NS1 = namespaceOf(V1, config.soap.namespaceBase)
const NS2 = namespaceOf(V2, config.soap.namespaceBase)
const TOKEN_PROFILE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0'
const PASSWORD = 's3cret-partner'
// Store calls that authenticate a partner: any other call is the domain running.
const AUTHENTICATION = new Set(['findCredentials', 'findCertificate'])

type Step = 'checkAddress' | 'spendOnAddress' | 'spendRequest' | 'spendCost'

/** An admission that records each call (with the caller and cost) and refuses at `refuseAt`. */
function recordingAdmission (refuseAt?: Step) {
  const calls: Array<{ step: Step; caller?: string; cost?: number }> = []
  const refuse = (step: Step) => {
    if (step === refuseAt) throw new AppError('RATE_LIMITED', 'Too many requests', { retryAfter: 7 })
  }
  const admission: Admission = {
    async checkAddress () { calls.push({ step: 'checkAddress' }); refuse('checkAddress') },
    async spendOnAddress () { calls.push({ step: 'spendOnAddress' }) },
    async spendRequest (caller: Caller) { calls.push({ step: 'spendRequest', caller: caller.id }); refuse('spendRequest') },
    async spendCost (caller: Caller, cost: number) { calls.push({ step: 'spendCost', caller: caller.id, cost }); refuse('spendCost') }
  }
  return { admission, calls, steps: () => calls.map((c) => c.step) }
}

/** The core on a counted in-memory store with the demo users and partner "partner" (user 5, SERVICE). */
interface CoreOptions {
  timeoutMs?: number
  /** The store the core gets, made from the counted one (e.g. a method replaced). */
  store?: (counted: Store) => Store
}

async function soapCore (t: TestLike, options: CoreOptions = {}) {
  const base = openSqliteStore(':memory:')
  t.teardown(() => base.close())
  await loadDemoData(base)
  await createPartnerAccount(base, config.soap.partnerSecretKey, { login: 'partner', password: PASSWORD, userId: '5' })
  const counted = countingStore(base)
  const store = options.store ? options.store(counted.store) : counted.store
  const published: unknown[] = []
  const service = createSoapService({
    namespaceBase: config.soap.namespaceBase,
    store,
    events: { async publish (event) { published.push(event) } },
    caps: config.limits,
    cursorKey: cursorKey(config.cursorSecret),
    mutationCost: config.limits.mutationCost,
    xmlLimits: { maxElements: config.soap.maxElements, maxAttributes: config.soap.maxAttributes },
    timeoutMs: options.timeoutMs ?? config.limits.timeoutMs,
    wsSecurity: createWsSecurity({
      store,
      partnerSecretKey: config.soap.partnerSecretKey,
      maxAgeMs: config.soap.maxAgeSec * 1000,
      nonces: memoryNonceCache(),
      clock: Date.now
    })
  })
  const domainCalls = () => counted.calls.filter((c) => !AUTHENTICATION.has(c.method)).map((c) => c.method)
  return { service, calls: counted.calls, domainCalls, published }
}

function textToken (password = PASSWORD, login = 'partner'): string {
  return `<wsse:UsernameToken><wsse:Username>${login}</wsse:Username>` +
    `<wsse:Password Type="${TOKEN_PROFILE}#PasswordText">${password}</wsse:Password></wsse:UsernameToken>`
}

function digestToken (options: { nonce?: Buffer; created?: string; password?: string } = {}): string {
  const nonce = options.nonce ?? randomBytes(16)
  const created = options.created ?? new Date().toISOString()
  const digest = createHash('sha1').update(nonce).update(created).update(options.password ?? PASSWORD).digest('base64')
  return '<wsse:UsernameToken><wsse:Username>partner</wsse:Username>' +
    `<wsse:Password Type="${TOKEN_PROFILE}#PasswordDigest">${digest}</wsse:Password>` +
    `<wsse:Nonce>${nonce.toString('base64')}</wsse:Nonce><wsu:Created>${created}</wsu:Created></wsse:UsernameToken>`
}

/** An envelope of `version` whose Header holds `headers` (a Security header with `token` unless null). */
function envelope (body: string, options: { version?: '1.1' | '1.2'; token?: string | null; headers?: string } = {}): string {
  const ns = options.version === '1.2' ? SOAP12 : SOAP11
  const security = options.token === null
    ? ''
    : `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}">${options.token ?? textToken()}</wsse:Security>`
  return `<soap:Envelope xmlns:soap="${ns}"><soap:Header>${security}${options.headers ?? ''}</soap:Header>` +
    `<soap:Body>${body}</soap:Body></soap:Envelope>`
}

const getUser = (id: string, ns = NS1) => `<GetUser xmlns="${ns}"><id>${id}</id></GetUser>`

function request (xml: string, soapVersion: '1.1' | '1.2' = '1.1', actions: Array<string | undefined> = []): SoapRequest {
  return { soapVersion, envelope: xml, actions }
}

test('GetUser answers in SOAP 1.1 and 1.2, on v1 and v2, each in its own namespace', async (t) => {
  const { service } = await soapCore(t)
  for (const [version, ns] of [[V1, NS1], [V2, NS2]] as const) {
    for (const soapVersion of ['1.1', '1.2'] as const) {
      const { admission } = recordingAdmission()
      const response = await service.handle(version, request(envelope(getUser('2', ns), { version: soapVersion }), soapVersion), admission)
      t.equal(response.status, 200, `${version.id} SOAP ${soapVersion}`)
      t.equal(response.contentType.split(';')[0], soapVersion === '1.1' ? 'text/xml' : 'application/soap+xml')
      t.match(response.body, `<soap:Envelope xmlns:soap="${soapVersion === '1.1' ? SOAP11 : SOAP12}">`)
      t.match(response.body, `<GetUserResponse xmlns="${ns}"><user><id>2</id><name>Ada Lovelace</name>`)
      // createdAt arrived with v2; a v1 client never sees an element it does not know.
      t.equal(response.body.includes('<createdAt>'), version === V2, `${version.id}: createdAt only from v2`)
    }
  }
})

test('PasswordDigest with a nonce; unqualified children; xsi:nil; an empty SOAPAction', async (t) => {
  const { service } = await soapCore(t)
  const digest = await service.handle(V1, request(envelope(getUser('2'), { token: digestToken() })), recordingAdmission().admission)
  t.equal(digest.status, 200, 'a PasswordDigest with a fresh nonce authenticates')
  const unqualified = `<GetUser xmlns="${NS1}"><id xmlns="">3</id></GetUser>`
  t.match((await service.handle(V1, request(envelope(unqualified)), recordingAdmission().admission)).body,
    '<id>3</id>', 'an unqualified child is read as the argument')
  const nil = `<ListUsers xmlns="${NS2}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><limit xsi:nil="true"/></ListUsers>`
  t.match((await service.handle(V2, request(envelope(nil)), recordingAdmission().admission)).body,
    '<ListUsersResponse', 'xsi:nil on an optional argument means absent')
  t.equal((await service.handle(V1, request(envelope(getUser('2')), '1.1', ['""']), recordingAdmission().admission)).status,
    200, 'an empty SOAPAction names no operation and contradicts none')
  t.equal((await service.handle(V1, request(envelope(getUser('2')), '1.1', [`"${NS1}/GetUser"`]), recordingAdmission().admission)).status,
    200, "the operation's own SOAPAction")
})

/** Each refusal: what is sent, the fault's code, its catalogue code, its reason. */
interface Refusal {
  what: string
  xml: string
  soapVersion?: '1.1' | '1.2'
  actions?: Array<string | undefined>
  code: string
  errorCode: string
  reason: RegExp
}

const security = (token: string) => `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}">${token}</wsse:Security>`

const REFUSALS: Refusal[] = [
  { what: 'not XML', xml: '<soap:Envelope', code: 'soap:Client', errorCode: 'BAD_REQUEST', reason: /./ },
  { what: 'a DOCTYPE', xml: `<!DOCTYPE x [<!ENTITY a "b">]>${envelope(getUser('2'))}`, code: 'soap:Client', errorCode: 'BAD_REQUEST', reason: /DOCTYPE|DTD/i },
  { what: 'no Envelope', xml: `<Envelope xmlns="urn:x">${getUser('2')}</Envelope>`, code: 'soap:VersionMismatch', errorCode: 'BAD_REQUEST', reason: /not a SOAP Envelope/ },
  { what: 'a 1.2 envelope as 1.1', xml: envelope(getUser('2'), { version: '1.2' }), code: 'soap:VersionMismatch', errorCode: 'BAD_REQUEST', reason: /SOAP 1\.2 envelope was sent with the Content-Type of SOAP 1\.1/ },
  { what: 'no Body', xml: `<soap:Envelope xmlns:soap="${SOAP11}"><soap:Header/></soap:Envelope>`, code: 'soap:Client', errorCode: 'BAD_REQUEST', reason: /has no Body/ },
  { what: 'two operations', xml: envelope(getUser('2') + getUser('3')), code: 'soap:Client', errorCode: 'BAD_REQUEST', reason: /exactly one element/ },
  { what: 'a mandatory header not understood', xml: envelope(getUser('2'), { headers: '<x:Trace xmlns:x="urn:trace" soap:mustUnderstand="1"/>' }), code: 'soap:MustUnderstand', errorCode: 'BAD_REQUEST', reason: /Header not understood: \{urn:trace\}Trace/ },
  { what: 'two Security headers', xml: envelope(getUser('2'), { headers: security(textToken()) }), code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: /Only one wsse:Security/ },
  { what: 'an unknown operation', xml: envelope(`<Steal xmlns="${NS1}"/>`), code: 'soap:Client', errorCode: 'OPERATION_NOT_FOUND', reason: /has no operation \{.*\}Steal/ },
  { what: "v2's operation on v1", xml: envelope(`<ListUsers xmlns="${NS1}"/>`), code: 'soap:Client', errorCode: 'OPERATION_NOT_FOUND', reason: /UserService v1 has no operation/ },
  { what: 'a SOAPAction naming another operation', xml: envelope(getUser('2')), actions: [`"${NS1}/DeleteUser"`], code: 'soap:Client', errorCode: 'BAD_REQUEST', reason: /does not match the Body's operation GetUser/ },
  { what: 'a SOAP 1.2 action naming another operation', xml: envelope(getUser('2'), { version: '1.2' }), soapVersion: '1.2', actions: [undefined, `${NS1}/DeleteUser`], code: 'env:Sender', errorCode: 'BAD_REQUEST', reason: /does not match/ },
  { what: 'no Security header', xml: envelope(getUser('2'), { token: null }), code: 'wsse:InvalidSecurity', errorCode: 'UNAUTHENTICATED', reason: /wsse:Security header with a UsernameToken is required/ },
  { what: 'a wrong password', xml: envelope(getUser('2'), { token: textToken('wrong-password') }), code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: /could not be authenticated/ },
  { what: 'an unknown login', xml: envelope(getUser('2'), { token: textToken(PASSWORD, 'nobody') }), code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: /could not be authenticated/ },
  { what: 'a wrong digest', xml: envelope(getUser('2'), { token: digestToken({ password: 'wrong-password' }) }), code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: /could not be authenticated/ },
  { what: 'a stale Created', xml: envelope(getUser('2'), { token: digestToken({ created: new Date(Date.now() - 3_600_000).toISOString() }) }), code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: /older than 300 seconds/ },
  { what: 'an unknown argument', xml: envelope(`<GetUser xmlns="${NS1}"><id>2</id><admin>true</admin></GetUser>`), code: 'soap:Client', errorCode: 'BAD_USER_INPUT', reason: /GetUser has no element \{.*\}admin/ },
  { what: 'an argument twice', xml: envelope(`<GetUser xmlns="${NS1}"><id>2</id><id>3</id></GetUser>`), code: 'soap:Client', errorCode: 'BAD_USER_INPUT', reason: /the element id appears more than once/ },
  { what: 'an argument with children', xml: envelope(`<GetUser xmlns="${NS1}"><id><x>2</x></id></GetUser>`), code: 'soap:Client', errorCode: 'BAD_USER_INPUT', reason: /id must be text/ },
  { what: 'a missing argument', xml: envelope(`<GetUser xmlns="${NS1}"/>`), code: 'soap:Client', errorCode: 'BAD_USER_INPUT', reason: /the element id is required/ },
  { what: 'not an xs:int', xml: envelope(`<ListUsers xmlns="${NS2}"><limit>ten</limit></ListUsers>`), code: 'soap:Client', errorCode: 'BAD_USER_INPUT', reason: /limit must be an xs:int/ },
  { what: 'an argument past the input caps', xml: envelope(`<GetUser xmlns="${NS1}"><id>${'7'.repeat(config.limits.maxStringLength + 1)}</id></GetUser>`), code: 'soap:Client', errorCode: 'BAD_USER_INPUT', reason: /./ }
]

test('every refusal is its fault, spends the address once, and runs nothing', async (t) => {
  const { service, domainCalls } = await soapCore(t)
  for (const refusal of REFUSALS) {
    const { admission, steps } = recordingAdmission()
    const before = domainCalls().length
    const version = refusal.xml.includes(NS2) ? V2 : V1
    const sent = request(refusal.xml, refusal.soapVersion, refusal.actions)
    const response = await service.handle(version, sent, admission)
    // SOAP 1.1 answers every fault with 500; SOAP 1.2 a Sender fault with 400.
    t.equal(response.status, refusal.soapVersion === '1.2' ? 400 : 500, `${refusal.what}: a fault`)
    const { code, errorCode, reason } = refusal
    t.match(readFault(response.body), { code, errorCode, reason }, refusal.what)
    t.same(domainCalls().slice(before), [], `${refusal.what}: nothing ran`)
    const authenticated = steps().includes('spendRequest')
    // A message that authenticated nobody counts once on its address, and never on a partner's budget.
    t.same(steps().filter((s) => s === 'spendOnAddress').length, authenticated ? 0 : 1,
      `${refusal.what}: ${authenticated ? "the partner's budget, not the address" : 'counted once on the address'}`)
  }
})

test('a nonce is accepted once; the same nonce again is a replay', async (t) => {
  const { service, domainCalls } = await soapCore(t)
  const token = digestToken()
  const xml = envelope(getUser('2'), { token })
  t.equal((await service.handle(V1, request(xml), recordingAdmission().admission)).status, 200)
  const before = domainCalls().length
  const again = await service.handle(V1, request(xml), recordingAdmission().admission)
  t.match(readFault(again.body), { code: 'wsse:FailedAuthentication', reason: /Nonce has already been used/ })
  t.same(domainCalls().slice(before), [], 'the replay ran nothing')
})

test("the budgets: the partner's request, then the call's cost, in that order; a refusal at either stops it", async (t) => {
  const { service, domainCalls } = await soapCore(t)
  const listing = `<ListUsers xmlns="${NS2}"><pageSize>50</pageSize></ListUsers>`
  const { admission, calls, steps } = recordingAdmission()
  t.equal((await service.handle(V2, request(envelope(listing)), admission)).status, 200)
  t.same(steps(), ['spendRequest', 'spendCost'], 'an authenticated call spends its request, then its cost')
  t.same(calls.map((c) => c.caller), ['5', '5'], 'both on the partner (user 5), not on the address')
  const pricing = { maxPageSize: config.limits.maxPageSize, mutationCost: config.limits.mutationCost }
  const listCost = costOf(V2.operations.get('ListUsers')!, { pageSize: 50 }, V2, pricing)
  const userCost = costOf(V1.operations.get('GetUser')!, { id: '2' }, V1, pricing)
  t.equal(calls[1]!.cost, listCost, "the call's cost as the operation prices it")
  t.ok(listCost > userCost, 'a page of 50 costs more than one user')

  for (const step of ['spendRequest', 'spendCost'] as const) {
    const refused = recordingAdmission(step)
    const before = domainCalls().length
    const response = await service.handle(V1, request(envelope(getUser('2'))), refused.admission)
    t.equal(response.status, 429, `refused at ${step}: throttled keeps its HTTP meaning`)
    t.equal(response.retryAfter, 7, 'with its Retry-After')
    t.match(readFault(response.body), { errorCode: 'RATE_LIMITED' })
    t.same(domainCalls().slice(before), [], `refused at ${step}: nothing ran`)
    if (step === 'spendRequest') t.notOk(refused.steps().includes('spendCost'), 'no cost spent after a refused request')
  }
})

test('the domain answers as faults: NOT_FOUND, FORBIDDEN, a timeout, an internal error without its stack', async (t) => {
  const { service } = await soapCore(t)
  const notFound = await service.handle(V1, request(envelope(getUser('999999'))), recordingAdmission().admission)
  t.match(readFault(notFound.body), { code: 'soap:Client', errorCode: 'NOT_FOUND' })
  // The partner is a SERVICE caller: deleting a user is an administrator's.
  const forbidden = await service.handle(V1, request(envelope(`<DeleteUser xmlns="${NS1}"><id>2</id></DeleteUser>`)),
    recordingAdmission().admission)
  t.match(readFault(forbidden.body), { code: 'soap:Client', errorCode: 'FORBIDDEN' })

  // A store slower than the deadline: the deadline answers first.
  const slow = await soapCore(t, {
    timeoutMs: 50,
    store: (store) => ({ ...bound(store), usersByIds: () => new Promise((resolve) => setTimeout(resolve, 1000, [])) })
  })
  const timedOut = await slow.service.handle(V1, request(envelope(getUser('2'))), recordingAdmission().admission)
  t.match(readFault(timedOut.body), { errorCode: 'TIMEOUT' }, 'the execution deadline')

  const failing = await soapCore(t, {
    store: (store) => ({ ...bound(store), usersByIds: async () => { throw new Error('disk on fire at /var/secret') } })
  })
  const seen: unknown[] = []
  const internal = await failing.service.handle(V1, request(envelope(getUser('2'))), recordingAdmission().admission,
    (err) => seen.push(err))
  t.match(readFault(internal.body), { code: 'soap:Server', errorCode: 'INTERNAL_SERVER_ERROR' })
  t.notMatch(internal.body, /disk on fire|\/var\/secret|at .*\.ts/, 'the cause stays in the process: no message, no stack')
  t.match(seen, [{ message: 'disk on fire at /var/secret' }], 'the carrier is told, to log it')
})

/** A store's methods bound to it, so one can be replaced in a spread copy. */
function bound (store: Store): Store {
  const methods: Record<string, unknown> = {}
  let proto: object | null = store
  while (proto && proto !== Object.prototype) {
    for (const key of Object.getOwnPropertyNames(proto)) {
      const value = (store as unknown as Record<string, unknown>)[key]
      if (typeof value === 'function' && !(key in methods)) methods[key] = (value as (...a: unknown[]) => unknown).bind(store)
    }
    proto = Object.getPrototypeOf(proto)
  }
  return methods as unknown as Store
}
