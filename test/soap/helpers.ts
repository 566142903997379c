// Shared by the SOAP tests: a listening app with a partner account, raw envelope posting, fault reading.
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../app/app.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import type { Store } from '../../app/core/store/types.ts'
import type { Invalidation } from '../../app/core/domain/store-tags.ts'
import { TEST_PARTNER_SECRET_KEY, testConfig, type TestLike } from '../helpers/app.ts'
import { parseXml, type XmlElement } from '../../app/soap/envelope.ts'

export const FIXTURES = new URL('../fixtures/soap/', import.meta.url)

/** The environment of a CLI run (`npm run partner:create`) on a fresh sqlite file in `dir` holding the demo users. */
export async function seededCliEnv (dir: string) {
  const env = {
    ...process.env,
    SQLITE_PATH: join(dir, 'service.db'),
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    NODE_ENV: 'development',
    DATABASE_URL: ''
  }
  const seedStore = openSqliteStore(env.SQLITE_PATH)
  await loadDemoData(seedStore)
  await seedStore.close()
  return env
}
export const SOAP11 = 'http://schemas.xmlsoap.org/soap/envelope/'
export const SOAP12 = 'http://www.w3.org/2003/05/soap-envelope'
export const WSSE = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd'
export const WSU = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'

export function fixture (name: string): { body: string; headers: Record<string, string> } {
  return {
    body: readFileSync(new URL(`${name}.xml`, FIXTURES), 'utf8'),
    headers: JSON.parse(readFileSync(new URL(`${name}.headers.json`, FIXTURES), 'utf8')) as Record<string, string>
  }
}

export interface SoapTestApp {
  app: FastifyInstance
  store: Store
  url: string
  partnerSecretKey: string
}

/**
 * A listening app on its own in-memory store with the demo users
 * and partner "partner"/"s3cret" (bound to user 5, SERVICE).
 */
export async function listenSoapApp (
  t: TestLike,
  env: Record<string, string> = {},
  options: {
    clock?: () => number; store?: Store; invalidation?: Invalidation; replayMemoryEntries?: number
  } = {}
): Promise<SoapTestApp> {
  const config = testConfig(env)
  const store = options.store ?? openSqliteStore(':memory:')
  if (!options.store) {
    await loadDemoData(store)
    await createPartnerAccount(store, config.soap.partnerSecretKey, {
      login: 'partner',
      password: 's3cret',
      userId: '5'
    })
  }
  const app = await buildApp(config, {
    store,
    logger: false,
    clock: options.clock,
    invalidation: options.invalidation,
    soapReplayMemoryEntries: options.replayMemoryEntries
  })
  t.teardown(async () => {
    await app.close()
    if (!options.store) await store.close()
  })
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  return { app, store, url, partnerSecretKey: config.soap.partnerSecretKey }
}

export async function post (url: string, body: string, headers: Record<string, string>) {
  const response = await fetch(url, { method: 'POST', headers, body })
  const text = await response.text()
  return {
    status: response.status,
    contentType: response.headers.get('content-type') ?? '',
    text,
    headers: response.headers
  }
}

export interface FaultInfo {
  soapVersion: '1.1' | '1.2'
  /** 1.1 faultcode / 1.2 Code/Value, as written (prefixed). */
  code: string
  subcode: string | null
  reason: string
  /** The catalogue code in the detail. */
  errorCode: string
}

function find (element: XmlElement, local: string): XmlElement | undefined {
  return element.children.find((c) => c.local === local)
}

/** Reads a fault response (with our own hardened parser: the shapes are also checked by string in tests). */
export function readFault (xml: string): FaultInfo {
  const envelope = parseXml(xml)
  const body = envelope.children.find((c) => c.local === 'Body')!
  const fault = body.children[0]!
  if (fault.local !== 'Fault') throw new Error(`not a fault: ${xml}`)
  const detail = find(fault, 'detail') ?? find(fault, 'Detail')
  const serviceFault = detail?.children[0]
  const errorCode = serviceFault ? find(serviceFault, 'code')?.text ?? '' : ''
  if (envelope.ns === SOAP11) {
    return {
      soapVersion: '1.1',
      code: find(fault, 'faultcode')!.text,
      subcode: null,
      reason: find(fault, 'faultstring')!.text,
      errorCode
    }
  }
  const code = find(fault, 'Code')!
  const subcode = find(code, 'Subcode')
  return {
    soapVersion: '1.2',
    code: find(code, 'Value')!.text,
    subcode: subcode ? find(subcode, 'Value')!.text : null,
    reason: find(find(fault, 'Reason')!, 'Text')!.text,
    errorCode
  }
}

const NONCE_SLOT = '<!--fresh-nonce-->'

/**
 * Builds a request envelope around a body element and optional header blocks. Every envelope is a new
 * message: a token made by textToken gets a fresh Nonce here (the service refuses replayed messages).
 */
export function envelope (version: '1.1' | '1.2', body: string, headers = ''): string {
  const ns = version === '1.1' ? SOAP11 : SOAP12
  const fresh = headers.replaceAll(
    NONCE_SLOT,
    () => `<wsse:Nonce EncodingType="${BASE64_BINARY}">${randomBytes(16).toString('base64')}</wsse:Nonce>`
  )
  return `<?xml version="1.0" encoding="utf-8"?><s:Envelope xmlns:s="${ns}">${fresh ? `<s:Header>${fresh}</s:Header>` : ''}<s:Body>${body}</s:Body></s:Envelope>`
}

const BASE64_BINARY = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary'

/** A PasswordText UsernameToken; `envelope` gives it a fresh Nonce per message. */
export function textToken (username: string, password: string, extra = ''): string {
  return `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}"${extra}><wsse:UsernameToken><wsse:Username>${username}</wsse:Username>` +
    `<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText">${password}</wsse:Password>${NONCE_SLOT}</wsse:UsernameToken></wsse:Security>`
}

export { parseXml as parseXmlText }
