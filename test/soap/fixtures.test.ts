// Requests captured from zeep and node-soap (test/fixtures/soap) are accepted as sent, with a clock
// injected at the time they were captured; each replay of a message with a Nonce is refused.
import { test } from 'tap'
import type { TestLike } from '../helpers/app.ts'
import { fixture, listenSoapApp, post, readFault } from './helpers.ts'

// The fixtures were captured at 07:16:29-07:16:34Z; node-soap's Timestamp expires at 07:26:34Z.
const CAPTURED = Date.parse('2026-11-22T07:17:00Z')
const NAMESPACE = 'https://example.com/v1/UserService'
// The captured requests were generated from a WSDL whose namespace was https://example.com/v1/UserService
// (then derived from the public address). The namespace is now its own setting, SOAP_NAMESPACE_BASE:
// configured here to the one the toolkits used, which is what a deployment keeping such partners does.
const CAPTURED_ENV = { SOAP_PUBLIC_URL: 'https://example.com', SOAP_NAMESPACE_BASE: 'https://example.com' }

async function appWithUser007 (t: TestLike, clock: () => number = () => CAPTURED) {
  const soap = await listenSoapApp(t, CAPTURED_ENV, { clock })
  await soap.store.createUser({ id: '007', name: 'James Bond', email: 'jb@example.com' })
  return soap
}

for (const name of ['zeep-1', 'zeep-2', 'zeep-3', 'node-soap-1', 'node-soap-2']) {
  test(`${name} is accepted: GetUser("007") answers user 007`, async (t) => {
    const { url } = await appWithUser007(t)
    const { body, headers } = fixture(name)
    const response = await post(`${url}/v1/UserService`, body, headers)
    t.equal(response.status, 200, response.text)
    const soap12 = headers['content-type']!.startsWith('application/soap+xml')
    t.match(response.contentType, soap12 ? /^application\/soap\+xml; charset=utf-8/ : /^text\/xml; charset=utf-8/)
    t.match(response.text, soap12 ? 'http://www.w3.org/2003/05/soap-envelope' : 'http://schemas.xmlsoap.org/soap/envelope/')
    t.match(response.text, `<GetUserResponse xmlns="${NAMESPACE}"><user><id>007</id><name>James Bond</name></user></GetUserResponse>`,
      'the id stays "007"; a SERVICE partner does not see the e-mail (same rule as GraphQL)')
  })
}

for (const name of ['zeep-1', 'zeep-3', 'node-soap-1']) {
  test(`${name} replayed is refused (its Nonce was used)`, async (t) => {
    const { url } = await appWithUser007(t)
    const { body, headers } = fixture(name)
    t.equal((await post(`${url}/v1/UserService`, body, headers)).status, 200)
    const replay = await post(`${url}/v1/UserService`, body, headers)
    t.equal(replay.status, name === 'zeep-3' ? 400 : 500)
    const fault = readFault(replay.text)
    t.equal(fault.errorCode, 'UNAUTHENTICATED')
    t.match(fault.reason, /Nonce has already been used/)
    if (fault.soapVersion === '1.1') t.equal(fault.code, 'wsse:FailedAuthentication')
    else t.same([fault.code, fault.subcode], ['env:Sender', 'wsse:FailedAuthentication'])
  })
}

test('node-soap-2 (PasswordText, no Nonce) replayed after its Timestamp expired is refused', async (t) => {
  let now = CAPTURED
  const { url } = await appWithUser007(t, () => now)
  const { body, headers } = fixture('node-soap-2')
  t.equal((await post(`${url}/v1/UserService`, body, headers)).status, 200)
  now = Date.parse('2026-11-22T07:26:40Z')
  const replay = await post(`${url}/v1/UserService`, body, headers)
  t.equal(replay.status, 500)
  t.match(readFault(replay.text), { code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED' })
})

test('digest fixtures are refused once their Created is older than 5 minutes, even unreplayed', async (t) => {
  const { url } = await appWithUser007(t, () => Date.parse('2026-11-22T07:21:35Z'))
  for (const name of ['zeep-1', 'zeep-3', 'node-soap-1']) {
    const { body, headers } = fixture(name)
    const response = await post(`${url}/v1/UserService`, body, headers)
    t.match(readFault(response.text), { errorCode: 'UNAUTHENTICATED', reason: /older than 300 seconds/ }, name)
  }
})

test('a digest fixture is refused with the wrong password on the account', async (t) => {
  const { store, partnerSecretKey } = await appWithUser007(t)
  const { createPartnerAccount } = await import('../../cli/create-partner.ts')
  await createPartnerAccount(store, partnerSecretKey, { login: 'partner', password: 'another-secret', userId: '5' })
  // The credentials cache of this app still holds the old password for a moment; a new app reads the new one.
  const fresh = await listenSoapApp(t, CAPTURED_ENV, { clock: () => CAPTURED, store })
  const { body, headers } = fixture('zeep-1')
  const response = await post(`${fresh.url}/v1/UserService`, body, headers)
  t.match(readFault(response.text), {
    code: 'wsse:FailedAuthentication',
    errorCode: 'UNAUTHENTICATED',
    reason: 'The security token could not be authenticated or authorized'
  })
})

for (const name of ['zeep-2', 'node-soap-2']) {
  test(`${name} (PasswordText, no Nonce) sent again is accepted: it carries the password, replay refusal would protect nothing`, async (t) => {
    const { url } = await appWithUser007(t)
    const { body, headers } = fixture(name)
    t.equal((await post(`${url}/v1/UserService`, body, headers)).status, 200)
    const again = await post(`${url}/v1/UserService`, body, headers)
    t.equal(again.status, 200, again.text)
  })
}

test('a PasswordText message without a Nonce but with a fresh Timestamp is accepted each time it is new', async (t) => {
  let now = CAPTURED
  const { url } = await appWithUser007(t, () => now)
  const { body, headers } = fixture('node-soap-2')
  t.equal((await post(`${url}/v1/UserService`, body, headers)).status, 200)
  // The same call sent again later by the toolkit carries a new Timestamp: a new message, accepted.
  now += 2000
  const shift = (iso: string) => new Date(Date.parse(iso) + 2000).toISOString()
  const resent = body.replace(/(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)/g, (m) => shift(m))
  t.not(resent, body)
  t.equal((await post(`${url}/v1/UserService`, resent, headers)).status, 200)
})
