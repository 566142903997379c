// WS-Security rules that protect partners, through a listening server: nonces are remembered by their
// bytes (a re-spelled Nonce is a replay; non-canonical Base64 is refused), every message must
// authenticate (no anonymous SOAP caller), PasswordText without a Nonce may repeat (zeep's default,
// through node-soap configured the same way), and a refusal costs the same verification whether the
// login exists or not.
import { createHash, randomBytes } from 'node:crypto'
import { test } from 'tap'
import soap from 'soap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { memoryNonceCache } from '../../app/soap/ws-security.ts'
import { WSSE, WSU, envelope, listenSoapApp, post, readFault, textToken } from './helpers.ts'

const ENV = { SOAP_PUBLIC_URL: 'http://localhost:0', SOAP_NAMESPACE_BASE: 'http://localhost:0' }
const NS = 'http://localhost:0/v1/UserService'
const H11 = { 'content-type': 'text/xml; charset=utf-8' }
const GET_USER = `<GetUser xmlns="${NS}"><id>2</id></GetUser>`
const DIGEST = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest'

/**
 * A PasswordDigest token whose Nonce is written as `nonceText`
 * (the digest is over the decoded bytes, as the profile says).
 */
function digestToken (nonce: Buffer, nonceText: string, created: string, password = 's3cret'): string {
  const digest = createHash('sha1').update(nonce).update(created).update(password).digest('base64')
  return `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}"><wsse:UsernameToken><wsse:Username>partner</wsse:Username>` +
    `<wsse:Password Type="${DIGEST}">${digest}</wsse:Password><wsse:Nonce>${nonceText}</wsse:Nonce>` +
    `<wsu:Created>${created}</wsu:Created></wsse:UsernameToken></wsse:Security>`
}

/** Other spellings of the same bytes that a lenient decoder accepts: no padding, one "=", an unused low bit set. */
function respellings (canonical: string): string[] {
  const unpadded = canonical.replace(/=+$/, '')
  const last = unpadded.at(-1)!
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
  const flipped = unpadded.slice(0, -1) + alphabet[alphabet.indexOf(last) ^ 1] + canonical.slice(unpadded.length)
  return [unpadded, unpadded + '=', flipped]
}

test('a Nonce is remembered by its bytes: re-spelled, the captured message is refused; non-canonical Base64 is refused', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  const nonce = randomBytes(16)
  const canonical = nonce.toString('base64')
  t.equal(
    Buffer.from(respellings(canonical)[2]!, 'base64').equals(nonce),
    true,
    'the flipped spelling decodes to the same bytes'
  )
  const created = new Date().toISOString()
  const first = await post(
    `${url}/v1/UserService`,
    envelope('1.1', GET_USER, digestToken(nonce, canonical, created)),
    H11
  )
  t.equal(first.status, 200, first.text)
  for (const spelling of respellings(canonical)) {
    const replay = await post(
      `${url}/v1/UserService`,
      envelope('1.1', GET_USER, digestToken(nonce, spelling, created)),
      H11
    )
    t.equal(replay.status, 500, `replayed as ${spelling}`)
    t.match(readFault(replay.text), { code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED' })
  }
  // A nonce never used, sent in a non-canonical spelling: refused as such (its message never runs).
  const unused = randomBytes(16)
  const loose = await post(
    `${url}/v1/UserService`,
    envelope('1.1', GET_USER, digestToken(unused, respellings(unused.toString('base64'))[0]!, created)),
    H11
  )
  t.match(readFault(loose.text), { code: 'wsse:FailedAuthentication', reason: /canonical Base64/ })
})

test('every operation requires a UsernameToken: no Security header is a wsse:InvalidSecurity fault, not an anonymous call', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  for (const [version, op] of [['v1', GET_USER], ['v2', '<ListUsers xmlns="http://localhost:0/v2/UserService"/>']] as const) {
    const r11 = await post(`${url}/${version}/UserService`, envelope('1.1', op.replace('/v1/', `/${version}/`)), H11)
    t.equal(r11.status, 500)
    t.match(readFault(r11.text), { code: 'wsse:InvalidSecurity', errorCode: 'UNAUTHENTICATED', reason: /wsse:Security header with a UsernameToken is required/ })
    t.notMatch(r11.text, '<name>', 'nothing was read')
    const r12 = await post(`${url}/${version}/UserService`, envelope('1.2', op.replace('/v1/', `/${version}/`)), {
      'content-type': 'application/soap+xml; charset=utf-8'
    })
    t.equal(r12.status, 400)
    t.match(readFault(r12.text), { code: 'env:Sender', subcode: 'wsse:InvalidSecurity', errorCode: 'UNAUTHENTICATED' })
  }
  const empty = await post(
    `${url}/v1/UserService`,
    envelope('1.1', GET_USER, `<wsse:Security xmlns:wsse="${WSSE}"/>`),
    H11
  )
  t.match(readFault(empty.text), { code: 'wsse:InvalidSecurity', reason: /no UsernameToken/ })
})

test('the WSDL declares the UsernameToken and X.509 signature alternatives (WS-SecurityPolicy) on both bindings', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  const v2 = await (await fetch(`${url}/v2/UserService?wsdl`)).text()
  t.match(v2, /<wsp:ExactlyOne>[\s\S]*<sp:UsernameToken [\s\S]*<sp:AsymmetricBinding>/, 'v2 too')
  const wsdl = await (await fetch(`${url}/v1/UserService?wsdl`)).text()
  t.match(wsdl, 'xmlns:sp="http://docs.oasis-open.org/ws-sx/ws-securitypolicy/200702"')
  t.match(wsdl, /<wsp:Policy wsu:Id="PartnerSecurityPolicy">\s*<wsp:ExactlyOne>\s*<wsp:All>\s*<sp:SupportingTokens>[\s\S]*<sp:UsernameToken /)
  t.match(wsdl, /<\/wsp:All>\s*<wsp:All>\s*<sp:AsymmetricBinding>[\s\S]*<sp:InitiatorToken>[\s\S]*<sp:X509Token [\s\S]*<sp:WssX509V3Token10\/>/,
    'the X.509 signature alternative')
  t.match(wsdl, /<sp:IncludeTimestamp\/>[\s\S]*<sp:SignedParts>\s*<sp:Body\/>/)
  t.equal(wsdl.match(/<wsp:PolicyReference URI="#PartnerSecurityPolicy"\/>/g)?.length, 2, 'one reference per binding')
})

test('PasswordText without Nonce or Created (zeep\'s default) may repeat the same call; with a Created, freshness holds', async (t) => {
  let now = Date.parse('2026-06-01T12:00:00Z')
  const { url } = await listenSoapApp(t, ENV, { clock: () => now })
  const bare = `<wsse:Security xmlns:wsse="${WSSE}"><wsse:UsernameToken><wsse:Username>partner</wsse:Username>` +
    '<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText">s3cret</wsse:Password></wsse:UsernameToken></wsse:Security>'
  const message = envelope('1.1', GET_USER, bare)
  for (let i = 1; i <= 3; i++) {
    t.equal((await post(`${url}/v1/UserService`, message, H11)).status, 200, `identical message #${i}`)
  }

  const withCreated = bare.replace(
    '</wsse:UsernameToken>',
    `<wsu:Created xmlns:wsu="${WSU}">${new Date(now).toISOString()}</wsu:Created></wsse:UsernameToken>`
  )
  const timed = envelope('1.1', GET_USER, withCreated)
  t.equal((await post(`${url}/v1/UserService`, timed, H11)).status, 200)
  t.equal((await post(`${url}/v1/UserService`, timed, H11)).status, 200, 'repeated while fresh')
  now += 301_000
  t.match(readFault((await post(`${url}/v1/UserService`, timed, H11)).text), { code: 'wsse:FailedAuthentication', reason: /older than 300 seconds/ }, 'stale later')
})

test('node-soap with a bare PasswordText UsernameToken calls GetUser twice', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  const client = await soap.createClientAsync(`${url}/v1/UserService?wsdl`, {}, `${url}/v1/UserService`)
  client.setSecurity(
    new soap.WSSecurity('partner', 's3cret', {
      passwordType: 'PasswordText',
      hasTimeStamp: false,
      hasTokenCreated: false,
      hasNonce: false
    })
  )
  // node-soap types its generated methods as any; the answer is [result, raw response, headers, raw request].
  type Answer = [any, string, unknown, string]
  const [first, , , request]: Answer = await client.GetUserAsync({ id: '2' })
  t.notMatch(request, /Nonce|Created/, 'the client sent neither Nonce nor Created')
  const [second, , , again]: Answer = await client.GetUserAsync({ id: '2' })
  // node-soap names its UsernameToken by the second it was made (wsu:Id="SecurityToken-<time>"): the two
  // calls may straddle a second.
  const unnamed = (message: string) => message.replace(/SecurityToken-[^"]+/, 'SecurityToken')
  t.equal(unnamed(again), unnamed(request), 'the very same message')
  t.same([first.user.id, second.user.id], ['2', '2'])
})

test('a refusal costs one password verification whether the login exists or not', async (t) => {
  // Counts scrypt verifications, seen through the module every password check goes through.
  let verifications = 0
  const secrets = await import('../../app/core/auth/partner-secrets.ts')
  const { buildApp } = await t.mockImport<typeof import('../../app/app.ts')>('../../app/app.ts', {
    '../../app/core/auth/partner-secrets.ts': {
      ...secrets,
      verifyPassword: (password: string, stored: string) => {
        verifications++
        return secrets.verifyPassword(password, stored)
      }
    }
  })
  const { testConfig } = await import('../helpers/app.ts')
  const { openSqliteStore } = await import('../../app/core/store/sqlite.ts')
  const { loadDemoData } = await import('../../app/core/store/sample-data.ts')
  const config = testConfig(ENV)
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  await createPartnerAccount(store, config.soap.partnerSecretKey, { login: 'partner', password: 's3cret', userId: '5' })
  await createPartnerAccount(store, config.soap.partnerSecretKey, {
    login: 'texter',
    password: 't3xt-only',
    userId: '3',
    textOnly: true
  })
  const app = await buildApp(config, { store, logger: false })
  t.teardown(async () => { await app.close(); await store.close() })
  const url = await app.listen({ host: '127.0.0.1', port: 0 })

  const verificationsFor = async (token: string, label: string) => {
    const before = verifications
    const response = await post(`${url}/v1/UserService`, envelope('1.1', GET_USER, token), H11)
    t.match(
      readFault(response.text),
      { code: 'wsse:FailedAuthentication', reason: 'The security token could not be authenticated or authorized' },
      label
    )
    return verifications - before
  }
  const created = new Date().toISOString()
  const unknownText = await verificationsFor(textToken('nobody', 'guess'), 'unknown login, PasswordText')
  t.equal(unknownText, 1, 'an unknown login runs one verification (against a dummy hash)')
  t.equal(
    await verificationsFor(textToken('texter', 'guess'), 'text-only account, wrong password'),
    unknownText,
    'the same as a text-only account with a wrong password'
  )
  t.equal(
    await verificationsFor(textToken('partner', 'guess'), 'sealed account, wrong password'),
    unknownText,
    'the same as an account with a sealed password'
  )
  const nonce = randomBytes(16)
  t.equal(
    await verificationsFor(
      digestToken(nonce, nonce.toString('base64'), created, 'guess').replace('>partner<', '>nobody<'),
      'unknown login, digest'
    ),
    unknownText,
    'a digest for an unknown login too'
  )
  const other = randomBytes(16)
  t.equal(
    await verificationsFor(digestToken(other, other.toString('base64'), created, 'guess'), 'wrong digest'),
    unknownText,
    'and a wrong digest'
  )

  const ok = await post(`${url}/v1/UserService`, envelope('1.1', GET_USER, textToken('partner', 's3cret')), H11)
  t.equal(ok.status, 200, 'the right password still passes')
})

test('the in-process nonce cache fails closed when full of live nonces, and frees expired ones', async (t) => {
  const cache = memoryNonceCache(3)
  t.equal(await cache.claim('a', 1000, 0), true)
  t.equal(await cache.claim('a', 1000, 10), false, 'a replay within its lifetime')
  t.equal(await cache.claim('b', 1000, 20), true)
  t.equal(await cache.claim('c', 1000, 30), true)
  await t.rejects(
    cache.claim('d', 1000, 40),
    { code: 'SERVICE_UNAVAILABLE', message: 'Too many WS-Security nonces and signatures in flight; retry later', details: { retryAfter: 1 } },
    'full: refused rather than forget a live nonce'
  )
  t.equal(await cache.claim('a', 1000, 40), false, 'the live nonces are all still remembered')
  t.equal(await cache.claim('d', 1000, 1005), true, 'once the oldest expired, a new nonce fits')
  t.equal(await cache.claim('a', 1000, 1025), true, 'an expired nonce is forgotten (and b, expired too, made room)')
})
