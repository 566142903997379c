// Automatic persisted queries with a real client: Apollo Client's PersistedQueryLink (hash by GET,
// full query by POST on a miss) against a listening server; the registry in memory and shared
// through Redis, bounded in both.
import { test } from 'tap'
import { createHash, randomUUID } from 'node:crypto'
import { ApolloClient, HttpLink, InMemoryCache, gql } from '@apollo/client'
import { PersistedQueryLink } from '@apollo/client/link/persisted-queries'
import { Redis } from 'ioredis'
import { listenTestApp } from '../helpers/app.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { NO_SHEDDING, postJson } from './helpers.ts'

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'

interface Exchange { method: string; url: string; status: number; body: any }

/** An Apollo Client speaking APQ to `url` (hashed queries by GET), with every HTTP exchange recorded. */
function apolloClient (url: string, headers: Record<string, string> = {}) {
  const exchanges: Exchange[] = []
  const recordingFetch: typeof fetch = async (input, init) => {
    const response = await fetch(input, init)
    exchanges.push({
      method: init?.method ?? 'GET',
      url: String(input),
      status: response.status,
      body: await response.clone().json()
    })
    return response
  }
  const link = new PersistedQueryLink({ sha256: (text: string) => createHash('sha256').update(text).digest('hex'), useGETForHashedQueries: true })
    .concat(new HttpLink({ uri: `${url}/graphql`, headers, fetch: recordingFetch }))
  return { client: new ApolloClient({ link, cache: new InMemoryCache() }), exchanges }
}

const USER_NAME = gql`query UserName($id: ID!) { user(id: $id) { id name } }`

test('Apollo Client: a miss answers PERSISTED_QUERY_NOT_FOUND (200), the client resends with the query, then hashes hit', async (t) => {
  const { url, token } = await listenTestApp(t, NO_SHEDDING)

  const first = apolloClient(url)
  const result = await first.client.query({ query: USER_NAME, variables: { id: '2' } })
  t.same(result.data, { user: { __typename: 'User', id: '2', name: 'Ada Lovelace' } })
  t.same(
    first.exchanges.map((e) => [e.method, e.status]),
    [
      ['GET', 200],
      ['POST', 200]
    ],
    'hash by GET, then hash + query by POST'
  )
  t.same(first.exchanges[0]!.body.errors, [{
    message: 'Persisted query not found: resend the request with the full query to register it',
    extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' }
  }])
  t.notMatch(first.exchanges[0]!.url, /query=/, 'the first request carries only the hash')

  const second = apolloClient(url)
  const again = await second.client.query({ query: USER_NAME, variables: { id: '3' } })
  t.equal((again.data as any).user.name, 'Alan Turing')
  t.same(second.exchanges.map((e) => [e.method, e.status]), [['GET', 200]], 'another client: one GET by hash')

  // Mutations go by POST, hash first, and register the same way.
  const mutation = gql`mutation Post($content: String!) { postMessage(roomId: "apq", content: $content) { id content } }`
  const { client: authed, exchanges } = apolloClient(url, { authorization: `Bearer ${token('2')}` })
  const posted = await authed.mutate({ mutation, variables: { content: 'hello' } })
  t.equal((posted.data as any).postMessage.content, 'hello')
  t.same(exchanges.map((e) => e.method), ['POST', 'POST'], 'a mutation never goes by GET')
})

test('APQ registration checks the hash and registers only valid single operations', async (t) => {
  const { url } = await listenTestApp(t, { ...NO_SHEDDING, APQ_MAX_DOCUMENT_BYTES: '100' })
  const pq = (text: string) => ({ extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(text) } } })

  const mismatch = await postJson(url, { query: '{ users { id } }', ...pq('{ users { name } }') })
  t.equal(mismatch.body.errors[0].extensions.code, 'PERSISTED_QUERY_HASH_MISMATCH')
  t.equal(
    (await postJson(url, pq('{ users { name } }'))).body.errors[0].extensions.code,
    'PERSISTED_QUERY_NOT_FOUND',
    'nothing registered'
  )

  const invalid = '{ users { nope } }'
  t.equal(
    (await postJson(url, { query: invalid, ...pq(invalid) })).body.errors[0].extensions.code,
    'GRAPHQL_VALIDATION_FAILED',
    'runs as usual, and fails as usual'
  )
  t.equal(
    (await postJson(url, pq(invalid))).body.errors[0].extensions.code,
    'PERSISTED_QUERY_NOT_FOUND',
    'an invalid text is not registered'
  )

  const long = `{ users { ${'id '.repeat(40)}} }`
  t.ok((await postJson(url, { query: long, ...pq(long) })).body.data, 'a text over APQ_MAX_DOCUMENT_BYTES runs')
  t.equal(
    (await postJson(url, pq(long))).body.errors[0].extensions.code,
    'PERSISTED_QUERY_NOT_FOUND',
    'but is not registered'
  )
})

test('the in-memory registry is bounded (APQ_MAX_ENTRIES), least recently used out first', async (t) => {
  const { url } = await listenTestApp(t, { ...NO_SHEDDING, APQ_MAX_ENTRIES: '2' })
  const texts = ['{ a: users { id } }', '{ b: users { id } }', '{ c: users { id } }']
  const pq = (text: string) => ({ extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(text) } } })
  for (const text of texts) t.ok((await postJson(url, { query: text, ...pq(text) })).body.data)
  t.equal(
    (await postJson(url, pq(texts[0]!))).body.errors?.[0].extensions.code,
    'PERSISTED_QUERY_NOT_FOUND',
    'the oldest is gone'
  )
  t.ok((await postJson(url, pq(texts[1]!))).body.data)
  t.ok((await postJson(url, pq(texts[2]!))).body.data)
})

test('with REDIS_URL the registry is shared by every instance, and bounded in Redis', async (t) => {
  const prefix = `test-apq-${randomUUID()}:`
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, lazyConnect: true })
  await redis.connect().catch((err) => { throw new Error(`This test needs Redis at ${REDIS_URL}: ${err.message}`) })
  t.teardown(async () => {
    const keys = await redis.keys(`${prefix}*`)
    if (keys.length > 0) await redis.del(...keys)
    redis.disconnect()
  })
  const env = { ...NO_SHEDDING, REDIS_URL, REDIS_PREFIX: prefix, APQ_MAX_ENTRIES: '3' }
  const one = await listenTestApp(t, env)
  const two = await listenTestApp(t, env)

  const registering = apolloClient(one.url)
  await registering.client.query({ query: USER_NAME, variables: { id: '2' } })
  t.same(registering.exchanges.map((e) => e.method), ['GET', 'POST'], 'registered through instance one')
  const elsewhere = apolloClient(two.url)
  const result = await elsewhere.client.query({ query: USER_NAME, variables: { id: '4' } })
  t.equal((result.data as any).user.name, 'Grace Hopper')
  t.same(elsewhere.exchanges.map((e) => [e.method, e.status]), [['GET', 200]], 'instance two knew the hash from Redis')

  // Bound: four more registrations on instance one leave three entries in Redis, the oldest gone.
  const texts = ['{ a: users { id } }', '{ b: users { id } }', '{ c: users { id } }', '{ d: users { id } }']
  const pq = (text: string) => ({ extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(text) } } })
  for (const text of texts) await postJson(one.url, { query: text, ...pq(text) })
  t.equal(await redis.hlen(`${prefix}{apq}:documents`), 3)
  t.equal(await redis.zcard(`${prefix}{apq}:recency`), 3)
  t.same((await redis.hkeys(`${prefix}{apq}:documents`)).sort(), texts.slice(1).map(sha256Hex).sort())
  const three = await listenTestApp(t, env)
  t.equal(
    (await postJson(three.url, pq(texts[0]!))).body.errors?.[0].extensions.code,
    'PERSISTED_QUERY_NOT_FOUND',
    'evicted from Redis'
  )
  t.ok((await postJson(three.url, pq(texts[3]!))).body.data, 'the newest is served by an instance that never saw it')
})

test('an automatic registration (hash and text) is accepted by POST only; the registered hash may then be fetched by GET', async (t) => {
  const { url } = await listenTestApp(t, NO_SHEDDING)
  const text = '{ users(limit: 1) { name } }'
  const extensions = JSON.stringify({ persistedQuery: { version: 1, sha256Hash: sha256Hex(text) } })
  const get = (params: Record<string, string>) => fetch(`${url}/graphql?${new URLSearchParams(params)}`)

  // Any ad-hoc text wrapped as a registration would otherwise run by GET, with a public cache lifetime.
  const wrapped = await get({ query: text, extensions })
  t.equal(wrapped.status, 405)
  t.notMatch(wrapped.headers.get('cache-control') ?? '', /public|max-age=[1-9]/, 'not cacheable')
  t.match(await wrapped.json(), { errors: [{ message: /GET accepts persisted queries only.*register a text under its hash \(APQ\) by POST/, extensions: { code: 'METHOD_NOT_ALLOWED' } }] })
  const stillUnknown = await get({ extensions })
  t.match(
    await stillUnknown.json(),
    { errors: [{ extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' } }] },
    'the GET registered nothing'
  )

  t.ok((await postJson(url, { query: text, extensions: JSON.parse(extensions) })).body.data, 'registered by POST')
  const byHash = await get({ extensions })
  t.equal(byHash.status, 200)
  t.match(byHash.headers.get('cache-control'), /max-age=60/, 'a registered hash is a cacheable GET')
  t.match(await byHash.json(), { data: { users: [{ name: 'Admin' }] } })
})
