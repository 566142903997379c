// Execution: batching loaders per request, no sharing between callers, and the JIT multi-operation trap.
import { test } from 'tap'
import { openSqliteStore } from '../app/core/store/sqlite.ts'
import { gql, listenTestApp } from './helpers/app.ts'
import { countingStore } from './helpers/counting-store.ts'

test('a list of 100 messages with authors costs one author fetch', async (t) => {
  const { store, calls } = countingStore(openSqliteStore(':memory:'))
  t.teardown(() => store.close())
  const authors = await store.insertUsers(
    Array.from({ length: 30 }, (_, i) => ({ name: `Author ${i}`, email: `a${i}@example.com` }))
  )
  await store.insertMessages(
    Array.from({ length: 100 }, (_, i) => ({ roomId: 'busy', content: `hello ${i}`, authorId: authors[i % 30]!.id }))
  )
  const { url } = await listenTestApp(t, {}, { store, demo: false })
  calls.length = 0
  const { body } = await gql(url, '{ messages(roomId: "busy", limit: 100) { content author { name } } }')
  t.notOk(body.errors)
  t.equal(body.data.messages.length, 100)
  t.equal(body.data.messages[7].author.name, 'Author 7')
  const fetches = calls.filter((c) => c.method === 'usersByIds')
  t.equal(fetches.length, 1, 'one batched author fetch')
  t.equal((fetches[0]!.args[0] as string[]).length, 30, 'each author once')
})

test('aliased root user fields batch into one fetch', async (t) => {
  const { store, calls } = countingStore(openSqliteStore(':memory:'))
  t.teardown(() => store.close())
  const { url } = await listenTestApp(t, {}, { store })
  calls.length = 0
  const { body } = await gql(url, '{ a: user(id: "2") { name } b: user(id: "3") { name } c: user(id: "404") { name } }')
  t.same(body.data, { a: { name: 'Ada Lovelace' }, b: { name: 'Alan Turing' }, c: null })
  t.equal(calls.filter((c) => c.method === 'usersByIds').length, 1)
})

test('two concurrent callers never share a loader or a cached row', async (t) => {
  const { url, store, token } = await listenTestApp(t)
  // Slow the store down so both requests are in flight together and could batch or cache across requests.
  const usersByIds = store.usersByIds.bind(store)
  let batches = 0
  store.usersByIds = async (ids) => {
    batches++
    await new Promise((resolve) => setTimeout(resolve, 50))
    return usersByIds(ids)
  }
  const query = '{ user(id: "2") { id email } }'
  const [owner, other] = await Promise.all([
    gql(url, query, undefined, { authorization: `Bearer ${token('2')}` }),
    gql(url, query, undefined, { authorization: `Bearer ${token('3')}` })
  ])
  t.same(owner.body.data, { user: { id: '2', email: 'ada@example.com' } })
  t.same(other.body.data, { user: { id: '2', email: null } })
  t.match(other.body.errors, [{ extensions: { code: 'FORBIDDEN' } }])
  t.equal(batches, 2, 'each request fetched through its own loader')
})

test('a multi-operation document runs the operation named by operationName, every time (graphql-jit trap)', async (t) => {
  const { url } = await listenTestApp(t)
  const document = 'query Admin { user(id: "1") { name } } query Ada { user(id: "2") { name } }'
  const run = async (operationName: string) => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: document, operationName })
    })
    return (await response.json() as any).data.user.name
  }
  // Repeated past the uses after which a text runs compiled: a document compiled by text alone would
  // answer every operationName with the same operation.
  for (let i = 0; i < 4; i++) {
    t.equal(await run('Admin'), 'Admin')
    t.equal(await run('Ada'), 'Ada Lovelace')
  }
  const missing = await gql(url, document)
  t.match(missing.body.errors, [{ message: /Must provide operationName/, extensions: { code: 'OPERATION_NOT_FOUND' } }])
})

test('a single-operation document compiled by the JIT refuses another operationName', async (t) => {
  const { url } = await listenTestApp(t)
  const query = 'query Ada { user(id: "2") { name } }'
  for (let i = 0; i < 3; i++) await gql(url, query)
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query, operationName: 'Other' })
  })
  const body = await response.json() as any
  t.notOk(body.data)
  t.match(body.errors, [{ message: 'Unknown operation named "Other"', extensions: { code: 'OPERATION_NOT_FOUND' } }])
})

test('a text answers the same on its first use (planned then) and from the plan cache, failures included', async (t) => {
  const { app, url, token } = await listenTestApp(t, { COST_BUDGET_ANONYMOUS: '50' })
  const ada = { authorization: `Bearer ${token('2')}` }
  const post = async (
    query: string,
    variables: Record<string, unknown> | undefined,
    headers: Record<string, string>,
    operationName?: string
  ) => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json', ...headers },
      body: JSON.stringify({ query, variables, operationName })
    })
    const body = (await response.json()) as { extensions?: { cost?: { remaining?: number } } }
    delete body.extensions?.cost?.remaining // the caller's rate window moves from one request to the next
    return `${response.status} ${JSON.stringify(body)}`
  }
  const byId = 'query ById($id: ID!) { user(id: $id) { id name email } }'
  const page = 'query Page($limit: Int) { users(limit: $limit) { id name } }'
  // [what, text, a valid request's variables and headers, then the request under test]
  const cases: Array<
    [
      string,
      string,
      [Record<string, unknown>, Record<string, string>],
      [Record<string, unknown> | undefined, Record<string, string>, string?]
    ]
  > = [
    ['a caller reading their own e-mail', byId, [{ id: '2' }, ada], [{ id: '2' }, ada]],
    ['a field the caller may not read (partial answer)', byId, [{ id: '2' }, ada], [{ id: '3' }, ada]],
    ['an anonymous caller and a protected field', byId, [{ id: '2' }, ada], [{ id: '2' }, {}]],
    ['a variable of the wrong type', page, [{ limit: 2 }, {}], [{ limit: 'ten' }, {}]],
    ['a required variable missing from the variables sent', byId, [{ id: '2' }, ada], [{}, ada]],
    ['a required variable and no variables at all', byId, [{ id: '2' }, ada], [undefined, ada]],
    ["an operation over the caller's budget", page, [{ limit: 2 }, {}], [{ limit: 100 }, {}]],
    ['another operationName', byId, [{ id: '2' }, ada], [{ id: '2' }, ada, 'Other']]
  ]
  let variant = 0
  for (const [what, text, [validVariables, validHeaders], [variables, headers, operationName]] of cases) {
    // Each case gets texts of its own (a trailing comment changes the text, not the answer).
    const fresh = `${text} # ${++variant}`
    const planned = app.graphqlInspection.planCache.entries
    const firstUse = await post(fresh, variables, headers, operationName)
    t.equal(app.graphqlInspection.planCache.entries, planned + 1, `${what}: planned on its first use`)

    const cachedText = `${text} # ${++variant}`
    for (let use = 0; use < 2; use++) await post(cachedText, validVariables, validHeaders)
    const cachedPlans = app.graphqlInspection.planCache.entries
    const fromCache = await post(cachedText, variables, headers, operationName)
    t.equal(app.graphqlInspection.planCache.entries, cachedPlans, `${what}: the third use ran from the cache`)
    t.equal(fromCache, firstUse, `${what}: the same answer either way`)
  }
})

test('refused variables spend no cost units, on a first use and from the plan cache', async (t) => {
  const { url } = await listenTestApp(t, { RATE_LIMIT_COST: '1000' })
  const query = 'query Page($limit: Int) { users(limit: $limit) { id } }'
  const remaining = async () => (await gql(url, query, { limit: 2 })).body.extensions.cost.remaining as number
  const compiled = await remaining()
  for (let i = 0; i < 4; i++) {
    const { body } = await gql(url, query, { limit: 'two' })
    t.match(body, { errors: [{ extensions: { code: 'BAD_USER_INPUT' } }] })
    t.notOk('data' in body, 'refused before execution: no data')
  }
  t.equal(await remaining(), compiled - 2, 'only the valid request was charged')
})
