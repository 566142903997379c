// Budgets over SOAP, through a listening server: an authenticated partner spends its own request
// budget and cost units (the same windows as its user over GraphQL), not its client address's, so
// partners behind one address do not throttle each other; a message that authenticates nobody spends
// the address's budget, and an exhausted address no longer gets its failed logins verified (429) while
// partners keep working. Cost units are priced like the GraphQL operation doing the same read or write.
import { test } from 'tap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { mintToken } from '../../cli/mint-token.ts'
import { gql } from '../helpers/app.ts'
import { envelope, listenSoapApp, post, readFault, textToken } from './helpers.ts'

const NS = 'urn:graphql-query-service:soap'
const H11 = { 'content-type': 'text/xml; charset=utf-8' }
const getUser = (version: 'v1' | 'v2') => `<GetUser xmlns="${NS}/${version}/UserService"><id>2</id></GetUser>`

test('the request budget of an authenticated partner is its own, not its address\'s', async (t) => {
  const soap = await listenSoapApp(t, { RATE_LIMIT_REQUESTS: '3' })
  await createPartnerAccount(soap.store, soap.partnerSecretKey, { login: 'acme', password: 'acme-secret' })
  const call = (login: string, password: string) =>
    post(`${soap.url}/v1/UserService`, envelope('1.1', getUser('v1'), textToken(login, password)), H11)
  for (let i = 1; i <= 3; i++) t.equal((await call('partner', 's3cret')).status, 200, `partner call ${i}`)
  const limited = await call('partner', 's3cret')
  t.equal(limited.status, 429)
  t.match(readFault(limited.text), { errorCode: 'RATE_LIMITED' })
  const other = await call('acme', 'acme-secret')
  t.equal(other.status, 200, 'another partner from the same address still has its whole budget')
})

test('messages that authenticate nobody spend the address; once it is spent they get 429, partners still pass', async (t) => {
  const soap = await listenSoapApp(t, { RATE_LIMIT_REQUESTS: '3' })
  const call = (password: string) =>
    post(`${soap.url}/v1/UserService`, envelope('1.1', getUser('v1'), textToken('partner', password)), H11)
  for (let i = 1; i <= 3; i++) {
    t.match(readFault((await call(`guess-${i}`)).text), { code: 'wsse:FailedAuthentication' }, `guess ${i}`)
  }
  const fourth = await call('guess-4')
  t.equal(fourth.status, 429, 'the address has no request left: refused before its password is verified')
  t.match(readFault(fourth.text), { errorCode: 'RATE_LIMITED' })
  const malformed = await post(`${soap.url}/v1/UserService`, '<not-soap', H11)
  t.equal(malformed.status, 500, 'a malformed message is answered as such (it is counted, too)')
  t.equal((await call('s3cret')).status, 200, 'the partner itself authenticates and spends its own budget')
})

test('cost units: spent on the partner\'s user, priced like the same GraphQL read or write', async (t) => {
  const soap = await listenSoapApp(t)
  const asPartnerUser = { authorization: `Bearer ${mintToken(soap.app.config.jwt, '5', 'SERVICE')}` }
  /** Cost units left in user 5's window, read through GraphQL (a probe that itself costs `probe`). */
  const PROBE = '{ user(id: "3") { id } }'
  const remaining = async () =>
    (await gql(soap.url, PROBE, undefined, asPartnerUser)).body.extensions.cost.remaining as number
  const probe = (await gql(soap.url, PROBE, undefined, asPartnerUser)).body.extensions.cost.requested as number
  const graphqlCost = async (query: string) => {
    const { body } = await gql(soap.url, query, undefined, asPartnerUser)
    t.ok(body.extensions?.cost, `priced: ${query}`)
    return body.extensions.cost.requested as number
  }
  const soapCost = async (version: 'v1' | 'v2', operation: string) => {
    const before = await remaining()
    await post(`${soap.url}/${version}/UserService`, envelope('1.1', operation, textToken('partner', 's3cret')), H11)
    return before - (await remaining()) - probe
  }

  t.equal(
    await soapCost('v1', getUser('v1')),
    await graphqlCost('{ user(id: "2") { id name email } }'),
    'GetUser v1 = user(id) with the v1 fields'
  )
  t.equal(
    await soapCost('v2', getUser('v2')),
    await graphqlCost('{ user(id: "2") { id name email createdAt } }'),
    'GetUser v2 adds createdAt'
  )
  t.equal(
    await soapCost('v2', `<ListUsers xmlns="${NS}/v2/UserService"><limit>7</limit></ListUsers>`),
    await graphqlCost('{ users(limit: 7) { id name email createdAt } }'),
    'ListUsers(7) = users(limit: 7)'
  )
  t.equal(
    await soapCost('v2', `<ListUsers xmlns="${NS}/v2/UserService"/>`),
    await graphqlCost('{ users { id name email createdAt } }'),
    'the same default page size'
  )
  t.equal(
    await soapCost('v1', `<CreateUser xmlns="${NS}/v1/UserService"><name>Priced</name><email>priced-soap@example.com</email></CreateUser>`),
    await graphqlCost('mutation { createUser(input: { name: "Priced", email: "priced-gql@example.com" }) { id name email } }'),
    'CreateUser is priced as a write'
  )
  t.equal(
    await soapCost('v1', `<DeleteUser xmlns="${NS}/v1/UserService"><id>4</id></DeleteUser>`),
    await graphqlCost('mutation { deleteUser(id: "4") }'),
    'DeleteUser too (refused FORBIDDEN, after admission, as over GraphQL)'
  )
})

test('a partner over its cost units gets 429 with Retry-After', async (t) => {
  // GetUser v1 costs 4: two fit in 10 units, the third does not.
  const soap = await listenSoapApp(t, { RATE_LIMIT_COST: '10' })
  const call = () =>
    post(`${soap.url}/v1/UserService`, envelope('1.1', getUser('v1'), textToken('partner', 's3cret')), H11)
  t.equal((await call()).status, 200)
  t.equal((await call()).status, 200)
  const limited = await call()
  t.equal(limited.status, 429)
  t.ok(Number(limited.headers.get('retry-after')) > 0)
  t.match(readFault(limited.text), { errorCode: 'RATE_LIMITED', reason: /Cost rate limit exceeded/ })
})
