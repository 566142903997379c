// The GraphQL clients and tools people already use, with their default settings, against a listening
// server: urql (GET queries, its long Accept list, subscriptions by fetch), graphql-request (batches),
// graphql-js's getIntrospectionQuery() in persisted-only production, Apollo Client's multipart
// subscriptions, persisted ids in every form on every carrier, graphql-sse's single connection mode,
// refusals before the route, and WebSocket credentials as clients send them.
import { test } from 'tap'
import { Client as UrqlClient, cacheExchange, fetchExchange, gql as urqlGql } from '@urql/core'
import { GraphQLClient, batchRequests, ClientError } from 'graphql-request'
import { ApolloClient, HttpLink, InMemoryCache, gql as apolloGql } from '@apollo/client'
import { BatchHttpLink } from '@apollo/client/link/batch-http'
import { buildClientSchema, getIntrospectionQuery, type IntrospectionQuery } from 'graphql'
import WebSocket from 'ws'
import { listenTestApp } from './helpers/app.ts'
import { countingStore } from './helpers/counting-store.ts'
import { loadDemoData } from '../app/core/store/sample-data.ts'
import { MANIFEST_FILE, NO_SHEDDING, queryIdOf } from './persisted/helpers.ts'
import { collect, sseClient, wsClient, wsUrl } from './subscriptions/clients.ts'
import { createClient as createSseClient } from 'graphql-sse'

const USER_BY_ID = queryIdOf('UserById')
const URQL_ACCEPT =
  'application/graphql-response+json, application/graphql+json, application/json, text/event-stream, multipart/mixed'

/** Every exchange a client made: method, Accept and the answer's status and type. */
function recordingFetch () {
  const exchanges: { method: string; accept: string | null; status: number; type: string | null }[] = []
  const recording: typeof fetch = async (input, init) => {
    const response = await fetch(input, init)
    exchanges.push({
      method: init?.method ?? 'GET',
      accept: new Headers(init?.headers).get('accept'),
      status: response.status,
      type: response.headers.get('content-type')
    })
    return response
  }
  return { exchanges, fetch: recording }
}

test('urql: ad-hoc queries by POST (GET is for persisted queries only), mutations answered as JSON, subscriptions by fetch as an event stream', async (t) => {
  const { url, token } = await listenTestApp(t)
  const options = {
    url: `${url}/graphql`,
    exchanges: [cacheExchange, fetchExchange],
    fetchSubscriptions: true,
    fetchOptions: { headers: { authorization: `Bearer ${token('1', 'ADMIN')}` } }
  }
  // urql's default sends queries by GET: refused in the interface's shape, with what to do instead.
  const byGet = await new UrqlClient(options)
    .query(urqlGql`query One($id: ID!) { user(id: $id) { id name } }`, { id: '2' })
    .toPromise()
  t.match(byGet.error?.graphQLErrors, [{ message: /GET accepts persisted queries only/, extensions: { code: 'METHOD_NOT_ALLOWED' } }])

  const recorded = recordingFetch()
  const client = new UrqlClient({ ...options, fetch: recorded.fetch, preferGetMethod: false })
  const query = await client.query(urqlGql`query One($id: ID!) { user(id: $id) { id name } }`, { id: '2' }).toPromise()
  t.notOk(query.error, 'no error')
  t.same(query.data, { user: { __typename: 'User', id: '2', name: 'Ada Lovelace' } })
  t.match(recorded.exchanges[0], { method: 'POST', accept: URQL_ACCEPT, status: 200, type: /^application\/graphql-response\+json/ }, 'urql sent the query by POST, and got JSON despite its Accept listing text/event-stream')

  const mutation = await client
    .mutation(urqlGql`mutation { postMessage(roomId: "urql", content: "hi") { content } }`, {})
    .toPromise()
  t.notOk(mutation.error)
  t.match(mutation.data, { postMessage: { content: 'hi' } })
  t.match(recorded.exchanges[1], { method: 'POST', accept: URQL_ACCEPT, status: 200, type: /^application\/graphql-response\+json/ },
    'urql\'s Accept lists text/event-stream, yet a mutation is answered as JSON')

  const counted: number[] = []
  await new Promise<void>((resolve, reject) => {
    client.subscription(urqlGql`subscription { count(target: 3) }`, {}).subscribe((result) => {
      if (result.error) return reject(result.error)
      counted.push(result.data.count)
      if (counted.length === 3) resolve()
    })
  })
  t.same(counted, [0, 1, 2], 'a subscription by POST with urql\'s Accept is an event stream')
  t.match(recorded.exchanges[2], { method: 'POST', accept: /text\/event-stream/, status: 200, type: /^text\/event-stream/ })
})

test('POST negotiation: an event stream only when text/event-stream is strictly preferred, or for a subscription', async (t) => {
  const { url } = await listenTestApp(t)
  const post = (accept: string, query = '{ user(id: "2") { name } }') =>
    fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept },
      body: JSON.stringify({ query })
    })
  const cases: [string, string, RegExp][] = [
    ['text/event-stream', '{ user(id: "2") { name } }', /^text\/event-stream/],
    ['text/event-stream, application/json;q=0.5', '{ user(id: "2") { name } }', /^text\/event-stream/],
    ['text/event-stream;q=0.5, application/json', '{ user(id: "2") { name } }', /^application\/json/],
    ['application/json, text/event-stream', '{ user(id: "2") { name } }', /^application\/json/],
    ['application/json, text/event-stream;q=0', 'subscription { count(target: 1) }', /^application\/json/],
    ['application/json, text/event-stream;q=0.1', 'subscription { count(target: 1) }', /^text\/event-stream/]
  ]
  for (const [accept, query, type] of cases) {
    const response = await post(accept, query)
    t.match(response.headers.get('content-type'), type, `${accept} for ${query.split(' ')[0]}`)
    await response.text()
  }
  const refused = await post('application/json', 'subscription { count(target: 1) }')
  t.match(await refused.json(), { errors: [{ extensions: { code: 'BAD_REQUEST' }, message: /WebSocket .* server-sent events/ }] }, 'a subscription by plain POST points to the carriers')
})

test('graphql-request: batchRequests, each operation admitted, priced and budgeted on its own, at most MAX_BATCH_SIZE', async (t) => {
  const { url } = await listenTestApp(t, { MAX_BATCH_SIZE: '3', RATE_LIMIT_REQUESTS: '4' })
  const answers = await batchRequests(`${url}/graphql`, [
    { document: '{ user(id: "2") { name } }' },
    { document: 'query Two($id: ID!) { user(id: $id) { name } }', variables: { id: '3' } }
  ])
  t.same(answers.map((a: any) => a.data), [{ user: { name: 'Ada Lovelace' } }, { user: { name: 'Alan Turing' } }])

  const raw = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify([{ query: '{ users(limit: 2) { id } }' }, { query: '{ users(limit: 3) { id } }' }])
  })
  const priced = await raw.json() as any[]
  t.same(priced.map((a) => a.extensions.cost.requested), [2, 3], 'each operation has its own price')
  t.ok(priced[1].extensions.cost.remaining < priced[0].extensions.cost.remaining, 'and spends its own cost units')
  // Requests so far: 1 batch of 2 (2) + 1 batch of 2 (2) = 4 of 4: the next batch's first operation is over.
  await t.rejects(batchRequests(`${url}/graphql`, [{ document: '{ user(id: "2") { name } }' }]), /RATE_LIMITED|Rate limit/, 'each operation spent a request')

  const { url: url2 } = await listenTestApp(t, { MAX_BATCH_SIZE: '3' })
  const tooMany = await batchRequests(
    `${url2}/graphql`,
    Array.from({ length: 4 }, () => ({ document: '{ user(id: "2") { name } }' }))
  ).catch((err: ClientError) => err)
  t.ok(tooMany instanceof ClientError)
  t.match((tooMany as ClientError).response, {
    status: 400,
    errors: [{ message: 'A batch holds 1 to 3 operations; this one holds 4', extensions: { code: 'BAD_REQUEST' } }]
  })

  const { url: url3 } = await listenTestApp(t)
  const off = await batchRequests(`${url3}/graphql`, [{ document: '{ user(id: "2") { name } }' }]).catch(
    (err: ClientError) => err
  )
  t.match((off as ClientError).response, { status: 400, errors: [{ message: /Batched requests .* are off: .*set MAX_BATCH_SIZE/, extensions: { code: 'BAD_REQUEST', maxBatchSize: 0 } }] },
    'batches are off by default (as in Apollo Server and graphql-yoga), with how to turn them on')
})

test("Apollo Client's BatchHttpLink, with MAX_BATCH_SIZE set: several queries in one POST, each answered", async (t) => {
  const { url } = await listenTestApp(t, { MAX_BATCH_SIZE: '5' })
  const recorded = recordingFetch()
  const client = new ApolloClient({
    link: new BatchHttpLink({ uri: `${url}/graphql`, fetch: recorded.fetch, batchMax: 5, batchInterval: 20 }),
    cache: new InMemoryCache()
  })
  const [one, two] = await Promise.all([
    client.query({ query: apolloGql`query One { user(id: "2") { id name } }` }),
    client.query({ query: apolloGql`query Two { user(id: "3") { id name } }` })
  ])
  t.match(one.data, { user: { name: 'Ada Lovelace' } })
  t.match(two.data, { user: { name: 'Alan Turing' } })
  t.equal(recorded.exchanges.length, 1, 'both queries went in one batch')
  t.match(recorded.exchanges[0], { method: 'POST', status: 200 })
})

test('a batch stops at the answer cap: the operations after it are never run', async (t) => {
  const { store, calls } = countingStore()
  await loadDemoData(store)
  const { url } = await listenTestApp(t, { MAX_BATCH_SIZE: '10', MAX_RESPONSE_BYTES: '1024' }, { store, demo: false })
  t.teardown(() => store.close())
  // Each answer is some 300 bytes (the demo's users with their price): the fourth or so passes 1024 bytes.
  const op = { query: '{ users(limit: 20) { id name } }' }
  calls.length = 0
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(Array.from({ length: 10 }, () => op))
  })
  t.equal(response.status, 200)
  t.match(
    await response.json(),
    { errors: [{ extensions: { code: 'RESPONSE_TOO_LARGE', maxResponseBytes: 1024 } }] },
    'one error, not an array of answers'
  )
  const reads = calls.filter((c) => c.method === 'listUsers').length
  t.ok(reads > 0 && reads < 10, `only the operations up to the cap ran (${reads} of 10)`)
})

test('persisted-only production with batches on: a batch of ad-hoc queries gets one refusal, not an array', async (t) => {
  const { url } = await listenTestApp(t, {
    NODE_ENV: 'production',
    PERSISTED_MANIFEST: MANIFEST_FILE,
    MAX_BATCH_SIZE: '10',
    ...NO_SHEDDING
  })
  const body = JSON.stringify(Array.from({ length: 10 }, () => ({ query: '{ __typename }' })))
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body
  })
  const answer = await response.json() as any
  t.notOk(Array.isArray(answer), 'not an array')
  t.match(answer, { errors: [{ extensions: { code: 'PERSISTED_QUERY_REQUIRED' } }] })
  t.equal(answer.errors.length, 1)
  const persisted = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify([{ queryId: USER_BY_ID, variables: { id: '2' } }])
  })
  t.match(await persisted.json(), [{ data: { user: { name: 'Ada Lovelace' } } }], 'a batch of persisted ids still runs')
})

test('persisted-only production: an ADMIN introspects with getIntrospectionQuery(), nothing else ad hoc', async (t) => {
  const { url, token } = await listenTestApp(t, {
    NODE_ENV: 'production',
    PERSISTED_MANIFEST: MANIFEST_FILE,
    ...NO_SHEDDING
  })
  const admin = new GraphQLClient(`${url}/graphql`, { headers: { authorization: `bearer ${token('1', 'ADMIN')}` } })
  const introspection = await admin.request<IntrospectionQuery>(getIntrospectionQuery())
  t.ok(
    buildClientSchema(introspection).getQueryType()?.getFields().users,
    'the schema, from the standard introspection query (lower-case "bearer" accepted)'
  )

  const refusals: [string, string, string | undefined][] = [
    ['anonymous', getIntrospectionQuery(), undefined],
    ['USER', getIntrospectionQuery(), `Bearer ${token('2')}`],
    ['ADMIN, data beside introspection', '{ __schema { queryType { name } } users { id } }', `Bearer ${token('1', 'ADMIN')}`],
    ['ADMIN, introspection through a fragment', '{ ...F } fragment F on Query { __schema { queryType { name } } }', `Bearer ${token('1', 'ADMIN')}`],
    ['ADMIN, a mutation', 'mutation { deleteUser(id: "3") }', `Bearer ${token('1', 'ADMIN')}`]
  ]
  for (const [who, query, authorization] of refusals) {
    const client = new GraphQLClient(`${url}/graphql`, { headers: authorization ? { authorization } : {} })
    const err = await client.request(query).catch((e: ClientError) => e)
    t.match((err as ClientError).response?.errors, [{ extensions: { code: 'PERSISTED_QUERY_REQUIRED' } }], who)
  }
})

test('Apollo Client: a subscription over HTTP (multipart) is refused with a code that points to WebSocket or SSE', async (t) => {
  const { url } = await listenTestApp(t)
  const client = new ApolloClient({ link: new HttpLink({ uri: `${url}/graphql` }), cache: new InMemoryCache() })
  const error = await new Promise<unknown>((resolve) => {
    client
      .subscribe({ query: apolloGql`subscription { count(target: 2) }` })
      .subscribe({ next: (result) => resolve(result.error), error: resolve })
  })
  t.match(error, { errors: [{ message: /Subscriptions are served over WebSocket .* or server-sent events/, extensions: { code: 'BAD_REQUEST' } }] })
})

test('persisted ids in every form: documentId, doc_id, id and queryId, by POST, GET, SSE and WebSocket', async (t) => {
  const { url } = await listenTestApp(t, { NODE_ENV: 'production', PERSISTED_MANIFEST: MANIFEST_FILE, ...NO_SHEDDING })
  const hex = USER_BY_ID.slice('sha256:'.length)
  const expected = { user: { id: '2', name: 'Ada Lovelace' } }
  const variables = { id: '2' }
  const post = async (body: object) =>
    (
      await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body)
      })
    ).json() as Promise<any>
  t.match(await post({ documentId: USER_BY_ID, variables }), { data: expected }, 'POST documentId (sha256:<hex>)')
  t.match(await post({ doc_id: hex, variables }), { data: expected }, 'POST Relay doc_id')
  t.match(await post({ id: hex, variables }), { data: expected }, 'POST id')
  t.match(await post({ documentId: USER_BY_ID, queryId: `sha256:${'0'.repeat(64)}`, variables }), {
    errors: [
      { message: 'queryId and documentId name different operations: send one id', extensions: { code: 'BAD_REQUEST' } }
    ]
  })
  for (const field of ['documentId', 'doc_id', 'id']) {
    const response = await fetch(
      `${url}/graphql?${new URLSearchParams({ [field]: field === 'documentId' ? USER_BY_ID : hex, variables: JSON.stringify(variables) })}`
    )
    t.match(await response.json(), { data: expected }, `GET ?${field}=`)
  }

  const sse = sseClient(url)
  for (const field of ['queryId', 'documentId', 'doc_id']) {
    const outcome = await new Promise<any>((resolve) => {
      const values: unknown[] = []
      sse.subscribe({ query: '', [field]: field === 'doc_id' ? hex : USER_BY_ID, variables } as any, {
        next: (v) => values.push(v),
        error: (error) => resolve({ values, error }),
        complete: () => resolve({ values })
      })
    })
    t.match(outcome, { values: [{ data: expected }] }, `SSE ${field}`)
    t.notOk(outcome.error)
  }
  const missing = await new Promise<any>((resolve) =>
    sse.subscribe({ query: '', queryId: `sha256:${'0'.repeat(64)}` } as any, {
      next: resolve,
      error: resolve,
      complete: () => {}
    })
  )
  t.match(
    missing,
    { errors: [{ extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' } }] },
    'an unknown id over SSE has its code'
  )

  const ws = wsClient(url)
  t.teardown(() => ws.dispose())
  const overWs = await new Promise<any>((resolve) =>
    ws.subscribe({ query: '', documentId: USER_BY_ID, variables } as any, {
      next: resolve,
      error: resolve,
      complete: () => {}
    })
  )
  t.match(overWs, { data: expected }, 'graphql-transport-ws documentId (the protocol requires a string query: empty)')

  const legacy = new WebSocket(wsUrl(url), 'graphql-ws')
  t.teardown(() => legacy.close())
  const legacyAnswer = await new Promise<any>((resolve) => {
    legacy.on('open', () => {
      legacy.send(JSON.stringify({ type: 'connection_init' }))
      legacy.send(JSON.stringify({ type: 'start', id: '1', payload: { doc_id: hex, variables } }))
    })
    legacy.on('message', (data) => {
      const message = JSON.parse(String(data))
      if (message.type === 'data') resolve(message.payload)
    })
  })
  t.match(legacyAnswer, { data: expected }, 'legacy subprotocol doc_id, no query at all')
})

test('graphql-sse single connection mode is refused with a clear message', async (t) => {
  const { url } = await listenTestApp(t)
  const client = createSseClient({ url: `${url}/graphql`, singleConnection: true, retryAttempts: 0 })
  const outcome = await collect(client, '{ user(id: "2") { name } }').done
  // graphql-sse's error shows the status line only: the reason phrase says it.
  t.equal(
    (outcome.error as Error).message,
    'Server responded with 405: graphql-sse single connection mode is not supported'
  )
  const put = await fetch(`${url}/graphql`, { method: 'PUT' })
  t.equal(put.status, 405)
  t.equal(put.headers.get('allow'), 'GET, POST')
  t.match(await put.json(), { errors: [{ message: /single connection mode is not supported: use distinct connections mode/, extensions: { code: 'METHOD_NOT_ALLOWED' } }] })
  const withToken = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-graphql-event-stream-token': 'abc' },
    body: '{"query":"{ users { id } }"}'
  })
  t.match(await withToken.json(), { errors: [{ message: /single connection mode is not supported/, extensions: { code: 'BAD_REQUEST' } }] }, 'an operation naming a reserved stream')
})

test('refusals before the route speak the media type asked for, with WWW-Authenticate and Allow', async (t) => {
  const { url } = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '6' })
  const GRAPHQL_RESPONSE = 'application/graphql-response+json'
  const post = (body: string, headers: Record<string, string> = {}) =>
    fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: GRAPHQL_RESPONSE, ...headers },
      body
    })

  const unauthenticated = await post('{"query":"{ users { id } }"}', { authorization: 'Bearer not.a-valid.token' })
  t.equal(unauthenticated.status, 401)
  t.match(unauthenticated.headers.get('www-authenticate'), /^Bearer/)
  t.match(unauthenticated.headers.get('content-type'), /^application\/graphql-response\+json/, '401')
  const cases: [string, Response, number][] = [
    ['415', await post('{}', { 'content-type': 'text/plain' }), 415],
    ['malformed JSON', await post('{"query": '), 400],
    ['empty batch', await post('[]'), 400]
  ]
  for (const [name, response, status] of cases) {
    t.equal(response.status, status, name)
    t.match(response.headers.get('content-type'), /^application\/graphql-response\+json/, name)
  }
  let limited: Response | undefined
  for (let i = 0; i < 5 && limited?.status !== 429; i++) limited = await post('{"query":"{ users { id } }"}')
  t.equal(limited?.status, 429)
  t.match(limited?.headers.get('content-type'), /^application\/graphql-response\+json/, '429')
  t.ok(limited?.headers.get('retry-after'))
  const plain = await fetch(`${url}/graphql`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{}' })
  t.match(plain.headers.get('content-type'), /^application\/json/, 'application/json when that is what was asked (or nothing)')
})

test('WebSocket credentials in the shapes clients send; unknown or invalid ones refused, never anonymous', async (t) => {
  const { url, token } = await listenTestApp(t)
  const jwt = token('2')
  const ownEmail = '{ user(id: "2") { email } }'
  const shapes: [string, Record<string, unknown>][] = [
    ['authToken, Bearer', { authToken: `Bearer ${jwt}` }],
    ['authToken, bare JWT', { authToken: jwt }],
    ['authorization', { authorization: `Bearer ${jwt}` }],
    ['Authorization', { Authorization: `Bearer ${jwt}` }],
    ['headers.Authorization', { headers: { Authorization: `Bearer ${jwt}` } }],
    ['headers.authorization, bare', { headers: { authorization: jwt } }],
    ['token, bare', { token: jwt }],
    ['token, lower-case bearer', { token: `bearer ${jwt}` }]
  ]
  for (const [name, payload] of shapes) {
    const client = wsClient(url, { payload })
    const answer = await new Promise<any>((resolve) =>
      client.subscribe({ query: ownEmail }, { next: resolve, error: resolve, complete: () => {} })
    )
    t.match(answer, { data: { user: { email: /@/ } } }, `${name}: the connection runs as user 2`)
    await client.dispose()
  }
  const refused: [string, Record<string, unknown>, RegExp][] = [
    ['an unknown credential field', { accessToken: jwt }, /^Forbidden: Unrecognised credential accessToken/],
    ['an invalid token', { authorization: 'Bearer a.b.c' }, /^Forbidden: Invalid token/],
    ['not a string', { token: 42 }, /^Forbidden: token must be a string/],
    ['two different tokens', { authToken: `Bearer ${jwt}`, token: token('3') }, /^Forbidden: Different credentials/]
  ]
  for (const [name, payload, reason] of refused) {
    const client = wsClient(url, { payload })
    const closed = await client.closed
    t.equal(closed.code, 4403, name)
    t.match(closed.reason, reason, name)
    await client.dispose()
  }
  const anonymous = wsClient(url, { payload: { clientName: 'web' } })
  const answer = await new Promise<any>((resolve) =>
    anonymous.subscribe({ query: ownEmail }, { next: resolve, error: resolve, complete: () => {} })
  )
  t.match(answer, { data: { user: { email: null } } }, 'a payload with no credential at all is anonymous')
  await anonymous.dispose()
})
