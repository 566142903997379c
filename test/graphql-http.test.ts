// The GraphQL endpoint over real HTTP: shapes, status codes and refusals.
import { test } from 'tap'
import { gql, listenTestApp } from './helpers/app.ts'

test('answers a query from the store over HTTP', async (t) => {
  const { url } = await listenTestApp(t)
  const { status, body, headers } = await gql(url, '{ users { id name createdAt } }')
  t.equal(status, 200)
  t.match(headers.get('content-type'), /^application\/json/)
  t.ok(headers.get('x-request-id'), 'every response carries a request id')
  t.same(
    body.data.users.map((u: { name: string }) => u.name),
    ['Admin', 'Ada Lovelace', 'Alan Turing', 'Grace Hopper', 'Partner Inc.']
  )
  t.notOk(body.errors)
  t.same(body.extensions.cost, { requested: 60, budget: 1000, remaining: 100000 - 60 })
})

test('a request id sent by a trusted proxy is echoed', async (t) => {
  const { url } = await listenTestApp(t, { TRUST_PROXY: '127.0.0.1' })
  const { headers } = await gql(url, '{ users { id } }', undefined, { 'x-request-id': 'trace-123' })
  t.equal(headers.get('x-request-id'), 'trace-123')
})

test('partial results keep the fields that succeeded', async (t) => {
  const { url } = await listenTestApp(t)
  const { status, body } = await gql(url, '{ user(id: "2") { name email } users(limit: 1) { name } }')
  t.equal(status, 200)
  t.same(body.data, { user: { name: 'Ada Lovelace', email: null }, users: [{ name: 'Admin' }] })
  t.match(body.errors, [
    { message: 'Must be logged in', path: ['user', 'email'], extensions: { code: 'UNAUTHENTICATED' } }
  ])
})

test('requests that are not processed get a clear error in the same shape', async (t) => {
  const { url } = await listenTestApp(t)
  const post = (body: string, contentType = 'application/json') =>
    fetch(`${url}/graphql`, { method: 'POST', headers: { 'content-type': contentType }, body })

  const cases: [string, Response, number, string, RegExp][] = [
    ['malformed JSON', await post('{"query": '), 400, 'BAD_REQUEST', /not valid JSON/],
    ['empty body', await post(''), 400, 'BAD_REQUEST', /empty/],
    ['form content type', await post('query=%7Busers%7Bid%7D%7D', 'application/x-www-form-urlencoded'), 415, 'UNSUPPORTED_MEDIA_TYPE', /application\/json/],
    ['text/plain (CSRF simple request)', await post('{"query":"{users{id}}"}', 'text/plain'), 415, 'UNSUPPORTED_MEDIA_TYPE', /application\/json/],
    ['missing query', await post('{"variables":{}}'), 400, 'BAD_REQUEST', /Missing query/],
    ['a batch (off unless MAX_BATCH_SIZE is set)', await post('[{"query":"{users{id}}"}]'), 400, 'BAD_REQUEST', /Batched requests .* are off: .*set MAX_BATCH_SIZE/],
    ['variables not an object', await post('{"query":"{users{id}}","variables":[1]}'), 400, 'BAD_REQUEST', /variables must be a JSON object/],
    ['mutation over GET', await fetch(`${url}/graphql?query=${encodeURIComponent('mutation { deleteUser(id: "2") }')}`), 405, 'METHOD_NOT_ALLOWED', /GET accepts persisted queries only.*send other operations by POST/],
    ['unknown route', await fetch(`${url}/nope`), 404, 'NOT_FOUND', /not found/]
  ]
  for (const [name, response, status, code, message] of cases) {
    const body = await response.json() as any
    t.equal(response.status, status, `${name}: status`)
    t.match(response.headers.get('content-type'), /^application\/json/, `${name}: JSON`)
    t.match(body, { errors: [{ message, extensions: { code } }] }, `${name}: error shape`)
    t.notOk(body.data, `${name}: no data`)
  }
})

test('GraphQL errors answer 200 under application/json and 4xx under application/graphql-response+json', async (t) => {
  const { url } = await listenTestApp(t)
  const cases: [string, string, string | undefined, string][] = [
    ['syntax error', '{ users { id ', undefined, 'GRAPHQL_PARSE_FAILED'],
    ['unknown field', '{ users { nope } }', undefined, 'GRAPHQL_VALIDATION_FAILED'],
    ['unknown operationName', 'query A { users { id } }', 'B', 'OPERATION_NOT_FOUND']
  ]
  for (const [name, query, operationName, code] of cases) {
    const send = (accept: string) => fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept },
      body: JSON.stringify({ query, operationName })
    })
    const legacy = await send('application/json')
    t.equal(legacy.status, 200, `${name}: 200 with application/json`)
    t.match(await legacy.json(), { errors: [{ extensions: { code } }] })
    const modern = await send('application/graphql-response+json')
    t.equal(modern.status, 400, `${name}: 400 with application/graphql-response+json`)
    t.match(modern.headers.get('content-type'), /^application\/graphql-response\+json/)
    const body = await modern.json() as any
    t.match(body, { errors: [{ extensions: { code } }] })
    t.notOk('data' in body, `${name}: no data when execution never began`)
  }
})

test('production answers carry no stack traces and no field suggestions', async (t) => {
  const { url, app } = await listenTestApp(t, { NODE_ENV: 'production', PERSISTED_ONLY: 'false' })
  const { body } = await gql(url, '{ users { nam } }')
  t.match(body.errors[0].message, /Cannot query field "nam" on type "User"\.$/)
  t.notMatch(JSON.stringify(body), /Did you mean/)
  // A failure inside the store is reported without internals.
  app.store.listUsers = async () => {
    throw new Error('connection to 10.0.0.5 refused at Socket.connect (/srv/app/node_modules/pg/lib/client.js:12)')
  }
  const failed = await gql(url, '{ users { id } }')
  t.equal(failed.status, 200)
  t.match(failed.body.errors, [{ message: 'Internal server error', extensions: { code: 'INTERNAL_SERVER_ERROR' } }])
  t.notMatch(JSON.stringify(failed.body), /10\.0\.0\.5|client\.js|Socket/)
})

test('development answers keep suggestions, to help while building clients', async (t) => {
  const { url } = await listenTestApp(t)
  const { body } = await gql(url, '{ users { nam } }')
  t.match(body.errors[0].message, /Did you mean "name"\?/)
})

test('a mutation is never run over GET', async (t) => {
  const { url, store } = await listenTestApp(t)
  const before = await store.countUsers()
  const adHoc = await fetch(`${url}/graphql?query=${encodeURIComponent('mutation { deleteUser(id: "2") }')}`)
  t.equal(adHoc.status, 405)
  t.equal(adHoc.headers.get('allow'), 'GET, POST')
  const withId = await fetch(
    `${url}/graphql?queryId=sha256:${'0'.repeat(64)}&query=${encodeURIComponent('mutation { deleteUser(id: "2") }')}`
  )
  t.match(
    await withId.json(),
    { errors: [{ extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' } }] },
    'an id names the operation: the query beside it is never run'
  )
  t.equal(await store.countUsers(), before)
})
