// The admission pipeline, through listening servers and real clients: one plan per document (linear
// analysis, a byte-bounded cache), every leaf priced, answers capped, clear codes for malformed
// operations, and the same two budgets spent by every transport.
import { test } from 'tap'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { gql, listenTestApp } from './helpers/app.ts'
import { fragmentChain } from './helpers/documents.ts'
import { collect, sseClient, wsClient } from './subscriptions/clients.ts'

// A full garbage collection on demand, to read what the heap really retains.
setFlagsFromString('--expose-gc')
const collectGarbage = runInNewContext('gc') as () => void

test('fragments that spread each other are analysed once: a 2^40-field document is refused on its cost, on every transport', async (t) => {
  const { url } = await listenTestApp(t)
  const document = fragmentChain(40)
  t.ok(document.length < 2000, `a ${document.length}-byte document`)
  const refusal = { extensions: { code: 'COST_LIMIT_EXCEEDED' } }

  const { body } = await gql(url, document)
  t.match(body.errors, [refusal], 'POST')
  t.notOk(body.data)

  const ws = wsClient(url)
  t.teardown(() => ws.dispose())
  const subscription = document.replace(
    '{ users(limit: 1) { ...F0 } }',
    'subscription { messageAdded(roomId: "r") { author { ...F0 } } }'
  )
  const overWs = await collect(ws, subscription).done
  t.match(overWs.error, [refusal], 'WebSocket (graphql-transport-ws)')

  const sse = sseClient(url)
  t.teardown(() => sse.dispose())
  const overSse = await collect(sse, subscription).done
  t.match(overSse.values, [{ errors: [refusal] }], 'server-sent events')
})

test('__typename and every leaf are priced: 2000 aliases of __typename are over the anonymous budget', async (t) => {
  const { url } = await listenTestApp(t, { MAX_ALIASES: '2000' })
  const aliases = Array.from({ length: 2000 }, (_, i) => `t${i}: __typename`).join(' ')
  const { body } = await gql(url, `{ ${aliases} }`)
  t.match(body.errors, [
    {
      message: 'Query cost 2000 exceeds the budget of 1000 for this caller',
      extensions: { code: 'COST_LIMIT_EXCEEDED', cost: 2000 }
    }
  ])
  t.equal(
    (await gql(url, '{ __typename users(limit: 2) { __typename id } }')).body.extensions.cost.requested,
    1 + 2 * 2
  )
})

test('document text is capped before parsing: by length and by tokens, with a clear code', async (t) => {
  const { url } = await listenTestApp(t, { MAX_QUERY_LENGTH: '5000', MAX_QUERY_TOKENS: '200' })
  const long = await gql(url, `{ users(limit: 1) { id } } ${'#'.repeat(5000)}`)
  t.match(long.body.errors, [
    { message: 'The document is longer than 5000 characters', extensions: { code: 'QUERY_TOO_LARGE' } }
  ])
  const many = await gql(url, `{ ${'__typename '.repeat(300)} }`)
  t.match(many.body.errors, [
    { message: 'The document has more than 200 tokens', extensions: { code: 'QUERY_TOO_LARGE', maxTokens: 200 } }
  ])
})

test('100 distinct maximum-size documents leave the plan cache within its byte bound and the heap under 150 MB more', async (t) => {
  const PLAN_CACHE_BYTES = 16 * 1024 * 1024
  const { app, url } = await listenTestApp(t, {
    PLAN_CACHE_BYTES: String(PLAN_CACHE_BYTES),
    MAX_QUERY_LENGTH: '65536',
    MAX_QUERY_TOKENS: '20000',
    COST_BUDGET_ANONYMOUS: '100000',
    RATE_LIMIT_REQUESTS: '1000',
    RATE_LIMIT_COST: '100000000',
    MAX_ALIASES: '20000'
  })
  collectGarbage()
  const before = process.memoryUsage().heapUsed
  for (let n = 0; n < 100; n++) {
    // A valid document just under the length cap, different each time (so each is planned anew).
    let text = `query Q${n} { users(limit: 1) { id } `
    for (let i = 0; text.length < 65000; i++) text += `a${i}: __typename `
    const { body } = await gql(url, `${text}}`)
    t.ok(body.data?.users, `document ${n} ran`)
    if (!body.data) break
  }
  collectGarbage()
  const grown = process.memoryUsage().heapUsed - before
  const { bytes, entries } = app.graphqlInspection.planCache
  t.ok(bytes <= PLAN_CACHE_BYTES, `plan cache holds ${entries} plans, ${bytes} estimated bytes <= ${PLAN_CACHE_BYTES}`)
  t.ok(entries < 100, 'older plans were evicted')
  t.ok(grown < 150 * 1024 * 1024, `heap grew by ${Math.round(grown / 1048576)} MB`)
})

test('the answer is capped in bytes: a larger one is replaced by RESPONSE_TOO_LARGE', async (t) => {
  const { url, store } = await listenTestApp(t, { MAX_RESPONSE_BYTES: '2048' }, { demo: false })
  await store.insertUsers(
    Array.from({ length: 60 }, (_, i) => ({ name: `User number ${i}`, email: `u${i}@example.com` }))
  )
  const small = await gql(url, '{ users(limit: 2) { id } }')
  t.equal(small.body.data.users.length, 2)
  const large = await gql(url, '{ users(limit: 60) { id name createdAt } }')
  t.equal(large.status, 200)
  t.match(large.body, { errors: [{ extensions: { code: 'RESPONSE_TOO_LARGE', maxResponseBytes: 2048 } }] })
  t.notOk(large.body.data)
})

test('the answer cap counts UTF-8 bytes, not characters', async (t) => {
  const { url, store } = await listenTestApp(t, { MAX_RESPONSE_BYTES: '2048' }, { demo: false })
  // 12 names of 60 three-byte characters: about 900 characters of JSON, but over 2300 bytes.
  await store.insertUsers(
    Array.from({ length: 12 }, (_, i) => ({ name: '漢'.repeat(60), email: `kanji${i}@example.com` }))
  )
  const answer = await gql(url, '{ users(limit: 12) { name } }')
  t.match(answer.body, { errors: [{ extensions: { code: 'RESPONSE_TOO_LARGE', maxResponseBytes: 2048 } }] })
  const fits = await gql(url, '{ users(limit: 5) { name } }')
  t.equal(fits.body.data.users.length, 5, 'five such names fit')
})

test('malformed operations get clear codes, never INTERNAL_SERVER_ERROR', async (t) => {
  const { url } = await listenTestApp(t)
  const subscriptionByPost = await gql(url, 'subscription { count(target: 2) }')
  t.match(subscriptionByPost.body.errors, [{ message: /Subscriptions are served over WebSocket .* or server-sent events/, extensions: { code: 'BAD_REQUEST' } }])

  const unused = await gql(url, 'query ($x: Int) { users(limit: 1) { id } }')
  t.match(unused.body.errors, [
    { message: 'Variable "$x" is never used.', extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } }
  ])

  const wrongType = await gql(url, 'query ($n: Int) { users(limit: $n) { id } }', { n: 'ten' })
  t.match(wrongType.body.errors, [{ message: /^Variable "\$n" got invalid value "ten"/, extensions: { code: 'BAD_USER_INPUT' } }])

  // Variables nested far deeper than any input type of the schema
  // (written as text: JSON.stringify would overflow here).
  const deep = `${'{"a":'.repeat(50_000)}"bottom"${'}'.repeat(50_000)}`
  const query = JSON.stringify('mutation ($input: CreateUserInput!) { createUser(input: $input) { id } }')
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: `{"query":${query},"variables":{"input":${deep},"unused":${deep}}}`
  })
  const body = await response.json() as any
  t.match(body.errors, [{ extensions: { code: 'BAD_USER_INPUT' } }], 'deep variables: BAD_USER_INPUT')
})

test('a multi-operation document runs the operation named, each compiled on its own', async (t) => {
  const { url } = await listenTestApp(t, {}, {})
  const document =
    'query Admin { user(id: "1") { name } } query Ada { user(id: "2") { name } } mutation Nope { deleteUser(id: "2") }'
  const run = async (operationName: string) =>
    (
      await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ query: document, operationName })
      })
    ).json() as Promise<any>
  for (let i = 0; i < 3; i++) {
    t.equal((await run('Ada')).data.user.name, 'Ada Lovelace')
    t.equal((await run('Admin')).data.user.name, 'Admin')
  }
  t.match((await run('Nope')).errors, [{ extensions: { code: 'UNAUTHENTICATED' } }])
})

test('a WebSocket operation spends the same request budget as a POST, and is refused with RATE_LIMITED the same way', async (t) => {
  const { url } = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '4' })
  t.notOk((await gql(url, '{ users(limit: 1) { id } }')).body.errors, 'request 1: POST')
  const ws = wsClient(url) // request 2: the upgrade
  t.teardown(() => ws.dispose())
  const query = 'subscription { count(target: 1) }'
  const third = await collect(ws, query).done
  t.same(third.values, [{ data: { count: 0 } }], 'request 3: a WebSocket operation', { error: third.error })
  t.same((await collect(ws, query).done).values, [{ data: { count: 0 } }], 'request 4: another')
  const refused = await collect(ws, query).done
  t.match(refused.error, [{ message: /^Rate limit exceeded: at most 4 requests per 60 s/, extensions: { code: 'RATE_LIMITED' } }], 'request 5 over the socket is refused')
  const post = await gql(url, '{ users(limit: 1) { id } }')
  t.equal(post.status, 429, 'and so is the next POST')
})

test('a WebSocket operation spends cost units from the same window as a POST', async (t) => {
  const { url } = await listenTestApp(t, { RATE_LIMIT_COST: '10' })
  t.equal((await gql(url, '{ users(limit: 8) { id } }')).body.extensions.cost.remaining, 2)
  const ws = wsClient(url)
  t.teardown(() => ws.dispose())
  const refused = await collect(ws, 'subscription { messageAdded(roomId: "r") { id content author { name } } }').done
  t.match(refused.error, [{ message: /^Cost rate limit exceeded: at most 10 cost units/, extensions: { code: 'RATE_LIMITED' } }])
})
