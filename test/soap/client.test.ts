// The SOAP binding through a real, independent SOAP client: the npm `soap` package, built from our
// ?wsdl, with WS-Security UsernameToken (PasswordDigest and PasswordText), SOAP 1.1 and 1.2, both
// service versions, every operation; and a user created over SOAP is visible over GraphQL. The
// contract's namespace is fixed (SOAP_NAMESPACE_BASE), never the listening address: a client generated
// from one instance's WSDL calls another instance; each operation's documentation says who may call it.
import { test } from 'tap'
import http from 'node:http'
import soap from 'soap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { mintToken } from '../../cli/mint-token.ts'
import { gql, type TestLike } from '../helpers/app.ts'
import { listenSoapApp, parseXmlText } from './helpers.ts'

const PUBLIC_URL = 'https://partners.example'
// The default namespace base: a fixed URN, whatever the public address.
const NAMESPACE_BASE = 'urn:graphql-query-service:soap'

type PasswordType = 'PasswordDigest' | 'PasswordText'

async function setup (t: TestLike) {
  const soapApp = await listenSoapApp(t, { SOAP_PUBLIC_URL: PUBLIC_URL })
  // An administrator's partner login too, for the operations a SERVICE account may not perform.
  await createPartnerAccount(soapApp.store, soapApp.partnerSecretKey, {
    login: 'root',
    password: 'r00t-secret',
    userId: '1'
  })
  async function client (
    version: 'v1' | 'v2',
    soapVersion: '1.1' | '1.2',
    login: string,
    password: string,
    passwordType: PasswordType
  ) {
    const path = `/${version}/UserService`
    // The WSDL announces the public address; the test server listens elsewhere, so the endpoint is overridden.
    const c = await soap.createClientAsync(
      `${soapApp.url}${path}?wsdl`,
      { forceSoap12Headers: soapVersion === '1.2' },
      `${soapApp.url}${path}`
    )
    c.setSecurity(new soap.WSSecurity(login, password, { passwordType, hasTimeStamp: true }))
    return c as soap.Client & Record<string, (args: unknown) => Promise<[any, string, unknown, string]>>
  }
  return { ...soapApp, client }
}

for (const version of ['v1', 'v2'] as const) {
  for (const soapVersion of ['1.1', '1.2'] as const) {
    for (const passwordType of ['PasswordDigest', 'PasswordText'] as const) {
      test(`${version}, SOAP ${soapVersion}, ${passwordType}: every operation through node-soap`, async (t) => {
        const { client, url, app } = await setup(t)
        const admin = await client(version, soapVersion, 'root', 'r00t-secret', passwordType)
        const partner = await client(version, soapVersion, 'partner', 's3cret', passwordType)

        // GetUser: the partner (SERVICE) does not see e-mails, an administrator does.
        const [asPartner, rawResponse, , rawRequest] = await partner.GetUserAsync({ id: '2' })
        t.match(rawRequest, soapVersion === '1.2' ? 'http://www.w3.org/2003/05/soap-envelope' : 'http://schemas.xmlsoap.org/soap/envelope/', 'the client spoke the SOAP version under test')
        t.match(rawRequest, `#${passwordType}`)
        t.match(
          rawResponse,
          `xmlns="${NAMESPACE_BASE}/${version}/UserService"`,
          "the response is in the version's namespace"
        )
        t.equal(asPartner.user.id, '2')
        t.type(asPartner.user.name, 'string')
        t.equal(asPartner.user.email, undefined, 'email hidden from a SERVICE partner')
        const [asAdmin] = await admin.GetUserAsync({ id: '2' })
        t.match(asAdmin.user.email, /@/, 'email visible to an administrator')
        if (version === 'v2') t.ok(asAdmin.user.createdAt, 'v2 adds createdAt')
        else t.equal(asAdmin.user.createdAt, undefined, 'v1 has no createdAt')

        // CreateUser as the partner (SERVICE may create users).
        const email = `soap-${version}-${soapVersion}-${passwordType}@example.com`.toLowerCase()
        const [created] = await partner.CreateUserAsync({ name: 'Created Over SOAP', email })
        const id = created.user.id as string
        t.equal(created.user.name, 'Created Over SOAP')

        // Visible over GraphQL, from the same store, under GraphQL's own rules.
        const adminToken = mintToken(app.config.jwt, '1', 'ADMIN')
        const viaGraphQL = await gql(
          url,
          'query ($id: ID!) { user(id: $id) { id name email } }',
          { id },
          { authorization: `Bearer ${adminToken}` }
        )
        t.same(
          viaGraphQL.body.data,
          { user: { id, name: 'Created Over SOAP', email } },
          'the SOAP-created user is visible over GraphQL'
        )

        // UpdateUser: the partner may not update someone else (FORBIDDEN fault); an administrator may.
        const forbidden = await partner.UpdateUserAsync({ id, name: 'Renamed' }).then(() => null, (err: any) => err)
        t.ok(forbidden, 'the partner is refused')
        t.match(forbidden.body, '<f:code>FORBIDDEN</f:code>')
        const [updated] = await admin.UpdateUserAsync({ id, name: 'Renamed', email: `renamed-${email}` })
        t.same([updated.user.name, updated.user.email], ['Renamed', `renamed-${email}`])

        if (version === 'v2') {
          const [listed] = await admin.ListUsersAsync({ limit: 3 })
          t.equal(listed.user.length, 3, 'ListUsers(limit) answers that many users')
          t.ok(listed.user.every((u: { id: string; createdAt: unknown }) => u.id && u.createdAt))
        } else {
          t.notOk('ListUsersAsync' in partner, 'v1 has no ListUsers')
        }

        // DeleteUser: administrators only.
        const refused = await partner.DeleteUserAsync({ id }).then(() => null, (err: any) => err)
        t.match(refused?.body, '<f:code>FORBIDDEN</f:code>')
        const [deleted] = await admin.DeleteUserAsync({ id })
        t.equal(deleted.deleted, true)
        const gone = await admin.GetUserAsync({ id }).then(() => null, (err: any) => err)
        t.match(gone?.body, '<f:code>NOT_FOUND</f:code>')
        const afterDelete = await gql(
          url,
          'query ($id: ID!) { user(id: $id) { id } }',
          { id },
          { authorization: `Bearer ${adminToken}` }
        )
        t.same(afterDelete.body.data, { user: null }, 'and GraphQL no longer finds it')
      })
    }
  }
}

test('a wrong password through node-soap is a FailedAuthentication fault, not a bare 401', async (t) => {
  const { client } = await setup(t)
  for (const passwordType of ['PasswordDigest', 'PasswordText'] as const) {
    const c = await client('v1', '1.1', 'partner', 'wrong-password', passwordType)
    const err = await c.GetUserAsync({ id: '2' }).then(() => null, (e: any) => e)
    t.equal(err?.response?.status, 500, passwordType)
    t.match(err?.body, '<faultcode>wsse:FailedAuthentication</faultcode>')
    t.match(err?.body, '<f:code>UNAUTHENTICATED</f:code>')
  }
})

for (const version of ['v1', 'v2'] as const) {
  test(`GET /${version}/UserService?wsdl: WSDL 1.1 with both bindings and the configured address`, async (t) => {
    const { url } = await setup(t)
    const response = await fetch(`${url}/${version}/UserService?wsdl`)
    t.equal(response.status, 200)
    t.match(response.headers.get('content-type'), /^text\/xml/)
    const wsdl = await response.text()
    const root = parseXmlText(wsdl)
    t.equal(root.ns, 'http://schemas.xmlsoap.org/wsdl/')
    t.equal(root.local, 'definitions')
    t.match(wsdl, `targetNamespace="${NAMESPACE_BASE}/${version}/UserService"`)
    t.match(wsdl, `<soap:address location="${PUBLIC_URL}/${version}/UserService"/>`)
    t.match(wsdl, `<soap12:address location="${PUBLIC_URL}/${version}/UserService"/>`)
    t.match(wsdl, `soapAction="${NAMESPACE_BASE}/${version}/UserService/GetUser"`)
    for (const op of ['GetUser', 'CreateUser', 'UpdateUser', 'DeleteUser']) {
      t.match(wsdl, `<wsdl:operation name="${op}">`)
    }
    if (version === 'v2') {
      t.match(wsdl, '<wsdl:operation name="ListUsers">')
      t.match(wsdl, '<xs:element name="createdAt" type="xs:dateTime"/>')
    } else {
      t.notMatch(wsdl, 'ListUsers')
      t.notMatch(wsdl, 'createdAt')
    }
  })
}

test('the namespace never depends on the address: a client generated from one instance\'s WSDL calls another', async (t) => {
  // Two instances on their own ports, no SOAP_PUBLIC_URL, over one store (as behind a balancer).
  const first = await listenSoapApp(t)
  const second = await listenSoapApp(t, {}, { store: first.store })
  t.not(first.url, second.url)
  const wsdls = await Promise.all(
    [first, second].map(async (a) => (await fetch(`${a.url}/v1/UserService?wsdl`)).text())
  )
  const targetNamespace = (wsdl: string) => /targetNamespace="([^"]+)"/.exec(wsdl)?.[1]
  t.equal(targetNamespace(wsdls[0]!), `${NAMESPACE_BASE}/v1/UserService`)
  t.equal(targetNamespace(wsdls[1]!), targetNamespace(wsdls[0]!), 'the same contract on both ports')
  t.match(
    wsdls[0],
    `<soap:address location="${first.url}/v1/UserService"/>`,
    'without SOAP_PUBLIC_URL the endpoint is where the WSDL was fetched'
  )

  const client = await soap.createClientAsync(`${first.url}/v1/UserService?wsdl`, {}, `${second.url}/v1/UserService`)
  client.setSecurity(new soap.WSSecurity('partner', 's3cret', { passwordType: 'PasswordDigest', hasTimeStamp: true }))
  const [answer, , , request] = await (client as any).GetUserAsync({ id: '2' })
  t.match(request, `${NAMESPACE_BASE}/v1/UserService`, 'the request carries the contract\'s namespace')
  t.equal(answer.user.id, '2', 'and the other instance answers it')
})

test('the endpoint address follows SOAP_PUBLIC_URL, or the forwarded host from a trusted proxy only', async (t) => {
  const behindProxy = await listenSoapApp(t, { TRUST_PROXY: '127.0.0.1' })
  const forwarded = await (
    await fetch(`${behindProxy.url}/v1/UserService?wsdl`, {
      headers: { 'x-forwarded-host': 'api.partner.example', 'x-forwarded-proto': 'https' }
    })
  ).text()
  t.match(forwarded, '<soap:address location="https://api.partner.example/v1/UserService"/>')
  t.match(forwarded, `targetNamespace="${NAMESPACE_BASE}/v1/UserService"`, 'the namespace does not move with it')
  const direct = await listenSoapApp(t)
  const ignored = await (
    await fetch(`${direct.url}/v1/UserService?wsdl`, { headers: { 'x-forwarded-host': 'evil.example' } })
  ).text()
  t.match(
    ignored,
    `<soap:address location="${direct.url}/v1/UserService"/>`,
    "an untrusted peer's forwarded host is ignored"
  )
  const configured = await listenSoapApp(t, { SOAP_PUBLIC_URL: `${PUBLIC_URL}/`, SOAP_NAMESPACE_BASE: 'https://contracts.example/users/' })
  const fixed = await (await fetch(`${configured.url}/v2/UserService?wsdl`)).text()
  t.match(fixed, `<soap12:address location="${PUBLIC_URL}/v2/UserService"/>`)
  t.match(fixed, 'targetNamespace="https://contracts.example/users/v2/UserService"', 'a configured base, trailing slash dropped')
})

test('each operation\'s documentation says who may call it, and a SERVICE partner is refused exactly those that exclude it', async (t) => {
  const { client, url } = await setup(t)
  const wsdl = await (await fetch(`${url}/v2/UserService?wsdl`)).text()
  const portType = parseXmlText(wsdl).children.find((c) => c.local === 'portType')!
  const documented = new Map(
    portType.children.map((op) => [
      op.attributes.find((a) => a.local === 'name')!.value,
      op.children.find((c) => c.local === 'documentation')!.text
    ])
  )
  t.same([...documented.keys()], ['GetUser', 'CreateUser', 'UpdateUser', 'DeleteUser', 'ListUsers'])
  t.match(documented.get('DeleteUser'), /^Allowed callers: role ADMIN\. /)
  t.match(documented.get('UpdateUser'), /^Allowed callers: role ADMIN, or the user themself/)
  t.match(documented.get('CreateUser'), /^Allowed callers: role ADMIN or SERVICE\. /)
  t.match(documented.get('GetUser'), /^Allowed callers: every authenticated partner\./)

  const partner = await client('v2', '1.1', 'partner', 's3cret', 'PasswordDigest')
  const calls: Record<string, unknown> = {
    GetUser: { id: '2' },
    CreateUser: { name: 'Doc Test', email: 'doc-test@example.com' },
    UpdateUser: { id: '2', name: 'X' },
    DeleteUser: { id: '2' },
    ListUsers: { limit: 2 }
  }
  for (const [operation, documentation] of documented) {
    // A SERVICE partner acting on another user's id: allowed exactly when its role is named, or every partner is.
    const allowedByDocs = /every authenticated partner/.test(documentation) || /role [A-Za-z ]*\bSERVICE\b/.test(documentation.split('.')[0]!)
    const outcome = await partner[`${operation}Async`]!(calls[operation]).then(() => 'ok', (err: any) => /<f:code>FORBIDDEN<\/f:code>/.test(err.body) ? 'FORBIDDEN' : `fault ${err.body}`)
    t.equal(outcome, allowedByDocs ? 'ok' : 'FORBIDDEN', `${operation}: ${documentation}`)
  }
})

/** A GET with a Host header of our choosing (fetch does not let one be set). */
function getWithHost (url: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http.get(url, { headers: { host } }, (response) => {
      let body = ''
      response
        .setEncoding('utf8')
        .on('data', (chunk: string) => {
          body += chunk
        })
        .on('end', () => resolve({ status: response.statusCode!, body }))
    }).on('error', reject)
  })
}

test('?wsdl never writes a direct client\'s Host header into the contract, and is served with validators and a max-age', async (t) => {
  const direct = await listenSoapApp(t)
  const hostile = await getWithHost(`${direct.url}/v1/UserService?wsdl`, 'evil.example')
  t.equal(hostile.status, 200)
  t.notMatch(hostile.body, 'evil.example', 'the Host header is not the address')
  t.match(hostile.body, `<soap:address location="${direct.url}/v1/UserService"/>`, 'the address the connection came to')
  const behindProxy = await listenSoapApp(t, { TRUST_PROXY: '127.0.0.1' })
  t.notMatch(
    (await getWithHost(`${behindProxy.url}/v1/UserService?wsdl`, 'evil.example')).body,
    'evil.example',
    'behind a proxy, only its X-Forwarded-Host counts'
  )

  const first = await fetch(`${direct.url}/v2/UserService?wsdl`)
  const etag = first.headers.get('etag')
  t.match(etag, /^"[A-Za-z0-9_-]{27}"$/, 'an ETag')
  t.equal(first.headers.get('cache-control'), 'public, max-age=3600')
  await first.text()
  const revalidated = await fetch(`${direct.url}/v2/UserService?wsdl`, { headers: { 'if-none-match': etag! } })
  t.equal(revalidated.status, 304, 'the current copy: 304')
  t.equal(await revalidated.text(), '')
  const other = await fetch(`${direct.url}/v1/UserService?wsdl`, { headers: { 'if-none-match': etag! } })
  t.equal(other.status, 200, 'another version\'s contract has its own ETag')
  t.not(other.headers.get('etag'), etag)
})
