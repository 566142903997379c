// The response cache through a listening server (one instance, the embedded default: in process):
// the switch and its refusal on PostgreSQL without Redis, a SOAP write seen by the next GraphQL read,
// batches, and a write whose invalidation fails. Two instances sharing Redis: two-instances.test.ts.
import { test } from 'tap'
import * as soap from 'soap'
import { ResponseCache, type CacheStore } from '../../app/core/cache/response-cache.ts'
import { ConfigError } from '../../app/core/config/index.ts'
import { gql, listenTestApp, testConfig } from '../helpers/app.ts'
import { listenSoapApp } from '../soap/helpers.ts'
import { MANIFEST_FILE, getPersisted, queryIdOf } from '../persisted/helpers.ts'

const USER_2 = '{ user(id: "2") { id name } }'

test('RESPONSE_CACHE=false: every read executes (no Age)', async (t) => {
  const { url } = await listenTestApp(t, { RESPONSE_CACHE: 'false' })
  for (let i = 0; i < 3; i++) t.equal((await gql(url, USER_2)).headers.get('age'), null)
})

test('on by default; off by default on PostgreSQL without Redis, where asking for it is refused at start', async (t) => {
  t.equal(testConfig().responseCache.enabled, true)
  const postgres = { DATABASE_URL: 'postgres://127.0.0.1:5432/test' }
  t.equal(testConfig(postgres).responseCache.enabled, false, 'instances could not tell one another of writes')
  t.equal(testConfig({ ...postgres, REDIS_URL: 'redis://127.0.0.1:6379' }).responseCache.enabled, true)
  t.throws(() => testConfig({ ...postgres, RESPONSE_CACHE: 'true' }), ConfigError)
  t.throws(() => testConfig({ RESPONSE_CACHE_TTL_MS: '10' }), /RESPONSE_CACHE_TTL_MS/)
})

test('a SOAP write (UpdateUser by node-soap) is seen by the next GraphQL read', async (t) => {
  const { url } = await listenSoapApp(t)
  // The partner's own user (5, SERVICE): a partner may update itself.
  const USER_5 = '{ user(id: "5") { id name } }'
  await gql(url, USER_5)
  t.equal((await gql(url, USER_5)).headers.get('age'), '0', 'cached')
  const client = await soap.createClientAsync(`${url}/v1/UserService?wsdl`, {}, `${url}/v1/UserService`)
  client.setSecurity(new soap.WSSecurity('partner', 's3cret', { passwordType: 'PasswordText' }))
  const [updated] = await client.UpdateUserAsync({ id: '5', name: 'Partner Ltd.' })
  t.equal(updated.user.name, 'Partner Ltd.')
  const read = await gql(url, USER_5)
  t.equal(read.body.data.user.name, 'Partner Ltd.', 'the acknowledged write is what the next read returns')
  t.equal(read.headers.get('age'), null)
})

test('variables written in another order, or with a declared default left out, are the same entry', async (t) => {
  const { url } = await listenTestApp(t)
  const query = 'query ($id: ID!, $withName: Boolean! = true) { user(id: $id) { id name @include(if: $withName) } }'
  t.equal((await gql(url, query, { id: '2', withName: true })).headers.get('age'), null, 'executed')
  t.equal((await gql(url, query, { withName: true, id: '2' })).headers.get('age'), '0', 'another key order: a hit')
  t.equal((await gql(url, query, { id: '2' })).headers.get('age'), '0', 'the default, coerced: a hit')
  t.equal((await gql(url, query, { id: '3', withName: true })).headers.get('age'), null, 'other values: executed')
})

test('each operation of a batch is answered from the cache on its own, with its own cost', async (t) => {
  const { url } = await listenTestApp(t, { MAX_BATCH_SIZE: '3' })
  await gql(url, USER_2)
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify([{ query: USER_2 }, { query: '{ user(id: "3") { id name } }' }])
  })
  type Answer = { data: { user: { name: string } }, extensions: { cost: { remaining: number } } }
  const [cached, executed] = await response.json() as Answer[]
  t.equal(cached!.data.user.name, 'Ada Lovelace')
  t.equal(executed!.data.user.name, 'Alan Turing')
  t.ok(cached!.extensions.cost.remaining > executed!.extensions.cost.remaining, 'each with the cost units left after it')
  t.equal(response.headers.get('age'), null, 'a batch as a whole is no one entry: no Age')
  const metrics = await (await fetch(`${url}/metrics`)).text()
  t.match(metrics, /^graphql_response_cache_hits_total 1$/m, 'the first operation was a hit')
  t.match(metrics, /^graphql_response_cache_misses_total 2$/m)
})

test('a write the cache cannot be told of is refused with nothing changed; if it is lost in between, stored but not acknowledged', async (t) => {
  /** A store whose invalidations fail from the `failFrom`-th on (1: every one). */
  const failing = (failFrom: number): CacheStore => {
    let calls = 0
    return {
      begin: async () => 0,
      get: async () => null,
      set: async () => false,
      invalidate: async () => { if (++calls >= failFrom) throw new Error('Connection is closed.') },
      invalidateAll: async () => {},
      bytes: null
    }
  }
  const { url, token, store } = await listenTestApp(t)
  const admin = { authorization: `Bearer ${token('1', 'ADMIN')}` }
  const rename = (over: string, name: string) =>
    gql(over, `mutation { updateUser(id: "2", input: { name: "${name}" }) { name } }`, undefined, admin)

  const down = await listenSoapApp(t, {}, { store, invalidation: new ResponseCache(failing(1)) })
  const refused = await rename(down.url, 'Ada King')
  t.equal(refused.body.errors[0].extensions.code, 'SERVICE_UNAVAILABLE')
  t.equal(refused.body.errors[0].message, 'Nothing was changed: the response cache is unavailable; retry shortly')
  t.equal((await gql(url, USER_2)).body.data.user.name, 'Ada Lovelace', 'nothing changed')

  const lostInBetween = await listenSoapApp(t, {}, { store, invalidation: new ResponseCache(failing(2)) })
  const unacknowledged = await rename(lostInBetween.url, 'Ada King')
  t.equal(unacknowledged.body.errors[0].extensions.code, 'SERVICE_UNAVAILABLE')
  t.match(unacknowledged.body.errors[0].message, /^The change was made, but the response cache could not be told of it/)
  t.equal(unacknowledged.body.data?.updateUser ?? null, null, 'not acknowledged')
  t.equal((await gql(url, '{ user(id: "2") { name createdAt } }')).body.data.user.name, 'Ada King', 'the change itself is stored')
})

test('Cache-Control, by POST and by GET, says whether an answer depends on its caller, as the SDL declares', async (t) => {
  const { url, token } = await listenTestApp(t, { PERSISTED_MANIFEST: MANIFEST_FILE, CACHE_MAX_AGE_SEC: '60' })
  const ada = { authorization: `Bearer ${token('2')}` }
  const control = (response: { headers: Headers }) => response.headers.get('cache-control')
  t.equal(control(await gql(url, USER_2)), 'public, max-age=60', 'POST, no caller-dependent field, anonymous')
  t.equal(control(await gql(url, USER_2, undefined, ada)), 'private, max-age=60', 'POST with a token: its cost report is Ada\'s')
  const email = await gql(url, '{ user(id: "2") { email } }', undefined, ada)
  t.equal(email.body.data.user.email, 'ada@example.com')
  t.equal(control(email), 'private, max-age=60', 'POST selecting email (@auth)')
  t.equal(control(await gql(url, 'mutation { updateUser(id: "2", input: { name: "Ada" }) { id } }', undefined, ada)), 'no-store',
    'a mutation')
  t.equal(control(await gql(url, '{ user(id: "2") { email } }')), 'no-store', 'an answer with an error (anonymous email)')
  t.equal(control(await getPersisted(url, queryIdOf('UserById'), { id: '2' })), 'public, max-age=60', 'GET, anonymous')
  t.equal(control(await getPersisted(url, queryIdOf('UserEmail'), { id: '2' }, ada)), 'private, max-age=60', 'GET, email')
})
