// Persisted queries over HTTP against a listening server: both request forms, enforced (production)
// and development modes, hash checks, CSRF on GET, limits and auth, and GET caching (ETag, 304).
import { test } from 'tap'
import { listenTestApp } from '../helpers/app.ts'
import { countingStore } from '../helpers/counting-store.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import {
  MANIFEST_FILE,
  NO_SHEDDING,
  PREFLIGHT,
  getPersisted,
  manifest,
  persistedGetUrl,
  postJson,
  queryIdOf
} from './helpers.ts'

const ENFORCED = { NODE_ENV: 'production', PERSISTED_MANIFEST: MANIFEST_FILE, ...NO_SHEDDING }
const DEVELOPMENT = { PERSISTED_MANIFEST: MANIFEST_FILE, ...NO_SHEDDING }
const USER_BY_ID = queryIdOf('UserById')

test('enforced mode (the production default): both persisted forms run, full queries are refused', async (t) => {
  const { url, config } = await listenTestApp(t, ENFORCED)
  t.equal(config.persisted.only, true, 'persisted-only is on by default in production')
  const expected = { user: { id: '2', name: 'Ada Lovelace' } }

  const post = await postJson(url, { queryId: USER_BY_ID, variables: { id: '2' } })
  t.equal(post.status, 200)
  t.match(post.body.data, expected, 'POST { queryId, variables }')

  const get = await getPersisted(url, USER_BY_ID, { id: '2' })
  t.equal(get.status, 200)
  t.match(get.body.data, expected, 'GET ?queryId=…&variables=…')
  t.match(get.headers.get('content-type'), /^application\/json/)

  const adHoc = await postJson(url, { query: '{ users { id } }' })
  t.equal(adHoc.status, 200)
  t.same(adHoc.body.errors, [{
    message: 'Only persisted queries are accepted: send a registered id (documentId, queryId, doc_id or id; or extensions.persistedQuery.sha256Hash) instead of a query',
    extensions: { code: 'PERSISTED_QUERY_REQUIRED' }
  }])
  t.notOk('data' in adHoc.body, 'nothing executed')
  const adHocGraphQLResponse = await postJson(
    url,
    { query: '{ users { id } }' },
    { accept: 'application/graphql-response+json' }
  )
  t.equal(adHocGraphQLResponse.status, 400, 'the GraphQL-over-HTTP media type answers a 4xx')

  const unknown = await postJson(url, { queryId: `sha256:${'0'.repeat(64)}`, variables: { id: '2' } })
  t.same(unknown.body.errors, [{
    message: `Persisted query not found: no operation is registered as "sha256:${'0'.repeat(64)}"`,
    extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' }
  }])
  const unknownGet = await getPersisted(url, 'sha256:nope')
  t.equal(unknownGet.status, 200)
  t.equal(unknownGet.body.errors[0].extensions.code, 'PERSISTED_QUERY_NOT_FOUND')
  t.equal(unknownGet.headers.get('cache-control'), 'no-store', 'errors are never cacheable')

  // Automatic registration is off: a hash with its query is not registered (nor run).
  const text = '{ users(limit: 1) { id } }'
  const apq = { extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(text) } } }
  const register = await postJson(url, { query: text, ...apq })
  t.same(register.body.errors, [{
    message: 'Persisted query not found: this service accepts only operations registered at deploy time',
    extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' }
  }])
  t.equal((await postJson(url, apq)).body.errors[0].extensions.code, 'PERSISTED_QUERY_NOT_FOUND', 'still unknown')

  // Apollo-style hash of a manifest operation (a safelist): served from the manifest.
  const userById = manifest.operations.find((o) => o.name === 'UserById')!
  const safelisted = await postJson(url, {
    variables: { id: '3' },
    extensions: { persistedQuery: { version: 1, sha256Hash: userById.id } }
  })
  t.match(safelisted.body.data, { user: { id: '3', name: 'Alan Turing' } })

  const named = await postJson(url, { queryId: USER_BY_ID, operationName: 'UserById', variables: { id: '2' } })
  t.match(named.body.data, expected, 'operationName may name the registered operation')
  const misnamed = (await (
    await fetch(persistedGetUrl(url, USER_BY_ID, { id: '2' }, { operationName: 'Other' }), { headers: PREFLIGHT })
  ).json()) as any
  t.same(misnamed.errors, [{ message: 'Unknown operation named "Other"', extensions: { code: 'OPERATION_NOT_FOUND' } }])
})

test('GET never runs a mutation, and needs no preflight-forcing header (a safe, credential-less read)', async (t) => {
  const { store, calls } = countingStore()
  const { url, token } = await listenTestApp(t, ENFORCED, { store })
  const postMessage = queryIdOf('PostMessage')
  const variables = { roomId: 'general', content: 'hello' }
  calls.length = 0

  const overGet = await getPersisted(url, postMessage, variables, { authorization: `Bearer ${token('2')}` })
  t.equal(overGet.status, 405)
  t.same(overGet.body.errors, [
    { message: 'Only queries can be sent by GET; send mutations by POST', extensions: { code: 'METHOD_NOT_ALLOWED' } }
  ])
  t.same(calls, [], 'refused before anything ran')

  const overPost = await postJson(url, { queryId: postMessage, variables }, { authorization: `Bearer ${token('2')}` })
  t.match(overPost.body.data, { postMessage: { content: 'hello' } }, 'the same registered mutation runs by POST')

  // A GET a page could send cross-site (no preflight) runs only a query, with no credential (cookies are
  // never read; Authorization would force a preflight): the curl / CDN-warmer form is served as is.
  calls.length = 0
  const bare = await fetch(persistedGetUrl(url, USER_BY_ID, { id: '2' }))
  t.equal(bare.status, 200, 'a plain GET of a persisted query')
  t.match(await bare.json(), { data: { user: { id: '2', name: 'Ada Lovelace' } } })
  t.match(bare.headers.get('cache-control'), /^public/, 'anonymous, hence publicly cacheable')
  const variants: Record<string, string>[] = [
    { 'apollo-require-preflight': 'true' },
    { 'x-apollo-operation-name': 'UserById' },
    { 'content-type': 'application/json' },
    { 'content-type': 'text/plain' }
  ]
  for (const headers of variants) {
    const ok = await fetch(persistedGetUrl(url, USER_BY_ID, { id: '2' }), { headers })
    t.equal(ok.status, 200, `accepted with ${Object.keys(headers)[0]}`)
  }
  t.same(calls.filter((c) => /^(create|update|delete|post)/.test(c.method)), [], 'no write ever ran by GET')

  const noId = await fetch(`${url}/graphql?query=${encodeURIComponent('{ users { id } }')}`)
  t.match(
    await noId.json(),
    { errors: [{ extensions: { code: 'PERSISTED_QUERY_REQUIRED' } }] },
    'an ad-hoc GET in persisted-only mode: refused like an ad-hoc POST'
  )
})

test('development mode: ad-hoc queries run; a hash that does not match its query is refused', async (t) => {
  const { url, config } = await listenTestApp(t, DEVELOPMENT)
  t.equal(config.persisted.only, false)
  t.match((await postJson(url, { query: '{ user(id: "4") { name } }' })).body.data, { user: { name: 'Grace Hopper' } })
  t.match(
    (await getPersisted(url, USER_BY_ID, { id: '4' })).body.data,
    { user: { name: 'Grace Hopper' } },
    'registered ids work as well'
  )

  const text = '{ user(id: "4") { name } }'
  const mismatch = await postJson(url, {
    query: text,
    extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(`${text} `) } }
  })
  t.same(mismatch.body, {
    errors: [
      {
        message:
          'The query does not match extensions.persistedQuery.sha256Hash (the sha256 hex digest of the query text)',
        extensions: { code: 'PERSISTED_QUERY_HASH_MISMATCH' }
      }
    ]
  })
  const notRegistered = await postJson(url, {
    extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(`${text} `) } }
  })
  t.equal(
    notRegistered.body.errors[0].extensions.code,
    'PERSISTED_QUERY_NOT_FOUND',
    'a mismatched text is never registered'
  )

  const version2 = await postJson(url, {
    query: text,
    extensions: { persistedQuery: { version: 2, sha256Hash: sha256Hex(text) } }
  })
  t.equal(version2.status, 400)
  t.equal(version2.body.errors[0].message, 'Unsupported extensions.persistedQuery.version: only version 1 is supported')

  const getAdHoc = await fetch(`${url}/graphql?query=${encodeURIComponent(text)}`, { headers: PREFLIGHT })
  t.equal(getAdHoc.status, 405, 'GET takes persisted queries only, in development too')
  t.match((await getAdHoc.json() as any).errors, [{ message: /GET accepts persisted queries only/, extensions: { code: 'METHOD_NOT_ALLOWED' } }])
})

test('limits and auth apply unchanged to persisted operations, priced with the request\'s variables', async (t) => {
  const { url, token } = await listenTestApp(t, { ...ENFORCED, COST_BUDGET_ANONYMOUS: '100' })
  const users = queryIdOf('Users')

  const page = await getPersisted(url, users)
  t.equal(page.body.data.users.length, 5)
  t.equal(page.body.extensions.cost.requested, 60, 'the default page of 20 × 3 fields')
  const big = await getPersisted(url, users, { limit: 50 })
  t.same(big.body.errors, [
    {
      message: 'Query cost 150 exceeds the budget of 100 for this caller',
      extensions: { code: 'COST_LIMIT_EXCEEDED', cost: 150, budget: 100 }
    }
  ])
  t.notOk(big.body.data, 'refused before execution')
  t.match(
    (await getPersisted(url, users, { limit: 50 }, { authorization: `Bearer ${token('2')}` })).body.data.users,
    [{}],
    'a user has a larger budget'
  )

  const email = queryIdOf('UserEmail')
  const anonymous = await getPersisted(url, email, { id: '2' })
  t.same(anonymous.body.data, { user: { id: '2', email: null } })
  t.match(anonymous.body.errors, [{ message: 'Must be logged in', extensions: { code: 'UNAUTHENTICATED' } }])
  const self = await getPersisted(url, email, { id: '2' }, { authorization: `Bearer ${token('2')}` })
  t.match(self.body, { data: { user: { id: '2', email: String } } })
  t.notOk(self.body.errors)
  const invalidToken = await getPersisted(url, email, { id: '2' }, { authorization: 'Bearer not.a.token' })
  t.equal(invalidToken.status, 401)
})

// Without the response cache (RESPONSE_CACHE=false), this instance's memory of the ETags it gave answers
// If-None-Match; with it, its shared entries do (test/cache/). The rename below goes around the service
// (straight to the store), which only this memory, by design, does not see until max-age.
test('GET caching without the response cache: strong ETag, Cache-Control and Vary; If-None-Match gets 304 without executing', async (t) => {
  const { store, calls } = countingStore()
  const { url, token } = await listenTestApp(t, { ...ENFORCED, RESPONSE_CACHE: 'false' }, { store })

  const first = await getPersisted(url, USER_BY_ID, { id: '2' })
  const etag = first.headers.get('etag')!
  t.match(etag, /^"[0-9a-f]{16}"$/, 'a strong ETag (a 64-bit hash of the bytes)')
  t.equal(first.headers.get('cache-control'), 'public, max-age=60', 'anonymous: public, CACHE_MAX_AGE_SEC')
  t.match(first.headers.get('vary'), /Authorization/)
  t.notOk('remaining' in first.body.extensions.cost, 'no per-caller rate-limit state in a cacheable answer')
  t.equal(
    (await getPersisted(url, USER_BY_ID, { id: '2' })).headers.get('etag'),
    etag,
    'unchanged data, same bytes, same ETag'
  )

  await store.updateUser('2', { name: 'Ada King' })
  calls.length = 0
  const revalidated = await getPersisted(url, USER_BY_ID, { id: '2' }, { 'if-none-match': etag })
  t.equal(revalidated.status, 304)
  t.equal(revalidated.text, '')
  t.equal(revalidated.headers.get('etag'), etag)
  t.equal(revalidated.headers.get('cache-control'), 'public, max-age=60')
  t.same(calls, [], 'answered from the remembered ETag: nothing executed (the rename is not seen)')
  t.equal(
    (await getPersisted(url, USER_BY_ID, { id: '2' }, { 'if-none-match': `W/${etag}` })).status,
    304,
    'weak comparison, as If-None-Match requires'
  )

  const fresh = await getPersisted(url, USER_BY_ID, { id: '2' })
  t.equal(fresh.status, 200)
  t.equal(fresh.body.data.user.name, 'Ada King', 'without If-None-Match it executes')
  t.not(fresh.headers.get('etag'), etag)
  t.ok(calls.length > 0)

  // Callers with Authorization: private, remembered per caller.
  const ada = { authorization: `Bearer ${token('3')}` }
  const own = await getPersisted(url, USER_BY_ID, { id: '2' }, ada)
  t.equal(own.headers.get('cache-control'), 'private, max-age=60')
  t.equal(
    (await getPersisted(url, USER_BY_ID, { id: '2' }, { ...ada, 'if-none-match': own.headers.get('etag')! })).status,
    304
  )
  calls.length = 0
  const otherCaller = await getPersisted(
    url,
    USER_BY_ID,
    { id: '2' },
    { authorization: `Bearer ${token('4')}`, 'if-none-match': own.headers.get('etag')! }
  )
  t.ok(calls.length > 0, 'another caller\'s remembered ETag is not used: it executes')
  t.equal(otherCaller.status, 304, 'and the identical bytes still answer 304')

  // Different variables, different answer.
  const other = await getPersisted(url, USER_BY_ID, { id: '3' }, { 'if-none-match': fresh.headers.get('etag')! })
  t.equal(other.status, 200)
  t.equal(other.body.data.user.name, 'Alan Turing')

  // Answers with errors are never cached nor revalidated.
  const withErrors = await getPersisted(url, queryIdOf('UserEmail'), { id: '2' })
  t.ok(withErrors.body.errors)
  t.equal(withErrors.headers.get('cache-control'), 'no-store')
  t.equal(withErrors.headers.get('etag'), null)
  t.equal((await getPersisted(url, queryIdOf('UserEmail'), { id: '2' }, { 'if-none-match': '*' })).status, 200)

  // POST answers are not HTTP-cached.
  const post = await postJson(url, { queryId: USER_BY_ID, variables: { id: '2' } })
  t.equal(post.headers.get('etag'), null)
})

test('without the response cache, a remembered ETag lasts max-age, then the request executes again', async (t) => {
  const { url, store } = await listenTestApp(t, { ...ENFORCED, CACHE_MAX_AGE_SEC: '1', RESPONSE_CACHE: 'false' })
  const first = await getPersisted(url, USER_BY_ID, { id: '2' })
  t.equal(first.headers.get('cache-control'), 'public, max-age=1')
  await store.updateUser('2', { name: 'Ada King' })
  t.equal(
    (await getPersisted(url, USER_BY_ID, { id: '2' }, { 'if-none-match': first.headers.get('etag')! })).status,
    304
  )
  await new Promise((resolve) => setTimeout(resolve, 1100))
  const later = await getPersisted(url, USER_BY_ID, { id: '2' }, { 'if-none-match': first.headers.get('etag')! })
  t.equal(later.status, 200)
  t.equal(later.body.data.user.name, 'Ada King')
})

test('a GET answer over the answer cap is replaced by RESPONSE_TOO_LARGE and never cached', async (t) => {
  const { url, store } = await listenTestApp(t, { ...ENFORCED, MAX_RESPONSE_BYTES: '1024' })
  await store.insertUsers(
    Array.from({ length: 20 }, (_, i) => ({ name: `User number ${i}`, email: `u${i}@example.com` }))
  )
  const small = await getPersisted(url, USER_BY_ID, { id: '2' })
  t.ok(small.headers.get('etag'), 'a small answer is cacheable')
  const large = await getPersisted(url, queryIdOf('Users'), { limit: 20 })
  t.equal(large.status, 200)
  t.match(large.body, { errors: [{ extensions: { code: 'RESPONSE_TOO_LARGE', maxResponseBytes: 1024 } }] })
  t.equal(large.headers.get('cache-control'), 'no-store')
  t.equal(large.headers.get('etag'), null)
})
