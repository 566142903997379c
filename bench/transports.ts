// Scenarios whose transport landed separately (persisted queries, SOAP): how the benchmark prepares
// them (a partner account, the persisted operation), finds out whether the running service has them,
// and the SOAP scenario itself. A missing transport makes its scenario skip with "transport not
// available yet", never fail.
import { execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Store } from '../app/core/store/types.ts'
import { REPO_ROOT } from './processes.ts'
import { createRequestSigner } from './soap-signer.ts'
import { serviceScenarios, type BenchData, type HttpScenario, type RequestSpec, type Sample } from './scenarios.ts'

/**
 * The benchmark's SOAP public URL, also used as its namespace base (SOAP_NAMESPACE_BASE), so the envelopes are fixed.
 */
export const SOAP_PUBLIC_URL = 'https://api.example.com'
const SOAP_PATH = '/v1/UserService'
const SOAP_NS = `${SOAP_PUBLIC_URL}${SOAP_PATH}`
const SOAP_V2_PATH = '/v2/UserService'
const SOAP_V2_NS = `${SOAP_PUBLIC_URL}${SOAP_V2_PATH}`
const WSSE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd'
const WSU = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'
const TOKEN_PROFILE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0'
const BASE64_BINARY = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary'

/** Creates the partner account the SOAP scenario logs in with, when the SOAP transport's command exists. */
export async function createBenchPartner (
  store: Store,
  partnerSecretKey: string,
  certificate?: string
): Promise<{ login: string; password: string } | null> {
  let module: typeof import('../cli/create-partner.ts')
  try {
    module = await import('../cli/create-partner.ts')
  } catch {
    return null
  }
  const partner = { login: 'bench-partner', password: randomBytes(12).toString('hex') }
  await module.createPartnerAccount(store, partnerSecretKey, {
    ...partner,
    ...(certificate ? { certificate } : {}),
    name: 'Bench Partner',
    email: 'bench.partner@example.com'
  })
  return partner
}

/** The deploy-time manifest of persisted operations (persisted/manifest.json), when the repository has one. */
export const PERSISTED_MANIFEST = join(REPO_ROOT, 'persisted/manifest.json')

/**
 * Finds the registered `user(id)` query in the manifest and checks that the running service answers it
 * by GET; sets data.persistedUserQueryId. Returns why the scenario is skipped, or null.
 */
export async function discoverPersisted (url: string, data: BenchData): Promise<string | null> {
  if (!existsSync(PERSISTED_MANIFEST)) return 'transport not available yet (no persisted/manifest.json)'
  const manifest = JSON.parse(readFileSync(PERSISTED_MANIFEST, 'utf8')) as {
    operations?: { id: string; type?: string; body: string }[]
  }
  const operation = manifest.operations?.find((o) => o.type !== 'mutation' && /\buser\(id: \$id\)/.test(o.body))
  if (!operation) return 'transport not available yet (no user(id) query in persisted/manifest.json)'
  data.persistedUserQueryId = operation.id.startsWith('sha256:') ? operation.id : `sha256:${operation.id}`
  const scenario = serviceScenarios(data).find((s) => s.name === 'persisted-get')!
  const request = scenario.next()
  const response = await fetch(url + request.path, { headers: request.headers, signal: AbortSignal.timeout(10_000) })
  const problem = scenario.verify(request, {
    status: response.status,
    contentType: response.headers.get('content-type') ?? '',
    body: await response.text()
  })
  if (problem) {
    delete data.persistedUserQueryId
    return `transport not available yet (GET ${request.path.slice(0, 60)}…: ${problem})`
  }
  return null
}

type Partner = NonNullable<BenchData['soap']>

/** A UsernameToken: PasswordDigest with a fresh Nonce and Created (as node-soap and zeep send it), or PasswordText. */
function usernameToken (partner: Partner, kind: 'digest' | 'text'): string {
  if (kind === 'text') {
    return `<wsse:UsernameToken><wsse:Username>${partner.login}</wsse:Username>` +
      `<wsse:Password Type="${TOKEN_PROFILE}#PasswordText">${partner.password}</wsse:Password></wsse:UsernameToken>`
  }
  const nonce = randomBytes(16)
  const created = new Date().toISOString()
  const digest = createHash('sha1').update(nonce).update(created).update(partner.password).digest('base64')
  return `<wsse:UsernameToken><wsse:Username>${partner.login}</wsse:Username>` +
    `<wsse:Password Type="${TOKEN_PROFILE}#PasswordDigest">${digest}</wsse:Password>` +
    `<wsse:Nonce EncodingType="${BASE64_BINARY}">${nonce.toString('base64')}</wsse:Nonce>` +
    `<wsu:Created>${created}</wsu:Created></wsse:UsernameToken>`
}

/** A SOAP 1.1 envelope carrying `body` (one element of the Body) as the partner, by UsernameToken. */
function passwordEnvelope (partner: Partner, kind: 'digest' | 'text', body: string): string {
  return '<?xml version="1.0" encoding="utf-8"?>' +
    '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Header>' +
    `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}">${usernameToken(partner, kind)}</wsse:Security></soap:Header>` +
    `<soap:Body>${body}</soap:Body></soap:Envelope>`
}

/**
 * The v1 contract's namespace the envelopes are written in: the benchmark's own services are started with
 * SOAP_NAMESPACE_BASE = SOAP_PUBLIC_URL; a deployment under --target says its own in its WSDL (data.soap.namespace).
 */
const namespaceOf = (partner: Partner | undefined) => partner?.namespace ?? SOAP_NS

const getUser = (namespace: string, id: string) => `<GetUser xmlns="${namespace}"><id>${id}</id></GetUser>`

function soapPost (path: string, action: string, body: string): RequestSpec {
  return {
    method: 'POST',
    path,
    headers: { 'content-type': 'text/xml; charset=utf-8', soapaction: `"${action}"` },
    body
  }
}

const soapRequest = (data: BenchData, id: string): RequestSpec => {
  const namespace = namespaceOf(data.soap)
  return soapPost(SOAP_PATH, `${namespace}/GetUser`, passwordEnvelope(data.soap!, 'digest', getUser(namespace, id)))
}

function soapAnswer (response: Sample, operation: string): string | null {
  if (response.status !== 200) return `HTTP ${response.status}: ${response.body.slice(0, 300)}`
  if (!response.contentType.startsWith('text/xml')) return `content-type ${response.contentType}`
  if (response.body.includes('Fault>')) return `fault: ${response.body.slice(0, 300)}`
  return new RegExp(`${operation}Response[\\s>]`).test(response.body) ? null : `no ${operation}Response: ${response.body.slice(0, 300)}`
}

function verifySoap (request: RequestSpec, response: Sample): string | null {
  const wrong = soapAnswer(response, 'GetUser')
  if (wrong) return wrong
  const id = /<id>([^<]*)<\/id>/.exec(request.body!.slice(request.body!.indexOf('GetUser')))![1]!
  if (!response.body.includes(`<id>${id}</id>`) && !response.body.includes(`:id>${id}</`)) {
    return `asked for user ${id}: ${response.body.slice(0, 300)}`
  }
  return /name>[^<]+</.test(response.body) ? null : `no name: ${response.body.slice(0, 300)}`
}

/** Whether the running service answers a GetUser envelope as expected; sets data.soap when it does. */
export async function discoverSoap (
  url: string,
  data: BenchData,
  partner: { login: string; password: string } | null
): Promise<string | null> {
  if (!partner) return 'transport not available yet (no partner-account command, cli/create-partner.ts)'
  data.soap = { path: SOAP_PATH, ...partner }
  const request = soapRequest(data, data.users[0]!.id)
  const response = await fetch(url + request.path, {
    method: 'POST',
    headers: request.headers,
    body: request.body,
    signal: AbortSignal.timeout(10_000)
  })
  const sample = {
    status: response.status,
    contentType: response.headers.get('content-type') ?? '',
    body: await response.text()
  }
  if (sample.status === 404) {
    delete data.soap
    return `transport not available yet (POST ${SOAP_PATH} answers 404)`
  }
  return null
}

/**
 * The partner's certificate for the signed row: a self-signed RSA 2048 one made by the openssl command in
 * `dir` (node:crypto makes keys but not certificates); null when openssl cannot be run.
 */
export function makeSignerCertificate (dir: string): { key: string; cert: string } | null {
  const [keyPath, certPath] = [join(dir, 'partner.key'), join(dir, 'partner.pem')]
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyPath, '-out', certPath,
      '-days', '2', '-subj', '/CN=bench-partner'], { stdio: 'ignore' })
  } catch {
    return null
  }
  return { key: readFileSync(keyPath, 'utf8'), cert: readFileSync(certPath, 'utf8') }
}

/** Signed messages made before a round: enough for the last round's pace and half again, at least this many. */
const MIN_SIGNED_POOL = 1000

/**
 * The partners' SOAP rows: GetUser by each way a partner authenticates (PasswordDigest with a nonce, the
 * row every comparison uses; PasswordText; an X.509 signature), ListUsers paging 50 at a time on v2, and
 * node-soap (bench/peer-server.ts) answering the same GetUser envelope with no security.
 */
export function soapScenarios (data: BenchData, unavailable: string | null): Record<'user' | 'list', HttpScenario[]> {
  const rotate = () => {
    let i = 0
    return () => data.users[i++ % data.users.length]!.id
  }
  const noSoap = () => data.soap ? null : (unavailable ?? 'transport not available yet (no SOAP endpoint answering GetUser)')
  const common = {
    target: 'service' as const,
    store: 'sqlite' as const,
    shape: 'user' as const,
    guarded: 'guarded-user',
    verify: verifySoap,
    quickCheck: (body: string) => body.includes('GetUserResponse') && !body.includes('Fault>'),
    unavailable: noSoap
  }
  const getUserRow = (name: string, description: string, kind: 'digest' | 'text'): HttpScenario => {
    const next = rotate()
    return {
      ...common,
      name,
      description: `POST ${SOAP_PATH}: SOAP 1.1 GetUser(id) as a partner, ${description}`,
      next: () => {
        const namespace = namespaceOf(data.soap)
        return soapPost(SOAP_PATH, `${namespace}/GetUser`, passwordEnvelope(data.soap!, kind, getUser(namespace, next())))
      }
    }
  }

  let sign: ((body: string) => string) | null = null
  let pool: string[] = []
  let made = 0
  const nextSigned = rotate()
  const signedBody = () => {
    sign ??= createRequestSigner(data.soapSigner!.key, data.soapSigner!.cert)
    return sign(getUser(namespaceOf(data.soap), nextSigned()))
  }
  const signed: HttpScenario = {
    ...common,
    name: 'soap-get-user-signed',
    description: `POST ${SOAP_PATH}: SOAP 1.1 GetUser(id) signed by the partner's X.509 certificate (BinarySecurityToken, Timestamp and Body signed, rsa-sha256, exclusive C14N; made before each round by bench/soap-signer.ts), the reply unsigned`,
    beforeRound () {
      const used = made - pool.length
      pool = Array.from({ length: Math.max(MIN_SIGNED_POOL, Math.ceil(used * 1.5)) }, signedBody)
      made = pool.length
    },
    // A message is accepted once (replays are refused): when the pool runs out, messages are signed as sent.
    next: () => soapPost(SOAP_PATH, '', pool.pop() ?? signedBody()),
    unavailable: () => noSoap() ?? (data.soapSigner ? null : 'no partner certificate (the openssl command could not be run)')
  }

  const pageTokens = () => data.pageCursors!
  let token = 0
  const listUsers: HttpScenario = {
    ...common,
    name: 'soap-list-users',
    shape: 'list',
    guarded: 'guarded-list',
    description: 'POST /v2/UserService: SOAP 1.1 ListUsers(pageSize 50, pageToken) as a partner (PasswordDigest), page tokens spread over all users, as users-page-50 pages',
    next: () => {
      const after = pageTokens()[token++ % pageTokens().length]!
      const body = `<ListUsers xmlns="${SOAP_V2_NS}"><pageSize>50</pageSize><pageToken>${after}</pageToken></ListUsers>`
      return soapPost(SOAP_V2_PATH, `${SOAP_V2_NS}/ListUsers`, passwordEnvelope(data.soap!, 'digest', body))
    },
    verify: (_request, response) => {
      const wrong = soapAnswer(response, 'ListUsers')
      if (wrong) return wrong
      const users = response.body.match(/<user>/g)?.length ?? 0
      return users === 50 ? null : `expected 50 users, got ${users}: ${response.body.slice(0, 300)}`
    },
    quickCheck: (body) => body.includes('ListUsersResponse') && !body.includes('Fault>'),
    unavailable: () => noSoap() ?? (data.pageCursors?.length ? null : 'no page tokens (the probe could not page through users)')
  }

  const peerNext = rotate()
  const nodeSoap: HttpScenario = {
    ...common,
    name: 'node-soap-get-user',
    script: 'bench/peer-server.ts',
    env: { PEER: 'node-soap' },
    description: 'node-soap (package.json\'s version), soap.listen on Node http serving the same v1 WSDL: the same GetUser envelope (its WS-Security header ignored: no security at all), the user read by the same store statement',
    next: () => soapRequest(data, peerNext())
  }
  return {
    user: [
      getUserRow('soap-get-user', 'WS-Security UsernameToken (PasswordDigest, fresh nonce)', 'digest'),
      getUserRow('soap-get-user-text', 'WS-Security UsernameToken (PasswordText: no nonce, no digest)', 'text'),
      signed,
      nodeSoap
    ],
    list: [listUsers]
  }
}

/** The SOAP row every comparison uses (soap-get-user), alone: the deployed topology's twin is made from it. */
export function soapScenario (data: BenchData, unavailable: string | null): HttpScenario {
  return soapScenarios(data, unavailable).user[0]!
}
