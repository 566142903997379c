// Query limits: depth, cost budgets per caller class, input caps, the execution timeout, rate limits.
import { test } from 'tap'
import { getIntrospectionQuery } from 'graphql'
import { gql, listenTestApp } from './helpers/app.ts'
import { countingStore } from './helpers/counting-store.ts'
import { fragmentChain } from './helpers/documents.ts'

test('depth: at the maximum runs, one over is rejected before execution, fragments counted; introspection counts one level', async (t) => {
  const { store, calls } = countingStore()
  const { url } = await listenTestApp(t, { MAX_DEPTH: '2' }, { store })
  t.notOk((await gql(url, '{ users { id } }')).body.errors, 'depth 2 of 2 runs')
  calls.length = 0
  const over = await gql(url, '{ messages(roomId: "general") { author { name } } }')
  t.match(over.body, {
    errors: [{ message: 'Query depth 3 exceeds the maximum depth of 2', extensions: { code: 'DEPTH_LIMIT_EXCEEDED' } }]
  })
  t.notOk(over.body.data)
  t.same(calls, [], 'nothing reached the store')

  const viaFragments = `query { ...A }
    fragment A on Query { messages(roomId: "general") { ...B } }
    fragment B on Message { ... on Message { author { name } } }`
  t.match(
    (await gql(url, viaFragments)).body.errors,
    [{ extensions: { code: 'DEPTH_LIMIT_EXCEEDED', depth: 3 } }],
    'named and inline fragments count'
  )

  // The schema's own description has a bounded shape: graphql-js's standard introspection query is
  // deeper than any sensible limit, and introspection tools must work wherever introspection is allowed.
  const introspection = await gql(url, getIntrospectionQuery())
  t.notOk(introspection.body.errors, 'the standard introspection query runs under MAX_DEPTH=2')
  t.ok(introspection.body.data.__schema.types.length > 10)
})

test('cost: budgets by caller class, literals and variables, priced before any resolver runs', async (t) => {
  const { store, calls } = countingStore()
  const { url, token } = await listenTestApp(
    t,
    {
      COST_BUDGET_ANONYMOUS: '300',
      COST_BUDGET_USER: '600',
      COST_BUDGET_ADMIN: '600',
      MAX_PAGE_SIZE: '100',
      MAX_ALIASES: '1000'
    },
    { store }
  )
  const list = 'query ($n: Int) { users(limit: $n) { id name createdAt } }' // costs 3n

  // Anonymous budget 300: 100 users x 3 fields = 300 (at), 99 -> 297 (under).
  t.same((await gql(url, list, { n: 100 })).body.extensions.cost.requested, 300)
  t.notOk((await gql(url, list, { n: 100 })).body.errors, 'at the budget')
  t.notOk((await gql(url, list, { n: 99 })).body.errors, 'under the budget')
  calls.length = 0
  const over = await gql(url, '{ users(limit: 100) { id name createdAt email } }') // 400
  t.match(over.body, {
    errors: [
      {
        message: 'Query cost 400 exceeds the budget of 300 for this caller',
        extensions: { code: 'COST_LIMIT_EXCEEDED', cost: 400, budget: 300 }
      }
    ]
  })
  t.notOk(over.body.data)
  t.same(calls, [], 'no resolver ran')

  // The same query is within a USER's budget.
  const asUser = await gql(url, '{ users(limit: 100) { id name createdAt email } }', undefined, {
    authorization: `Bearer ${token('2')}`
  })
  t.equal(asUser.body.data.users.length, 5)
  t.same(asUser.body.extensions.cost, { requested: 400, budget: 600, remaining: 100000 - 400 })

  // Variables and defaults price the same way as literals.
  t.equal((await gql(url, 'query ($n: Int = 50) { users(limit: $n) { id } }')).body.extensions.cost.requested, 50)
  t.equal((await gql(url, '{ users { id } }')).body.extensions.cost.requested, 20, 'the default limit of 20')
  t.equal(
    (await gql(url, '{ messages(roomId: "general", limit: 10) { content author { name } } }')).body.extensions.cost
      .requested,
    10 * 3
  )

  // Mutations are priced as writes (MUTATION_COST each, 10 by
  // default), capped in number, and a refused mutation writes nothing.
  calls.length = 0
  const admin = { authorization: `Bearer ${token('1', 'ADMIN')}` }
  const creates = (n: number) =>
    Array.from(
      { length: n },
      (_, i) => `m${i}: createUser(input: { name: "x", email: "x${i}@example.com" }) { id }`
    ).join(' ')
  const bomb = await gql(url, `mutation { ${creates(301)} }`, undefined, admin)
  t.match(bomb.body.errors, [
    {
      message: 'The operation holds 301 mutations: at most 10 per operation',
      extensions: { code: 'MUTATION_LIMIT_EXCEEDED' }
    }
  ])
  const viaFragment = await gql(url, `mutation { ...W } fragment W on Mutation { ${creates(11)} }`, undefined, admin)
  t.match(
    viaFragment.body.errors,
    [{ extensions: { code: 'MUTATION_LIMIT_EXCEEDED', mutations: 11 } }],
    'through fragments too'
  )
  t.same(calls, [], 'no resolver ran')
  const one = await gql(
    url,
    'mutation { createUser(input: { name: "Priced", email: "priced@example.com" }) { id name } }',
    undefined,
    admin
  )
  t.equal(one.body.extensions.cost.requested, 10 + 2, 'a write costs 10 plus its selection')
})

test('alias bombs and repeated fields are priced', async (t) => {
  const { store, calls } = countingStore()
  const { url } = await listenTestApp(t, { MAX_ALIASES: '100' }, { store })
  const aliases = Array.from({ length: 60 }, (_, i) => `a${i}: users(limit: 10) { id name }`).join(' ') // 60 x 20 = 1200
  calls.length = 0
  const aliased = await gql(url, `{ ${aliases} }`)
  t.match(aliased.body.errors, [{ extensions: { code: 'COST_LIMIT_EXCEEDED', cost: 1200 } }])
  t.same(calls, [])
  const repeated = await gql(url, `{ ${'users(limit: 10) { id } '.repeat(120)} }`)
  t.match(repeated.body.errors, [{ extensions: { code: 'COST_LIMIT_EXCEEDED', cost: 1200 } }])
  t.same(calls, [])
  const tooRepetitive = await gql(url, `{ ${'user(id: "2") { name } '.repeat(600)} }`)
  t.match(tooRepetitive.body.errors, [{ message: /Validation aborted/, extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } }])
  t.same(calls, [])
})

test('page sizes are capped with a clear error, before execution', async (t) => {
  const { store, calls } = countingStore()
  const { url } = await listenTestApp(t, { MAX_PAGE_SIZE: '100' }, { store })
  calls.length = 0
  for (const [query, variables] of [
    ['{ users(limit: 101) { id } }', undefined],
    ['query ($n: Int) { messages(roomId: "general", limit: $n) { id } }', { n: 1000 }],
    ['{ users(limit: 0) { id } }', undefined]
  ] as const) {
    const { body } = await gql(url, query, variables)
    t.match(
      body.errors,
      [{ message: 'limit must be between 1 and 100', extensions: { code: 'BAD_USER_INPUT' } }],
      query
    )
  }
  t.same(calls, [])
  t.equal((await gql(url, '{ users(limit: 100) { id } }')).body.data.users.length, 5, 'at the cap')
})

test('connections are priced like lists: edges (and their node) times first/last, pageInfo once, fragments too', async (t) => {
  const { store, calls } = countingStore()
  const { url } = await listenTestApp(
    t,
    { COST_BUDGET_ANONYMOUS: '300', MAX_PAGE_SIZE: '100', MAX_ALIASES: '100' },
    { store }
  )
  const cost = async (query: string, variables?: Record<string, unknown>) =>
    (await gql(url, query, variables)).body.extensions.cost.requested
  // 1 (the connection) + 50 x (cursor 1 + node (1 + id, name)) +
  // pageInfo (1 + 2): as users(limit: 50) { id name } prices 50 x 2.
  const page =
    'query ($n: Int) { usersConnection(first: $n) { edges { cursor node { id name } } pageInfo { hasNextPage endCursor } } }'
  t.equal(await cost(page, { n: 50 }), 1 + 50 * 4 + 3, 'a variable first')
  t.equal(
    await cost(
      '{ usersConnection(first: 7) { edges { cursor node { id name } } pageInfo { hasNextPage endCursor } } }'
    ),
    1 + 7 * 4 + 3,
    'a literal first'
  )
  t.equal(await cost(page), 1 + 20 * 4 + 3, 'no first: the default page of 20')
  t.equal(
    await cost('query ($d: Int = 10) { usersConnection(first: $d) { edges { node { id } } } }'),
    1 + 10 * 2,
    'a variable default'
  )
  t.equal(
    await cost('{ messagesConnection(roomId: "general", last: 10) { edges { node { content author { name } } } } }'),
    1 + 10 * (1 + 1 + 2),
    'last prices as first'
  )
  t.equal(
    await cost(
      '{ usersConnection(first: 30) { ...Page } } fragment Page on UserConnection { edges { ...Edge } } fragment Edge on UserEdge { node { id } }'
    ),
    1 + 30 * 2,
    'through fragments'
  )
  t.equal(
    await cost('{ usersConnection(first: 5) { pageInfo { hasNextPage } } }'),
    1 + 2,
    'pageInfo alone is not multiplied'
  )

  calls.length = 0
  const over = await gql(url, '{ usersConnection(first: 100) { edges { node { id name } } } }') // 1 + 100 x 3
  t.match(over.body.errors, [
    {
      message: 'Query cost 301 exceeds the budget of 300 for this caller',
      extensions: { code: 'COST_LIMIT_EXCEEDED', cost: 301 }
    }
  ])
  const aliases = Array.from({ length: 20 }, (_, i) => `p${i}: usersConnection(first: 10) { edges { node { id } } }`).join(' ') // 20 x 21
  t.match(
    (await gql(url, `{ ${aliases} }`)).body.errors,
    [{ extensions: { code: 'COST_LIMIT_EXCEEDED', cost: 420 } }],
    'aliased connections each priced'
  )
  const capped = await gql(
    url,
    'query ($n: Int) { messagesConnection(roomId: "general", last: $n) { edges { node { id } } } }',
    { n: 101 }
  )
  t.match(
    capped.body.errors,
    [{ message: 'last must be between 1 and 100', extensions: { code: 'BAD_USER_INPUT' } }],
    'capped as a page size'
  )
  // Fragments spread many times are analysed once: 2^40 fields per edge are priced in a few steps and refused.
  const chain = fragmentChain(40).replace(
    '{ users(limit: 1) { ...F0 } }',
    '{ usersConnection(first: 2) { edges { node { ...F0 } } } }'
  )
  const bomb = await gql(url, chain)
  t.match(bomb.body.errors, [{ extensions: { code: 'COST_LIMIT_EXCEEDED' } }])
  t.ok(bomb.body.errors[0].extensions.cost > 2 ** 40)
  t.same(calls, [], 'nothing refused reached the store')
})

test('strings over the cap are rejected with "Too long", as literals and as variables, in queries and mutations', async (t) => {
  const { store, calls } = countingStore()
  const { url, token } = await listenTestApp(t, {}, { store })
  const admin = { authorization: `Bearer ${token('1', 'ADMIN')}` }
  const at = 'x'.repeat(1000)
  const over = 'x'.repeat(1001)
  calls.length = 0
  const cases: [string, Record<string, unknown> | undefined][] = [
    [`{ user(id: "${over}") { id } }`, undefined],
    ['query ($id: ID!) { user(id: $id) { id } }', { id: over }],
    [`mutation { postMessage(roomId: "general", content: "${over}") { id } }`, undefined],
    [
      'mutation ($input: CreateUserInput!) { createUser(input: $input) { id } }',
      { input: { name: over, email: 'a@example.com' } }
    ],
    [`query ($id: ID! = "${over}") { user(id: $id) { id } }`, undefined]
  ]
  for (const [query, variables] of cases) {
    const { body } = await gql(url, query, variables, admin)
    t.match(
      body,
      { errors: [{ message: 'Too long', extensions: { code: 'BAD_USER_INPUT', maxLength: 1000 } }] },
      query.slice(0, 40)
    )
    t.notOk(body.data)
  }
  t.same(calls, [], 'nothing ran')
  const posted = await gql(
    url,
    'mutation ($c: String!) { postMessage(roomId: "general", content: $c) { content } }',
    { c: at },
    admin
  )
  t.equal(posted.body.data.postMessage.content.length, 1000, 'exactly at the cap is accepted')
})

test('list arguments are capped and priced by their length', async (t) => {
  const { url } = await listenTestApp(t, { MAX_LIST_LENGTH: '50' })
  const ids = (n: number) => Array.from({ length: n }, (_, i) => String(i + 1))
  const ok = await gql(url, 'query ($ids: [ID!]!) { usersByIds(ids: $ids) { name } }', { ids: ids(50) })
  t.equal(ok.body.data.usersByIds.length, 50)
  t.equal(ok.body.data.usersByIds[1].name, 'Ada Lovelace')
  t.equal(ok.body.data.usersByIds[10], null)
  t.equal(ok.body.extensions.cost.requested, 50)
  const variable = await gql(url, 'query ($ids: [ID!]!) { usersByIds(ids: $ids) { name } }', { ids: ids(51) })
  t.match(variable.body.errors, [{ message: /Too many entries in variables\.ids: at most 50/, extensions: { code: 'BAD_USER_INPUT' } }])
  const literal = await gql(url, `{ usersByIds(ids: ${JSON.stringify(ids(51))}) { name } }`)
  t.match(literal.body.errors, [{ message: /Too many entries/, extensions: { code: 'BAD_USER_INPUT' } }])
})

test('execution timeout: "Query timeout" with code TIMEOUT, prompt answer, no write after the deadline', async (t) => {
  const { url, store, token } = await listenTestApp(t, { QUERY_TIMEOUT_MS: '200' })
  const listUsers = store.listUsers.bind(store)
  store.listUsers = async (limit) => {
    await new Promise((resolve) => setTimeout(resolve, 1000))
    return listUsers(limit)
  }
  const started = Date.now()
  const { status, body } = await gql(url, '{ users { id } }')
  const elapsed = Date.now() - started
  t.equal(status, 200)
  t.same(body.errors, [{ message: 'Query timeout', code: 'TIMEOUT', extensions: { code: 'TIMEOUT' } }])
  t.equal(body.data, null)
  t.ok(elapsed < 800, `answered promptly (${elapsed} ms)`)

  // A serial mutation: the first write is slow and passes the deadline; the second must not write.
  const createUser = store.createUser.bind(store)
  store.createUser = async (user) => {
    await new Promise((resolve) => setTimeout(resolve, 300))
    return createUser(user)
  }
  const before = await store.countUsers()
  const mutation = await gql(url, `mutation {
    a: createUser(input: { name: "First", email: "first@example.com" }) { id }
    b: createUser(input: { name: "Second", email: "second@example.com" }) { id }
  }`, undefined, { authorization: `Bearer ${token('1', 'ADMIN')}` })
  t.match(mutation.body.errors, [{ message: 'Query timeout', code: 'TIMEOUT' }])
  await new Promise((resolve) => setTimeout(resolve, 700))
  t.equal(
    await store.countUsers(),
    before + 1,
    'the write started before the deadline finished; the next one never ran'
  )
  t.same((await store.listUsers(100)).filter((u) => u.name === 'Second'), [])
})

test('after the deadline no resolver reads anything more: a slow page of messages leaves its authors unread', async (t) => {
  const { url, store } = await listenTestApp(t, { QUERY_TIMEOUT_MS: '100' })
  const messagesByRoom = store.messagesByRoom.bind(store)
  store.messagesByRoom = async (roomId, limit) => {
    await new Promise((resolve) => setTimeout(resolve, 300))
    return messagesByRoom(roomId, limit)
  }
  let authorReads = 0
  const usersByIds = store.usersByIds.bind(store)
  store.usersByIds = async (ids) => { authorReads++; return usersByIds(ids) }
  const { body } = await gql(url, '{ messages(roomId: "general", limit: 5) { content author { name } } }')
  t.match(body.errors, [{ message: 'Query timeout', code: 'TIMEOUT' }])
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.equal(authorReads, 0, 'Message.author checked the deadline before loading')
})

test('request rate limit: per IP when anonymous, per user when authenticated, 429 with Retry-After', async (t) => {
  const { url, token } = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '3' })
  const remaining: (string | null)[] = []
  for (let i = 0; i < 3; i++) {
    const ok = await gql(url, '{ users(limit: 1) { id } }')
    t.equal(ok.status, 200)
    t.equal(ok.headers.get('x-ratelimit-limit'), '3')
    t.ok(
      Number(ok.headers.get('x-ratelimit-reset')) > 0 && Number(ok.headers.get('x-ratelimit-reset')) <= 60,
      'X-RateLimit-Reset in seconds'
    )
    remaining.push(ok.headers.get('x-ratelimit-remaining'))
  }
  t.same(remaining, ['2', '1', '0'], 'X-RateLimit-Remaining counts down')
  const limited = await gql(url, '{ users(limit: 1) { id } }')
  t.equal(limited.status, 429)
  t.match(limited.body, { errors: [{ message: /Rate limit exceeded: at most 3 requests per 60 s/, extensions: { code: 'RATE_LIMITED' } }] })
  t.ok(Number(limited.headers.get('retry-after')) > 0, 'Retry-After')
  t.equal(limited.headers.get('x-ratelimit-limit'), '3')
  t.equal(limited.headers.get('x-ratelimit-remaining'), '0')
  // A logged-in user has a budget of their own.
  t.equal(
    (await gql(url, '{ users(limit: 1) { id } }', undefined, { authorization: `Bearer ${token('2')}` })).status,
    200
  )
  // Health probes are never limited.
  t.equal((await fetch(`${url}/health/live`)).status, 200)
})

test('cost-unit rate limit: whichever budget is exhausted first blocks', async (t) => {
  const { url } = await listenTestApp(t, { RATE_LIMIT_COST: '150', RATE_LIMIT_REQUESTS: '100' })
  const query = '{ users(limit: 20) { id name } }' // 40 units
  const remaining: number[] = []
  for (let i = 0; i < 3; i++) remaining.push((await gql(url, query)).body.extensions.cost.remaining)
  t.same(remaining, [110, 70, 30])
  const blocked = await gql(url, query)
  t.equal(blocked.status, 429)
  t.match(blocked.body.errors, [{ message: /Cost rate limit exceeded: at most 150 cost units per 60 s/, extensions: { code: 'RATE_LIMITED' } }])
  t.ok(Number(blocked.headers.get('retry-after')) > 0)
  t.notOk(blocked.body.data)
})

test('X-Forwarded-For is believed only from a trusted proxy', async (t) => {
  const trusted = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '2', TRUST_PROXY: '127.0.0.1' })
  const from = (ip: string) => ({ 'x-forwarded-for': ip })
  for (let i = 0; i < 2; i++) { t.equal((await gql(trusted.url, '{ users(limit: 1) { id } }', undefined, from('203.0.113.1'))).status, 200) }
  t.equal(
    (await gql(trusted.url, '{ users(limit: 1) { id } }', undefined, from('203.0.113.1'))).status,
    429,
    'the forwarded client is limited'
  )
  t.equal(
    (await gql(trusted.url, '{ users(limit: 1) { id } }', undefined, from('203.0.113.2'))).status,
    200,
    'another forwarded client has its own budget'
  )

  const untrusted = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '2' })
  for (let i = 0; i < 2; i++) { t.equal((await gql(untrusted.url, '{ users(limit: 1) { id } }', undefined, from(`198.51.100.${i}`))).status, 200) }
  t.equal(
    (await gql(untrusted.url, '{ users(limit: 1) { id } }', undefined, from('198.51.100.9'))).status,
    429,
    'a spoofed header does not buy a new budget'
  )
})

test('two instances share request and cost counters through Redis', async (t) => {
  const prefix = `test:limits:${process.pid}:${Date.now()}:`
  const env = { REDIS_URL: 'redis://127.0.0.1:6379', REDIS_PREFIX: prefix, RATE_LIMIT_REQUESTS: '4', RATE_LIMIT_COST: '100000' }
  const a = await listenTestApp(t, env)
  const b = await listenTestApp(t, env)
  const statuses: number[] = []
  for (const url of [a.url, b.url, a.url, b.url, a.url]) { statuses.push((await gql(url, '{ users(limit: 1) { id } }')).status) }
  t.same(statuses, [200, 200, 200, 200, 429])

  const costEnv = { ...env, REDIS_PREFIX: `${prefix}cost:`, RATE_LIMIT_REQUESTS: '100', RATE_LIMIT_COST: '100' }
  const c = await listenTestApp(t, costEnv)
  const d = await listenTestApp(t, costEnv)
  t.equal((await gql(c.url, '{ users(limit: 30) { id } }')).body.extensions.cost.remaining, 70)
  t.equal(
    (await gql(d.url, '{ users(limit: 30) { id } }')).body.extensions.cost.remaining,
    40,
    'the other instance saw the first spend'
  )
  t.equal((await gql(c.url, '{ users(limit: 30) { id } }')).body.extensions.cost.remaining, 10)
  t.equal((await gql(d.url, '{ users(limit: 30) { id } }')).status, 429)
})

test('hostile documents get clear answers and the service keeps serving', async (t) => {
  const { url } = await listenTestApp(t)
  const hostile: Record<string, string> = {
    'fragments spreading the next twice': fragmentChain(30),
    wide: `{ ${Array.from({ length: 2000 }, (_, i) => `f${i}: __typename`).join(' ')} users(limit: 100) { ${'id '.repeat(500)} } }`,
    aliased: `{ ${Array.from({ length: 1000 }, (_, i) => `u${i}: users(limit: 100) { id }`).join(' ')} }`,
    'fragment cycle': 'query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }',
    'self-referencing fragment': 'query { users { ...U } } fragment U on User { id ...U }',
    'long string': `{ user(id: "${'x'.repeat(200_000)}") { id } }`,
    unterminated: '{ users { id '.repeat(1000)
  }
  for (const [name, query] of Object.entries(hostile)) {
    const { status, body } = await gql(url, query)
    t.ok(status === 200 || status === 413, `${name}: answered (${status})`)
    t.ok(
      Array.isArray(body.errors) &&
        body.errors.length > 0 &&
        body.errors.every((e: { extensions?: { code?: string } }) => typeof e.extensions?.code === 'string'),
      `${name}: clear errors with codes`
    )
  }
  const { body } = await gql(url, '{ users(limit: 1) { name } }')
  t.same(body.data, { users: [{ name: 'Admin' }] }, 'still serving')
})

test('aliases, directives and validation errors are capped per operation, before validation or execution (graphql-armor style)', async (t) => {
  const { store, calls } = countingStore()
  const { url } = await listenTestApp(t, { COST_BUDGET_ANONYMOUS: '100000', RATE_LIMIT_REQUESTS: '1000' }, { store })
  const aliases = (n: number, prefix = 'a') =>
    Array.from({ length: n }, (_, i) => `${prefix}${i}: __typename`).join(' ')
  calls.length = 0

  // graphql-cop's alias overloading: 101 aliases of one field.
  const overloaded = await gql(url, `{ ${aliases(101)} users(limit: 1) { id } }`)
  t.match(overloaded.body, {
    errors: [
      {
        message: 'The operation holds 101 aliases: at most 15 per operation',
        extensions: { code: 'ALIAS_LIMIT_EXCEEDED', aliases: 101, maxAliases: 15 }
      }
    ]
  })
  t.notOk(overloaded.body.data)
  t.same(calls, [], 'nothing ran')
  t.notOk((await gql(url, `{ ${aliases(15)} }`)).body.errors, '15 aliases (the default cap) pass')
  const viaFragments = await gql(
    url,
    `{ ...A ...B } fragment A on Query { ${aliases(8, 'a')} } fragment B on Query { ${aliases(8, 'b')} }`
  )
  t.match(
    viaFragments.body.errors,
    [{ extensions: { code: 'ALIAS_LIMIT_EXCEEDED', aliases: 16 } }],
    'counted through fragments'
  )
  // A chain of 40 fragments each spreading the next twice holds 2^40 aliases: counted in 40 steps (each fragment once).
  const chain = Array.from(
    { length: 40 },
    (_, i) => `fragment F${i} on User { x${i}: id ...F${i + 1} ...F${i + 1} }`
  ).join(' ')
  t.match((await gql(url, `{ users(limit: 1) { ...F0 } } ${chain} fragment F40 on User { id }`)).body.errors,
    [{ extensions: { code: 'ALIAS_LIMIT_EXCEEDED' } }], 'fragments spread 2^40 times: refused on the count, not walked')

  // graphql-cop's directive overloading: ten directives on one field.
  const directives = await gql(url, `query cop { __typename ${'@aa'.repeat(10)} }`)
  t.match(directives.body, {
    errors: [
      {
        message: 'A field holds 10 directives: at most 4 per field',
        extensions: { code: 'DIRECTIVE_LIMIT_EXCEEDED', maxDirectivesPerField: 4 }
      }
    ]
  })
  t.equal(directives.body.errors.length, 1, 'one error, not one per directive')
  const perOperation = await gql(url, `{ users(limit: 1) { ${'id @include(if: true) '.repeat(51)} } }`)
  t.match(perOperation.body.errors, [
    {
      message: 'The operation holds 51 directives: at most 50 per operation',
      extensions: { code: 'DIRECTIVE_LIMIT_EXCEEDED', maxDirectives: 50 }
    }
  ])
  t.notOk(
    (await gql(url, '{ users(limit: 1) { id @include(if: true) @skip(if: false) } }')).body.errors,
    'ordinary directives pass'
  )
  t.same(calls.filter((c) => c.method !== 'listUsers'), [], 'refused documents ran nothing')
})

test('validation answers one error per kind of mistake, at most MAX_VALIDATION_ERRORS', async (t) => {
  const { url } = await listenTestApp(t, { MAX_DIRECTIVES_PER_FIELD: '100', NODE_ENV: 'development' })
  // Without the per-field cap, graphql-cop's ten unknown directives:
  // one error for the unknown directive, one for the repeats.
  const repeated = await gql(url, `query cop { __typename ${'@aa'.repeat(10)} }`)
  t.ok(
    repeated.body.errors.length > 0 && repeated.body.errors.length < 10,
    `${repeated.body.errors.length} errors, not 10`
  )
  t.equal(
    new Set(repeated.body.errors.map((e: { message: string }) => e.message)).size,
    repeated.body.errors.length,
    'no error repeated'
  )
  const sameMistake = await gql(url, `{ ${Array.from({ length: 50 }, (_, i) => `nope${i}`).join(' ')} }`)
  t.equal(sameMistake.body.errors.length, 1, '50 unknown fields: one error')
  t.match(sameMistake.body.errors, [{ message: /Cannot query field "nope0"/, extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } }])

  const { url: capped } = await listenTestApp(t, { MAX_VALIDATION_ERRORS: '2' })
  const many = await gql(capped, 'query ($v: Nope) { nope users(nope: 1) { id @nope } ...Missing }')
  t.ok(
    many.body.errors.length <= 3,
    `at most 2 errors and the note that validation stopped (${many.body.errors.length})`
  )
  t.match(many.body.errors.at(-1), { message: /Too many validation errors/, extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } })
})
