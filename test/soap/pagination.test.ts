// SOAP v2 ListUsers pages through node-soap, built from the WSDL: pageSize and pageToken in,
// nextPageToken out, 10000 users on both stores while users are created and deleted between pages;
// every user seen exactly once. A forged or foreign token is a BAD_USER_INPUT fault; a call without
// paging elements answers as before (no nextPageToken), and v1 has no paging at all.
import { test } from 'tap'
import soap from 'soap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { gql } from '../helpers/app.ts'
import { STORE_KINDS, at, duplicates, emptyStore, seedUsers } from '../helpers/paging.ts'
import { listenSoapApp } from './helpers.ts'

const ENV = { RATE_LIMIT_REQUESTS: '100000', RATE_LIMIT_COST: '100000000' }
type Client = soap.Client & Record<string, (args: unknown) => Promise<[any, string, unknown, string]>>

async function partnerClient (url: string, version: 'v1' | 'v2' = 'v2'): Promise<Client> {
  const path = `${url}/${version}/UserService`
  const client = await soap.createClientAsync(`${path}?wsdl`, {}, path)
  client.setSecurity(
    new soap.WSSecurity('pager', 'pager-secret', { passwordType: 'PasswordDigest', hasTimeStamp: true })
  )
  return client as Client
}

for (const kind of STORE_KINDS) {
  test(`${kind}: node-soap pages ListUsers through 10000 users while users are created and deleted; each seen exactly once`, async (t) => {
    const store = await emptyStore(t, kind, 'soap_pages')
    const initial = await seedUsers(store, 10000)
    const { url, partnerSecretKey } = await listenSoapApp(t, ENV, { store })
    // A partner of its own (a new SERVICE user, created now: the last row of the list).
    const partner = await createPartnerAccount(store, partnerSecretKey, { login: 'pager', password: 'pager-secret' })
    const client = await partnerClient(url)

    const mustSee = new Set([...initial, partner.id])
    const mustNotSee = new Set<string>()
    const read: string[] = []
    let token: string | undefined
    let round = 0
    do {
      const [answer] = await client.ListUsersAsync(token ? { pageSize: 100, pageToken: token } : { pageSize: 100 })
      const ids = (answer.user ?? []).map((u: { id: string }) => u.id)
      t.ok(ids.length <= 100)
      read.push(...ids)
      token = answer.nextPageToken
      if (!token) break
      round++
      const ahead = initial[100 * round + 300]
      if (ahead !== undefined && !read.includes(ahead) && (await store.deleteUser(ahead))) {
        mustSee.delete(ahead)
        mustNotSee.add(ahead)
      }
      mustSee.add(
        (
          await store.createUser({
            name: `late ${round}`,
            email: `late-${round}@example.com`,
            createdAt: at(100000 + round)
          })
        ).id
      )
      await store.deleteUser(ids.at(-1)!)
      mustNotSee.add(
        (
          await store.createUser({
            name: `early ${round}`,
            email: `early-${round}@example.com`,
            createdAt: at(-1 - round)
          })
        ).id
      )
    } while (token)
    const seen = new Set(read)
    t.same(duplicates(read), [], 'no user seen twice')
    t.same([...mustSee].filter((id) => !seen.has(id)), [], 'every user present when its turn came was seen')
    t.same(
      read.filter((id) => mustNotSee.has(id)),
      [],
      'no user deleted before its turn, nor created behind the cursor'
    )
    t.ok(round >= 99, `${round + 1} pages`)
  })
}

test('ListUsers page tokens: refused when forged or foreign, absent without paging; GraphQL and SOAP page alike; v1 unchanged', async (t) => {
  const { url, store, partnerSecretKey } = await listenSoapApp(t, ENV)
  await createPartnerAccount(store, partnerSecretKey, { login: 'pager', password: 'pager-secret', userId: '5' })
  const client = await partnerClient(url)

  const [legacy] = await client.ListUsersAsync({ limit: 2 })
  t.equal(legacy.user.length, 2)
  t.equal(legacy.nextPageToken, undefined, 'a call without paging elements answers as before')
  const [first] = await client.ListUsersAsync({ pageSize: 2 })
  t.same(first.user.map((u: { id: string }) => u.id), ['1', '2'])
  t.type(first.nextPageToken, 'string')
  const [second] = await client.ListUsersAsync({ pageToken: first.nextPageToken, pageSize: 2 })
  t.same(second.user.map((u: { id: string }) => u.id), ['3', '4'])
  const [last] = await client.ListUsersAsync({ pageToken: second.nextPageToken, pageSize: 2 })
  t.same(last.user.map((u: { id: string }) => u.id), ['5'])
  t.equal(last.nextPageToken, undefined, 'no token after the last page')

  // The token is the usersConnection cursor: the same pages from either transport.
  const graphql = await gql(
    url,
    'query ($after: String) { usersConnection(first: 2, after: $after) { edges { node { id } } } }',
    { after: first.nextPageToken }
  )
  t.same(graphql.body.data.usersConnection.edges.map((e: { node: { id: string } }) => e.node.id), ['3', '4'])
  const messages = await gql(url, '{ messagesConnection(roomId: "general", first: 1) { pageInfo { endCursor } } }')
  const messageCursor = messages.body.data.messagesConnection.pageInfo.endCursor

  const [payload, mac] = (first.nextPageToken as string).split('.') as [string, string]
  for (const [label, token] of [['garbage', 'abc'], ['payload changed', `${payload.slice(0, -2)}AA.${mac}`], ['a message cursor', messageCursor]] as const) {
    const fault = await client.ListUsersAsync({ pageSize: 2, pageToken: token }).then(() => null, (err: any) => err)
    t.match(fault?.body, '<f:code>BAD_USER_INPUT</f:code>', label)
  }
  const both = await client.ListUsersAsync({ limit: 2, pageSize: 2 }).then(() => null, (err: any) => err)
  t.match(both?.body, '<f:code>BAD_USER_INPUT</f:code>', 'limit and pageSize together')
  const over = await client.ListUsersAsync({ pageSize: 101 }).then(() => null, (err: any) => err)
  t.match(over?.body, 'pageSize must be between 1 and 100', 'pageSize capped like limit')

  // The contract says so, generated from the description; v1 has none of it.
  const v2 = await (await fetch(`${url}/v2/UserService?wsdl`)).text()
  t.match(v2, '<xs:element name="pageSize" type="xs:int" minOccurs="0"/>')
  t.match(v2, '<xs:element name="pageToken" type="xs:string" minOccurs="0"/>')
  t.match(v2, '<xs:element name="nextPageToken" type="xs:string" minOccurs="0"/>')
  const v1 = await (await fetch(`${url}/v1/UserService?wsdl`)).text()
  t.notMatch(v1, /pageSize|pageToken|nextPageToken/)
})
