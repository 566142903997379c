// Every fault path of the SOAP binding, with raw envelopes: hostile XML, envelope and header rules,
// SOAPAction, WS-Security, domain errors, internal errors, Fastify's own refusals; fault shapes and
// HTTP statuses for SOAP 1.1 and 1.2.
import { createHash, randomBytes } from 'node:crypto'
import { test } from 'tap'
import { SOAP11, SOAP12, WSSE, WSU, envelope, listenSoapApp, post, readFault, textToken } from './helpers.ts'

const NS = 'http://localhost:0/v1/UserService'
// The namespace is configured to look like the old address-derived one; these tests are about faults, not about it.
const ENV = { SOAP_PUBLIC_URL: 'http://localhost:0', SOAP_NAMESPACE_BASE: 'http://localhost:0' }
const H11 = { 'content-type': 'text/xml; charset=utf-8' }
const H12 = { 'content-type': 'application/soap+xml; charset=utf-8' }
const PARTNER = textToken('partner', 's3cret')

function getUser (id: string, prefix = 'u'): string {
  return `<${prefix}:GetUser xmlns:${prefix}="${NS}"><${prefix}:id>${id}</${prefix}:id></${prefix}:GetUser>`
}

function digestToken (
  username: string,
  password: string,
  created: string,
  options: { nonce?: Buffer | null; timestamp?: string } = {}
): string {
  const nonce = options.nonce === undefined ? randomBytes(16) : options.nonce
  const digest = createHash('sha1')
    .update(nonce ?? Buffer.alloc(0))
    .update(created)
    .update(password)
    .digest('base64')
  return (
    `<wsse:Security xmlns:wsse="${WSSE}" xmlns:wsu="${WSU}">${options.timestamp ?? ''}<wsse:UsernameToken><wsse:Username>${username}</wsse:Username>` +
    `<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest">${digest}</wsse:Password>` +
    (nonce ? `<wsse:Nonce>${nonce.toString('base64')}</wsse:Nonce>` : '') +
    `<wsu:Created>${created}</wsu:Created></wsse:UsernameToken></wsse:Security>`
  )
}

const iso = (ms: number) => new Date(ms).toISOString()

test('fault shapes: SOAP 1.1 faultcode/faultstring/detail with HTTP 500; SOAP 1.2 Code/Reason/Detail with 400 for Sender', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  const r11 = await post(`${url}/v1/UserService`, envelope('1.1', getUser('nobody'), PARTNER), H11)
  t.equal(r11.status, 500)
  t.match(r11.contentType, /^text\/xml; charset=utf-8/)
  t.match(
    r11.text,
    `<soap:Fault><faultcode>soap:Client</faultcode><faultstring>User nobody not found</faultstring><detail><f:ServiceFault xmlns:f="${NS}"><f:code>NOT_FOUND</f:code>`
  )
  const r12 = await post(`${url}/v1/UserService`, envelope('1.2', getUser('nobody'), PARTNER), H12)
  t.equal(r12.status, 400)
  t.match(r12.contentType, /^application\/soap\+xml; charset=utf-8/)
  t.match(
    r12.text,
    '<env:Code><env:Value>env:Sender</env:Value></env:Code><env:Reason><env:Text xml:lang="en">User nobody not found</env:Text></env:Reason><env:Detail>'
  )
  t.match(readFault(r12.text), { soapVersion: '1.2', code: 'env:Sender', errorCode: 'NOT_FOUND' })
})

test('hostile XML', async (t) => {
  const { url, store } = await listenSoapApp(t, { ...ENV, BODY_LIMIT_BYTES: '4096' })

  await t.test('a DOCTYPE is refused before parsing (billion laughs, external entity)', async (t) => {
    const laughs =
      '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
    const xxe = '<?xml version="1.0"?><!DOCTYPE foo [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
    for (const [prolog, id] of [[laughs, '&lol2;'], [xxe, '&xxe;']] as const) {
      for (const [version, headers, status] of [['1.1', H11, 500], ['1.2', H12, 400]] as const) {
        const response = await post(`${url}/v1/UserService`, prolog + envelope(version, getUser(id), PARTNER).replace(/^<\?xml[^>]*\?>/, ''), headers)
        t.equal(response.status, status)
        t.match(readFault(response.text), { code: version === '1.1' ? 'soap:Client' : 'env:Sender', errorCode: 'BAD_REQUEST', reason: /DOCTYPE/ })
        t.notMatch(response.text, /lollol|root:/, 'nothing expanded')
      }
    }
  })

  await t.test('entity references other than the five predefined ones are malformed; those are decoded', async (t) => {
    const undefinedEntity = await post(`${url}/v1/UserService`, envelope('1.1', getUser('&xxe;'), PARTNER), H11)
    t.match(readFault(undefinedEntity.text), { code: 'soap:Client', errorCode: 'BAD_REQUEST', reason: /undefined entity/ })
    const stray = await post(`${url}/v1/UserService`, envelope('1.1', getUser('a & b'), PARTNER), H11)
    t.match(readFault(stray.text), { code: 'soap:Client', errorCode: 'BAD_REQUEST', reason: /Malformed XML/ })
    await store.createUser({ id: 'a<&>"b', name: 'Odd Id', email: 'odd@example.com' })
    const decoded = await post(
      `${url}/v1/UserService`,
      envelope('1.1', getUser('a&lt;&#38;&#x3E;&quot;b'), PARTNER),
      H11
    )
    t.equal(decoded.status, 200, decoded.text)
    t.match(decoded.text, '<id>a&lt;&amp;&gt;&quot;b</id>', 'decoded on the way in, escaped on the way out')
  })

  await t.test('malformed XML is a client fault', async (t) => {
    for (const body of [
      '<s:Envelope xmlns:s="' + SOAP11 + '"><s:Body>',
      'not xml at all',
      '<a><b></a>',
      '',
      '<s:Envelope xmlns:s="' + SOAP11 + '"><s:Body/></s:Envelope><extra/>',
      '<x:Envelope><x:Body/></x:Envelope>'
    ]) {
      const r11 = await post(`${url}/v1/UserService`, body, H11)
      t.equal(r11.status, 500, JSON.stringify(body))
      t.match(readFault(r11.text), { code: 'soap:Client', errorCode: 'BAD_REQUEST' })
      const r12 = await post(`${url}/v1/UserService`, body, H12)
      t.equal(r12.status, 400)
      t.match(readFault(r12.text), { code: 'env:Sender', errorCode: 'BAD_REQUEST' })
    }
  })

  await t.test("Fastify's bodyLimit caps the envelope", async (t) => {
    const big = envelope('1.1', getUser('x'.repeat(5000)), PARTNER)
    const r11 = await post(`${url}/v1/UserService`, big, H11)
    t.equal(r11.status, 500)
    t.match(readFault(r11.text), { code: 'soap:Client', errorCode: 'PAYLOAD_TOO_LARGE' })
    const r12 = await post(`${url}/v1/UserService`, big.replace(SOAP11, SOAP12), H12)
    t.equal(r12.status, 400)
    t.match(readFault(r12.text), { code: 'env:Sender', errorCode: 'PAYLOAD_TOO_LARGE' })
  })

  await t.test('values stay text: leading zeros, whitespace-free digits', async (t) => {
    await store.createUser({ id: '0042', name: 'Leading Zeros', email: 'zeros@example.com' })
    const response = await post(`${url}/v1/UserService`, envelope('1.1', getUser('0042'), PARTNER), H11)
    t.match(response.text, '<id>0042</id>')
  })
})

test('element and attribute caps: a clear client fault, configurable', async (t) => {
  const { url } = await listenSoapApp(t, { ...ENV, SOAP_MAX_ELEMENTS: '40', SOAP_MAX_ATTRIBUTES: '6' })
  const attributes = (count: number) => Array.from({ length: count }, (_, i) => ` a${i}="${i}"`).join('')
  t.equal(
    (
      await post(
        `${url}/v1/UserService`,
        envelope('1.1', `<GetUser xmlns="${NS}"${attributes(5)}><id>2</id></GetUser>`, PARTNER),
        H11
      )
    ).status,
    200,
    'within the caps'
  )
  const wide = await post(
    `${url}/v1/UserService`,
    envelope('1.1', `<GetUser xmlns="${NS}"${attributes(6)}><id>2</id></GetUser>`, PARTNER),
    H11
  )
  t.equal(wide.status, 500)
  t.match(readFault(wide.text), {
    code: 'soap:Client',
    errorCode: 'BAD_REQUEST',
    reason: 'An element has more than 6 attributes'
  })
  const many = await post(
    `${url}/v1/UserService`,
    envelope('1.2', getUser('2'), PARTNER + '<x:Pad xmlns:x="urn:pad">' + '<x:i/>'.repeat(30) + '</x:Pad>'),
    H12
  )
  t.equal(many.status, 400)
  t.match(readFault(many.text), {
    code: 'env:Sender',
    errorCode: 'BAD_REQUEST',
    reason: 'The message has more than 40 elements'
  })
})

test('namespace-aware matching', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  const anyPrefix = `<?xml version="1.0"?><e:Envelope xmlns:e="${SOAP11}"><e:Header>${PARTNER}</e:Header><e:Body>${getUser('2', 'zz')}</e:Body></e:Envelope>`
  t.equal(
    (await post(`${url}/v1/UserService`, anyPrefix, H11)).status,
    200,
    'any prefix for the envelope and the operation'
  )
  const defaultNs = envelope('1.1', `<GetUser xmlns="${NS}"><id>2</id></GetUser>`, PARTNER)
  t.equal((await post(`${url}/v1/UserService`, defaultNs, H11)).status, 200, 'a default namespace')

  const wrongOpNs = await post(
    `${url}/v1/UserService`,
    envelope('1.1', '<GetUser xmlns="urn:other"><id>2</id></GetUser>', PARTNER),
    H11
  )
  t.match(
    readFault(wrongOpNs.text),
    { code: 'soap:Client', errorCode: 'OPERATION_NOT_FOUND' },
    'the right name in another namespace is not our operation'
  )
  const v2OpOnV1 = await post(`${url}/v1/UserService`, envelope('1.1', '<GetUser xmlns="http://localhost:0/v2/UserService"><id>2</id></GetUser>', PARTNER), H11)
  t.match(readFault(v2OpOnV1.text), { errorCode: 'OPERATION_NOT_FOUND' }, 'a v2 element sent to v1')
  const listOnV1 = await post(`${url}/v1/UserService`, envelope('1.1', `<ListUsers xmlns="${NS}"/>`, PARTNER), H11)
  t.match(readFault(listOnV1.text), { errorCode: 'OPERATION_NOT_FOUND' }, 'ListUsers is v2 only')
  const unknownOp = await post(`${url}/v1/UserService`, envelope('1.1', `<DropTables xmlns="${NS}"/>`, PARTNER), H11)
  t.match(readFault(unknownOp.text), { errorCode: 'OPERATION_NOT_FOUND' })
  const wrongChildNs = await post(
    `${url}/v1/UserService`,
    envelope('1.1', `<u:GetUser xmlns:u="${NS}" xmlns:o="urn:other"><o:id>2</o:id></u:GetUser>`, PARTNER),
    H11
  )
  t.match(readFault(wrongChildNs.text), { errorCode: 'BAD_USER_INPUT' }, 'an argument in a foreign namespace')
  const fakeSecurity = envelope(
    '1.1',
    getUser('2'),
    `<x:Security xmlns:x="urn:not-wsse" xmlns:s="${SOAP11}" s:mustUnderstand="1"/>`
  )
  t.match(
    readFault((await post(`${url}/v1/UserService`, fakeSecurity, H11)).text),
    { code: 'soap:MustUnderstand' },
    'a "Security" header in another namespace is not WS-Security'
  )
  const undeclared = await post(
    `${url}/v1/UserService`,
    envelope('1.1', '<q:GetUser><q:id>2</q:id></q:GetUser>', PARTNER),
    H11
  )
  t.match(readFault(undeclared.text), { errorCode: 'BAD_REQUEST', reason: /undeclared namespace prefix/ })
})

test('envelope rules: version, body, content type, method', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  const mismatch = await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), PARTNER), H12)
  t.equal(mismatch.status, 500)
  t.match(readFault(mismatch.text), { soapVersion: '1.2', code: 'env:VersionMismatch' })
  t.match(
    mismatch.text,
    '<env:Upgrade><env:SupportedEnvelope qname="e12:Envelope"',
    'SOAP 1.2 says which versions are supported'
  )
  const latin1 = await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), PARTNER), {
    'content-type': 'text/xml; charset=ISO-8859-1'
  })
  t.match(readFault(latin1.text), { code: 'soap:Client', errorCode: 'UNSUPPORTED_MEDIA_TYPE', reason: /charset iso-8859-1/ })
  const notEnvelope = await post(`${url}/v1/UserService`, '<Envelope xmlns="urn:x"><Body/></Envelope>', H11)
  t.match(readFault(notEnvelope.text), { code: 'soap:VersionMismatch' })
  const twoOps = await post(`${url}/v1/UserService`, envelope('1.1', getUser('2') + getUser('3'), PARTNER), H11)
  t.match(readFault(twoOps.text), { errorCode: 'BAD_REQUEST', reason: /exactly one element/ })
  const noBody = await post(`${url}/v1/UserService`, `<s:Envelope xmlns:s="${SOAP11}"><s:Header/></s:Envelope>`, H11)
  t.match(readFault(noBody.text), { errorCode: 'BAD_REQUEST', reason: /no Body/ })
  const json = await post(`${url}/v1/UserService`, '{"id":"2"}', { 'content-type': 'application/json' })
  t.equal(json.status, 500)
  t.match(readFault(json.text), { code: 'soap:Client', errorCode: 'UNSUPPORTED_MEDIA_TYPE' })
  // A GET that is not ?wsdl is a client error with the error's own status, never a SOAP 500.
  const get = await fetch(`${url}/v1/UserService`)
  t.equal(get.status, 405)
  t.equal(get.headers.get('allow'), 'POST')
  t.match(readFault(await get.text()), { code: 'soap:Client', errorCode: 'METHOD_NOT_ALLOWED' })
  for (const query of ['?singleWsdl', '?xsd=xsd0', '?XSD=1']) {
    const other = await fetch(`${url}/v1/UserService${query}`)
    t.equal(other.status, 404, query)
    t.match(readFault(await other.text()), { code: 'soap:Client', errorCode: 'NOT_FOUND', reason: /GET \/v1\/UserService\?wsdl/ }, query)
  }
  const unknownQuery = await fetch(`${url}/v2/UserService?foo=1`)
  t.equal(unknownQuery.status, 405)
})

test('SOAPAction: quoted, unquoted, empty or absent are accepted; a contradicting one is a fault', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  const body = () => envelope('1.1', getUser('2'), PARTNER)
  for (const action of [`"${NS}/GetUser"`, `${NS}/GetUser`, '""', undefined]) {
    const headers: Record<string, string> = action === undefined ? H11 : { ...H11, soapaction: action }
    t.equal((await post(`${url}/v1/UserService`, body(), headers)).status, 200, `SOAPAction ${action}`)
  }
  const wrong = await post(`${url}/v1/UserService`, body(), { ...H11, soapaction: `"${NS}/DeleteUser"` })
  t.equal(wrong.status, 500)
  t.match(readFault(wrong.text), { code: 'soap:Client', errorCode: 'BAD_REQUEST', reason: /does not match the Body's operation GetUser/ })

  const body12 = envelope('1.2', getUser('2'), PARTNER)
  t.equal(
    (
      await post(`${url}/v1/UserService`, body12, {
        'content-type': `application/soap+xml; charset=utf-8; action="${NS}/GetUser"`
      })
    ).status,
    200
  )
  const wrong12 = await post(`${url}/v1/UserService`, body12, {
    'content-type': `application/soap+xml; action="${NS}/CreateUser"; charset=utf-8`
  })
  t.equal(wrong12.status, 400)
  t.match(readFault(wrong12.text), { code: 'env:Sender', errorCode: 'BAD_REQUEST' })
  const wrongHeader12 = await post(`${url}/v1/UserService`, body12, { ...H12, soapaction: `"${NS}/CreateUser"` })
  t.match(
    readFault(wrongHeader12.text),
    { errorCode: 'BAD_REQUEST' },
    'a SOAPAction header sent with SOAP 1.2 is checked too'
  )
})

test('mandatory headers: Security with mustUnderstand is understood; any other is a MustUnderstand fault', async (t) => {
  const { url } = await listenSoapApp(t, ENV)
  const mandatorySecurity = textToken('partner', 's3cret', ` xmlns:s="${SOAP11}" s:mustUnderstand="1"`)
  t.equal((await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), mandatorySecurity), H11)).status, 200)
  const mandatorySecurity12 = textToken('partner', 's3cret', ` xmlns:s="${SOAP12}" s:mustUnderstand="true"`)
  t.equal((await post(`${url}/v1/UserService`, envelope('1.2', getUser('2'), mandatorySecurity12), H12)).status, 200)

  const other = `<t:Transaction xmlns:t="urn:tx" xmlns:s="${SOAP11}" s:mustUnderstand="1">5</t:Transaction>`
  const r11 = await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), PARTNER + other), H11)
  t.equal(r11.status, 500)
  t.match(readFault(r11.text), { code: 'soap:MustUnderstand', errorCode: 'BAD_REQUEST', reason: /urn:tx}Transaction/ })
  const other12 = `<t:Transaction xmlns:t="urn:tx" xmlns:s="${SOAP12}" s:mustUnderstand="true">5</t:Transaction>`
  const r12 = await post(`${url}/v1/UserService`, envelope('1.2', getUser('2'), PARTNER + other12), H12)
  t.equal(r12.status, 500)
  t.match(readFault(r12.text), { code: 'env:MustUnderstand' })
  t.match(r12.text, '<env:NotUnderstood xmlns:h="urn:tx" qname="h:Transaction"/>')

  const optional = '<t:Transaction xmlns:t="urn:tx">5</t:Transaction>'
  t.equal(
    (await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), PARTNER + optional), H11)).status,
    200,
    'optional unknown headers are ignored'
  )
  const forSomeoneElse = `<t:Transaction xmlns:t="urn:tx" xmlns:s="${SOAP11}" s:mustUnderstand="1" s:actor="urn:other-node">5</t:Transaction>`
  t.equal(
    (await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), PARTNER + forSomeoneElse), H11)).status,
    200,
    'mandatory headers for another actor are not ours'
  )
})

test('WS-Security failures are wsse:FailedAuthentication faults', async (t) => {
  let now = Date.parse('2026-06-01T12:00:00Z')
  const { url } = await listenSoapApp(t, ENV, { clock: () => now })
  const call = (headers: string, version: '1.1' | '1.2' = '1.1') =>
    post(`${url}/v1/UserService`, envelope(version, getUser('2'), headers), version === '1.1' ? H11 : H12)
  const refused = async (headers: string, reason: RegExp | string, label: string) => {
    const response = await call(headers)
    t.equal(response.status, 500, label)
    t.match(
      readFault(response.text),
      { code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason },
      label
    )
    t.match(response.text, `<soap:Fault xmlns:wsse="${WSSE}">`, 'the wsse prefix is declared')
  }
  const generic = 'The security token could not be authenticated or authorized'

  t.equal((await call(digestToken('partner', 's3cret', iso(now)))).status, 200, 'a good digest passes')
  await refused(textToken('partner', 'wrong'), generic, 'wrong text password')
  await refused(textToken('nobody', 's3cret'), generic, 'unknown login, same message')
  await refused(digestToken('partner', 'wrong', iso(now)), generic, 'wrong digest')
  await refused(digestToken('partner', 's3cret', iso(now), { nonce: null }), /requires a Nonce/, 'digest without nonce')
  await refused(digestToken('partner', 's3cret', iso(now + 60_000)), /in the future/, 'future-dated Created')
  await refused(digestToken('partner', 's3cret', iso(now - 301_000)), /older than 300 seconds/, 'stale Created')
  await refused(digestToken('partner', 's3cret', '2026-06-01T12:00:00'), /time zone/, 'Created without a zone')
  const offset = '2026-06-01T14:00:00+02:00'
  t.equal(
    (await call(digestToken('partner', 's3cret', offset))).status,
    200,
    'Created with an offset, hashed literally'
  )
  const expired = `<wsu:Timestamp><wsu:Created>${iso(now - 120_000)}</wsu:Created><wsu:Expires>${iso(now - 60_000)}</wsu:Expires></wsu:Timestamp>`
  await refused(digestToken('partner', 's3cret', iso(now), { timestamp: expired }), /expired/, 'Timestamp expired')
  const futureTimestamp = `<wsu:Timestamp><wsu:Created>${iso(now + 60_000)}</wsu:Created></wsu:Timestamp>`
  await refused(digestToken('partner', 's3cret', iso(now), { timestamp: futureTimestamp }), /in the future/, 'Timestamp from the future')
  const noToken = await call(`<wsse:Security xmlns:wsse="${WSSE}"/>`)
  t.match(readFault(noToken.text), { code: 'wsse:InvalidSecurity', errorCode: 'UNAUTHENTICATED', reason: /no UsernameToken/ }, 'Security without a token')

  const token = digestToken('partner', 's3cret', iso(now))
  t.equal((await call(token)).status, 200)
  await refused(token, /already been used/, 'replayed nonce')
  now += 10 * 60_000
  await refused(token, /older than/, 'and later it is simply stale')

  const r12 = await call(textToken('partner', 'wrong'), '1.2')
  t.equal(r12.status, 400)
  t.match(readFault(r12.text), {
    code: 'env:Sender',
    subcode: 'wsse:FailedAuthentication',
    errorCode: 'UNAUTHENTICATED'
  })
})

test('domain errors keep their GraphQL codes; authorization is the domain\'s', async (t) => {
  const { url } = await listenSoapApp(t, { ...ENV, MAX_STRING_LENGTH: '50' })
  const call = (body: string, headers = PARTNER) =>
    post(`${url}/v1/UserService`, envelope('1.1', body, headers), H11).then((r) => ({
      ...r,
      fault: r.status === 200 ? null : readFault(r.text)
    }))
  const create = (inner: string) => `<CreateUser xmlns="${NS}">${inner}</CreateUser>`

  t.match((await call(`<DeleteUser xmlns="${NS}"><id>2</id></DeleteUser>`)).fault, {
    code: 'soap:Client',
    errorCode: 'FORBIDDEN',
    reason: 'Only administrators may delete users'
  })
  t.match((await call(`<UpdateUser xmlns="${NS}"><id>2</id><name>X</name></UpdateUser>`)).fault, {
    errorCode: 'FORBIDDEN'
  })
  t.match((await call(create('<name>A</name><email>not-an-email</email>'))).fault, {
    errorCode: 'BAD_USER_INPUT',
    reason: 'Invalid email address'
  })
  t.match(
    (await call(create(`<name>${'x'.repeat(51)}</name><email>a@example.com</email>`))).fault,
    { errorCode: 'BAD_USER_INPUT', reason: 'Too long' },
    'the string cap of the limits applies'
  )
  t.match((await call(create('<name>A</name>'))).fault, { errorCode: 'BAD_USER_INPUT', reason: /email is required/ })
  t.match((await call(create('<name>A</name><name>B</name><email>a@example.com</email>'))).fault, { errorCode: 'BAD_USER_INPUT', reason: /more than once/ })
  t.match((await call(create('<name>A</name><email>a@example.com</email><role>ADMIN</role>'))).fault, { errorCode: 'BAD_USER_INPUT', reason: /no element/ }, 'no smuggled fields')
  t.match((await call(create('<name><b>A</b></name><email>a@example.com</email>'))).fault, { errorCode: 'BAD_USER_INPUT', reason: /must be text/ })
  t.match(
    (await call(create('<name>A</name><email>a@example.com</email>'), '')).fault,
    { code: 'wsse:InvalidSecurity', errorCode: 'UNAUTHENTICATED' },
    'there is no anonymous SOAP caller'
  )
  const ok = await call(create('<name>Bea</name><email>bea@example.com</email>'))
  t.equal(ok.status, 200)
  t.match((await call(create('<name>Bea 2</name><email>bea@example.com</email>'))).fault, { errorCode: 'CONFLICT' })
  const partnerRead = await call(getUser('2'))
  t.equal(partnerRead.status, 200)
  t.notMatch(partnerRead.text, '<email>', 'a SERVICE partner does not see the e-mail of another user, as over GraphQL')

  const v2 = (body: string) =>
    post(`${url}/v2/UserService`, envelope('1.1', body, PARTNER), H11).then((r) => readFault(r.text))
  t.match(await v2('<ListUsers xmlns="http://localhost:0/v2/UserService"><limit>abc</limit></ListUsers>'), { errorCode: 'BAD_USER_INPUT', reason: /xs:int/ })
  t.match(await v2('<ListUsers xmlns="http://localhost:0/v2/UserService"><limit>100000</limit></ListUsers>'), { errorCode: 'BAD_USER_INPUT', reason: /limit must be between 1 and 100/ })
})

test('unexpected errors are Server/Receiver faults without internals', async (t) => {
  const { openSqliteStore } = await import('../../app/core/store/sqlite.ts')
  const { loadDemoData } = await import('../../app/core/store/sample-data.ts')
  const { createPartnerAccount } = await import('../../cli/create-partner.ts')
  const { TEST_PARTNER_SECRET_KEY } = await import('../helpers/app.ts')
  const real = openSqliteStore(':memory:')
  t.teardown(() => real.close())
  await loadDemoData(real)
  await createPartnerAccount(real, TEST_PARTNER_SECRET_KEY, { login: 'partner', password: 's3cret', userId: '5' })
  const broken = { ...real, usersByIds: async () => { throw new Error('disk on fire at /var/lib/db') } }
  const { url } = await listenSoapApp(t, ENV, { store: broken })
  const r11 = await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), PARTNER), H11)
  t.equal(r11.status, 500)
  t.match(readFault(r11.text), {
    code: 'soap:Server',
    errorCode: 'INTERNAL_SERVER_ERROR',
    reason: 'Internal server error'
  })
  t.notMatch(r11.text, 'disk on fire')
  const r12 = await post(`${url}/v1/UserService`, envelope('1.2', getUser('2'), PARTNER), H12)
  t.equal(r12.status, 500)
  t.match(readFault(r12.text), { code: 'env:Receiver', errorCode: 'INTERNAL_SERVER_ERROR' })
})

test('a throttled partner gets 429 with Retry-After and a RATE_LIMITED fault; the contract stays available', async (t) => {
  const { url } = await listenSoapApp(t, { ...ENV, RATE_LIMIT_REQUESTS: '2' })
  const call = (version: '1.1' | '1.2') =>
    post(`${url}/v1/UserService`, envelope(version, getUser('2'), PARTNER), version === '1.1' ? H11 : H12)
  t.equal((await call('1.1')).status, 200)
  t.equal((await call('1.1')).status, 200)
  for (const version of ['1.1', '1.2'] as const) {
    const limited = await call(version)
    t.equal(limited.status, 429, `SOAP ${version}`)
    t.match(limited.headers.get('retry-after'), /^\d+$/, 'with Retry-After')
    t.match(readFault(limited.text), {
      code: version === '1.1' ? 'soap:Client' : 'env:Sender',
      errorCode: 'RATE_LIMITED'
    })
  }
  for (let i = 0; i < 3; i++) {
    const wsdl = await fetch(`${url}/v1/UserService?wsdl`)
    t.equal(wsdl.status, 200, '?wsdl is outside the request budget')
    await wsdl.text()
  }
})

test('node-soap of a throttled partner still loads the WSDL, and its call is refused with 429', async (t) => {
  const soap = (await import('soap')).default
  const { url } = await listenSoapApp(t, { ...ENV, RATE_LIMIT_REQUESTS: '1' })
  t.equal((await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), PARTNER), H11)).status, 200)
  const client = await soap.createClientAsync(`${url}/v1/UserService?wsdl`, {}, `${url}/v1/UserService`)
  client.setSecurity(new soap.WSSecurity('partner', 's3cret', { passwordType: 'PasswordDigest' }))
  const err = await (client as any).GetUserAsync({ id: '2' }).then(() => null, (e: any) => e)
  t.equal(err?.response?.status, 429)
  t.match(err?.body, '<f:code>RATE_LIMITED</f:code>')
})

test('an operation past QUERY_TIMEOUT_MS answers a TIMEOUT fault promptly, and writes nothing after the deadline', async (t) => {
  const { url, store } = await listenSoapApp(t, { ...ENV, QUERY_TIMEOUT_MS: '200' })
  const usersByIds = store.usersByIds.bind(store)
  store.usersByIds = async (ids) => {
    await new Promise((resolve) => setTimeout(resolve, 1000))
    return usersByIds(ids)
  }
  const started = Date.now()
  const response = await post(`${url}/v1/UserService`, envelope('1.1', getUser('2'), PARTNER), H11)
  t.ok(Date.now() - started < 800, `answered at the deadline (${Date.now() - started} ms), not when the read finished`)
  t.equal(response.status, 500)
  t.match(readFault(response.text), { soapVersion: '1.1', code: 'soap:Server', errorCode: 'TIMEOUT' })
  t.match(response.text, '<faultstring>Query timeout</faultstring>')
})
