// Scenarios whose transport landed separately (persisted queries, SOAP): how the benchmark prepares
// them (a partner account, the persisted operation), finds out whether the running service has them,
// and the SOAP scenario itself. A missing transport makes its scenario skip with "transport not
// available yet", never fail.
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Store } from '../app/store/types.ts'
import { REPO_ROOT } from './processes.ts'
import { serviceScenarios, type BenchData, type HttpScenario, type RequestSpec, type Sample } from './scenarios.ts'

/**
 * The benchmark's SOAP public URL, also used as its namespace base (SOAP_NAMESPACE_BASE), so the envelopes are fixed.
 */
export const SOAP_PUBLIC_URL = 'https://api.example.com'
const SOAP_PATH = '/v1/UserService'
const SOAP_NS = `${SOAP_PUBLIC_URL}${SOAP_PATH}`
const WSSE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd'
const WSU = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'
const TOKEN_PROFILE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0'
const BASE64_BINARY = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary'

/** Creates the partner account the SOAP scenario logs in with, when the SOAP transport's command exists. */
export async function createBenchPartner (
  store: Store,
  partnerSecretKey: string
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

/** SOAP 1.1 GetUser with a UsernameToken PasswordDigest (fresh Nonce and Created, as node-soap and zeep send it). */
export function getUserEnvelope (login: string, password: string, id: string): string {
  const nonce = randomBytes(16)
  const created = new Date().toISOString()
  const digest = createHash('sha1').update(nonce).update(created).update(password).digest('base64')
  return '<?xml version="1.0" encoding="utf-8"?>' +
    '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Header>' +
    `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}"><wsse:UsernameToken>` +
    `<wsse:Username>${login}</wsse:Username>` +
    `<wsse:Password Type="${TOKEN_PROFILE}#PasswordDigest">${digest}</wsse:Password>` +
    `<wsse:Nonce EncodingType="${BASE64_BINARY}">${nonce.toString('base64')}</wsse:Nonce>` +
    `<wsu:Created>${created}</wsu:Created>` +
    '</wsse:UsernameToken></wsse:Security></soap:Header>' +
    `<soap:Body><GetUser xmlns="${SOAP_NS}"><id>${id}</id></GetUser></soap:Body></soap:Envelope>`
}

function soapRequest (data: BenchData, id: string): RequestSpec {
  const partner = data.soap!
  return {
    method: 'POST',
    path: SOAP_PATH,
    headers: { 'content-type': 'text/xml; charset=utf-8', soapaction: `"${SOAP_NS}/GetUser"` },
    body: getUserEnvelope(partner.login, partner.password, id)
  }
}

function verifySoap (request: RequestSpec, response: Sample): string | null {
  if (response.status !== 200) return `HTTP ${response.status}: ${response.body.slice(0, 300)}`
  if (!response.contentType.startsWith('text/xml')) return `content-type ${response.contentType}`
  if (response.body.includes('Fault>')) return `fault: ${response.body.slice(0, 300)}`
  const id = /<id>([^<]*)<\/id>/.exec(request.body!)![1]!
  if (!/GetUserResponse[\s>]/.test(response.body)) return `no GetUserResponse: ${response.body.slice(0, 300)}`
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

export function soapScenario (data: BenchData, unavailable: string | null): HttpScenario {
  let i = 0
  return {
    name: 'soap-get-user',
    target: 'service',
    store: 'sqlite',
    shape: 'user',
    guarded: 'guarded-user',
    description: `POST ${SOAP_PATH}: SOAP 1.1 GetUser(id) with a WS-Security UsernameToken (PasswordDigest, fresh nonce) as a partner`,
    next: () => soapRequest(data, data.users[i++ % data.users.length]!.id),
    verify: verifySoap,
    quickCheck: (body) => body.includes('GetUserResponse') && !body.includes('Fault>'),
    unavailable: () =>
      data.soap ? null : (unavailable ?? 'transport not available yet (no SOAP endpoint answering GetUser)')
  }
}
