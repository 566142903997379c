// What the benchmark measures: the baselines (`limit`, `rest-*`) and the service's scenarios, each a
// request generator (bodies vary where real traffic varies: ids rotate over the seeded users), a full
// check of sampled responses, and a cheap check of every response (so a fast error never counts as
// throughput).

export type Shape = 'list' | 'user' | 'messages' | 'create'
/**
 * Where a row's server keeps its data: the embedded default (node:sqlite, in-process counters and
 * cache), PostgreSQL alone (the plain routes), or the deployed topology (PostgreSQL and Redis, as
 * docker-compose.yml runs the service).
 */
export type StoreKind = 'sqlite' | 'postgres' | 'deployed'

export interface BenchData {
  /** Seeded users (rotated over), with a USER token for each. */
  users: { id: string; token: string }[]
  adminToken: string
  rooms: string[]
  /** Distinguishes this run's created users (e-mails are unique). */
  runId: string
  /** The users-list scenario's response bytes, which the `limit` route serves. */
  listBody?: string
  /** queryId of a persisted `user(id)` operation, when the persisted-query transport exists. */
  persistedUserQueryId?: string
  /** Why persisted-get is skipped, when it is. */
  persistedUnavailable?: string
  /** Signed cursors at positions spread over the users (the page-50 scenario starts after each in turn). */
  pageCursors?: string[]
  /**
   * What the service charged (cost units) for a user-by-id and a users-list request in the probe: the guarded
   * rows spend the same.
   */
  costs?: { user: number; list: number }
  /**
   * A partner login for the SOAP scenarios, when the SOAP transport exists, and the v1 contract's namespace
   * when it is not the one the benchmark starts its services with (a deployment under --target: its WSDL's).
   */
  soap?: { path: string; login: string; password: string; namespace?: string }
  /** The same partner's key and certificate (PEM) for the signed SOAP row; absent without openssl. */
  soapSigner?: { key: string; cert: string }
}

export interface RequestSpec {
  method: 'GET' | 'POST'
  path: string
  headers: Record<string, string>
  body?: string
}

export interface Sample {
  status: number
  contentType: string
  body: string
  /** Response headers (lowercase names), where the caller kept them: the cached rows' checks read `age`. */
  headers?: Record<string, string>
}

/** Whether an answer came from a response cache (null: the request was not a cached read, e.g. a write). */
export type CacheOutcome = 'hit' | 'miss' | null

export interface HttpScenario {
  name: string
  target: 'service' | 'baseline'
  store: StoreKind
  shape: Shape | 'limit'
  description: string
  /** The next request; called once per request sent, so ids, tokens and e-mails rotate. */
  next(): RequestSpec
  /**
   * Called before each round (the warm-up's included), outside the measured time: a row whose requests
   * are dear to make (signed SOAP) makes them here, so the load generator keeps up during the round.
   */
  beforeRound?(): void
  /** Full check of one response to `request`: null when correct, otherwise what is wrong. */
  verify(request: RequestSpec, response: Sample): string | null
  /** Checked on every response during the measured rounds. */
  quickCheck(body: string): boolean
  /** Extra environment for the service process. */
  env?: Record<string, string>
  /** The server to start for a `service` row when it is not the service itself (the peers: bench/peer-server.ts). */
  script?: string
  /** Null when the transport answers as expected; otherwise why the scenario is skipped. */
  unavailable?(): string | null
  /**
   * A guarded baseline (bench/guarded-server.ts): the rest route's work behind the service's per-request
   * protections.
   */
  guardedRow?: true
  /** A plain route (bench/baseline-server.ts) in a process of its own, on another store than its group's. */
  baselineRow?: true
  /**
   * The guarded row this scenario is also compared with (the same transport shape: GET, POST with a token,
   * anonymous POST).
   */
  guarded?: string
  /**
   * A row that reads through a response cache: tells a hit from a miss by the answer's headers (names as
   * the server sent them) or body. The runner counts both over the measured rounds (the row's hit ratio),
   * and sends each sampled request twice, checking the second answer (the first may be the miss that
   * fills the entry), so `verify` can demand a hit.
   */
  cacheOutcome?(headers: Record<string, string>, body: string): CacheOutcome
}

export const USERS_LIST_QUERY = '{ users { id name createdAt } }'
export const USER_BY_ID_QUERY = 'query UserById($id: ID!) { user(id: $id) { id name email } }'
export const MESSAGES_QUERY =
  'query RoomMessages($roomId: String!) { messages(roomId: $roomId, limit: 50) { content author { name } } }'
export const USERS_PAGE_QUERY =
  'query UsersPage($after: String) { usersConnection(first: 50, after: $after) { edges { node { id name createdAt } } pageInfo { hasNextPage endCursor } } }'
export const CREATE_USER_MUTATION =
  'mutation CreateUser($input: CreateUserInput!) { createUser(input: $input) { id name email createdAt } }'
export const RENAME_USER_MUTATION =
  'mutation RenameUser($id: ID!, $input: UpdateUserInput!) { updateUser(id: $id, input: $input) { id name } }'

/**
 * The cached rows' entry lifetime, for the service (RESPONSE_CACHE_TTL_MS) and the peers' caches alike
 * (bench/peer-server.ts reads the same setting). Longer than a group runs (warm-ups of up to 30 s a row,
 * then the rounds), so a row measures hits, not expiry: with the default 60 s, a slow machine that takes
 * longer than a minute to come round the 10000 users again measured 63-79% hits, so the mix of hits and
 * executions, and every ratio, depended on the machine's speed.
 */
export const CACHED_ROWS_TTL_MS = 30 * 60_000

// A new object per request: autocannon writes Content-Length into the headers it is given.
const jsonHeaders = (): Record<string, string> => ({ 'content-type': 'application/json' })

/** Every JSON response of a scenario must carry data and no error entry. */
const jsonOk = (body: string): boolean => body.startsWith('{"data":') && !body.includes('"errors"')

function parse (response: Sample): { data?: any; errors?: unknown[] } | string {
  if (response.status !== 200) return `HTTP ${response.status}: ${response.body.slice(0, 300)}`
  if (!response.contentType.startsWith('application/json')) return `content-type ${response.contentType}`
  try {
    const body = JSON.parse(response.body)
    if (body.errors) return `errors: ${JSON.stringify(body.errors).slice(0, 300)}`
    if (!body.data) return `no data: ${response.body.slice(0, 300)}`
    return body
  } catch {
    return `not JSON: ${response.body.slice(0, 300)}`
  }
}

function exactKeys (value: unknown, keys: string[]): boolean {
  return typeof value === 'object' && value !== null && Object.keys(value).sort().join() === [...keys].sort().join()
}

const verifyShape: Record<Shape, (request: RequestSpec, data: any) => string | null> = {
  list (_request, data) {
    const users = data.users
    if (!Array.isArray(users) || users.length !== 20) {
      return `expected 20 users, got ${JSON.stringify(users)?.slice(0, 200)}`
    }
    return users.every((u) => exactKeys(u, ['id', 'name', 'createdAt']) && typeof u.name === 'string')
      ? null
      : 'users lack id, name or createdAt'
  },
  user (request, data) {
    const id = requestedUserId(request)
    const user = data.user
    if (!exactKeys(user, ['id', 'name', 'email'])) return `expected { id name email }, got ${JSON.stringify(user)}`
    if (user.id !== id) return `asked for user ${id}, got ${user.id}`
    return typeof user.email === 'string' && user.email.includes('@')
      ? null
      : `email not visible to the user themself: ${user.email}`
  },
  messages (_request, data) {
    const messages = data.messages
    if (!Array.isArray(messages) || messages.length !== 50) {
      return `expected 50 messages, got ${Array.isArray(messages) ? messages.length : typeof messages}`
    }
    return messages.every((m) => typeof m.content === 'string' && typeof m.author?.name === 'string')
      ? null
      : 'a message lacks content or author.name'
  },
  create (request, data) {
    const email = requestedEmail(request)
    const created = data.createUser
    if (!exactKeys(created, ['id', 'name', 'email', 'createdAt'])) {
      return `expected { id name email createdAt }, got ${JSON.stringify(created)}`
    }
    return created.email === email ? null : `created ${created.email}, asked for ${email}`
  }
}

function requestedUserId (request: RequestSpec): string {
  if (request.path.startsWith('/rest/users/')) return decodeURIComponent(request.path.slice('/rest/users/'.length))
  if (request.path.startsWith('/guarded/users/')) { return decodeURIComponent(request.path.slice('/guarded/users/'.length)) }
  if (request.method === 'GET') {
    return JSON.parse(new URL(request.path, 'http://x').searchParams.get('variables') ?? '{}').id
  }
  return JSON.parse(request.body!).variables.id
}

function requestedEmail (request: RequestSpec): string {
  const body = JSON.parse(request.body!)
  return body.email ?? body.variables.input.email
}

/** A round-robin over `items`, shared by all connections of a round. */
function rotate<T> (items: readonly T[]): () => T {
  let i = 0
  return () => items[i++ % items.length]!
}

function checked (shape: Shape) {
  return (request: RequestSpec, response: Sample): string | null => {
    const body = parse(response)
    return typeof body === 'string' ? body : verifyShape[shape](request, body.data)
  }
}

function gqlPost (query: string, variables: Record<string, unknown> | undefined, token?: string): RequestSpec {
  return {
    method: 'POST',
    path: '/graphql',
    headers: token ? { ...jsonHeaders(), authorization: `Bearer ${token}` } : jsonHeaders(),
    body: JSON.stringify(variables ? { query, variables } : { query })
  }
}

/** persisted-get's request: the persisted UserById query by GET for `user`, with that user's token. */
function persistedUserGet (data: BenchData, user: { id: string; token: string }): RequestSpec {
  const query = new URLSearchParams({
    queryId: data.persistedUserQueryId ?? 'sha256:unavailable',
    variables: JSON.stringify({ id: user.id })
  })
  // apollo-require-preflight, as Apollo's clients send it (not required: see routes/graphql/http-exchange.ts).
  return {
    method: 'GET',
    path: `/graphql?${query}`,
    headers: { authorization: `Bearer ${user.token}`, 'apollo-require-preflight': 'true' }
  }
}

function verifyPersistedUser (request: RequestSpec, response: Sample): string | null {
  const body = parse(response)
  if (typeof body === 'string') return body
  const id = requestedUserId(request)
  return body.data.user?.id === id && typeof body.data.user.name === 'string'
    ? null
    : `asked for user ${id}, got ${JSON.stringify(body.data.user)}`
}

/** The `age` header, whatever case the server wrote it in. */
const ageOf = (headers: Record<string, string>): string | undefined => headers.age ?? headers.Age

/** The service answers a hit of its response cache with `Age` (whole seconds); an executed answer has none. */
function serviceHit (response: Sample): string | null {
  const age = response.headers?.age
  return age !== undefined && /^\d+$/.test(age) ? null : `not a cache hit (Age: ${age ?? 'absent'})`
}

/** Unique name and e-mail for each created user of this run (one counter for every round: they share the store). */
let createdUsers = 0
function newUserInput (data: BenchData) {
  const n = ++createdUsers
  return { name: `Bench User ${n}`, email: `bench.${data.runId}.${n}@example.com` }
}

/**
 * The plain routes reading PostgreSQL (each in a process of its own, beside its group's embedded rows):
 * what a store read costs on PostgreSQL, before any of the service's own work.
 */
export function postgresBaselines (data: BenchData): HttpScenario[] {
  const user = rotate(data.users)
  const common = {
    target: 'service' as const,
    script: 'bench/baseline-server.ts',
    baselineRow: true as const,
    store: 'postgres' as const,
    quickCheck: jsonOk
  }
  return [
    {
      ...common,
      name: 'rest-list-postgres',
      shape: 'list',
      description: 'plain route on PostgreSQL: store.listUsers(20) → JSON',
      next: () => ({ method: 'GET', path: '/rest/users?limit=20', headers: {} }),
      verify: checked('list')
    },
    {
      ...common,
      name: 'rest-user-postgres',
      shape: 'user',
      description: 'plain route on PostgreSQL: store.usersByIds([id]) → JSON',
      next: () => ({ method: 'GET', path: `/rest/users/${encodeURIComponent(user().id)}`, headers: {} }),
      verify: checked('user')
    }
  ]
}

export function baselineScenarios (data: BenchData): HttpScenario[] {
  const store = 'sqlite'
  const list: HttpScenario = {
    name: 'rest-list',
    target: 'baseline',
    store,
    shape: 'list',
    description: 'plain route: store.listUsers(20) → JSON',
    next: () => ({ method: 'GET', path: '/rest/users?limit=20', headers: {} }),
    verify: checked('list'),
    quickCheck: jsonOk
  }
  const user = rotate(data.users)
  const room = rotate(data.rooms)
  return [
    {
      name: 'limit',
      target: 'baseline',
      store,
      shape: 'limit',
      description: 'plain route: prebuilt bytes of the users-list response',
      next: () => ({ method: 'GET', path: '/limit', headers: {} }),
      verify: (_request, response) => {
        if (response.status !== 200) return `HTTP ${response.status}`
        return response.body === data.listBody ? null : 'body differs from the users-list response'
      },
      quickCheck: jsonOk
    },
    list,
    {
      name: 'rest-user',
      target: 'baseline',
      store,
      shape: 'user',
      description: 'plain route: store.usersByIds([id]) → JSON',
      next: () => ({ method: 'GET', path: `/rest/users/${encodeURIComponent(user().id)}`, headers: {} }),
      verify: checked('user'),
      quickCheck: jsonOk
    },
    {
      name: 'rest-messages',
      target: 'baseline',
      store,
      shape: 'messages',
      description: 'plain route: store.messagesByRoom(room, 50) + usersByIds(authors) → JSON',
      next: () => ({ method: 'GET', path: `/rest/rooms/${room()}/messages?limit=50`, headers: {} }),
      verify: checked('messages'),
      quickCheck: jsonOk
    },
    {
      name: 'rest-create',
      target: 'baseline',
      store,
      shape: 'create',
      description: 'plain route: store.createUser → JSON',
      next: () => ({
        method: 'POST',
        path: '/rest/users',
        headers: jsonHeaders(),
        body: JSON.stringify(newUserInput(data))
      }),
      verify: checked('create'),
      quickCheck: jsonOk
    }
  ]
}

export function serviceScenarios (data: BenchData): HttpScenario[] {
  const store = 'sqlite'
  const usersList: HttpScenario = {
    name: 'users-list',
    target: 'service',
    store,
    shape: 'list',
    description: `POST ${USERS_LIST_QUERY}, anonymous`,
    guarded: 'guarded-list',
    next: () => gqlPost(USERS_LIST_QUERY, undefined),
    verify: checked('list'),
    quickCheck: jsonOk
  }

  const user = rotate(data.users)
  const persistedUser = rotate(data.users)
  const cachedUser = rotate(data.users)
  const mixedReader = rotate(data.users)
  const mixedWriter = rotate(data.users)
  let mixedRequests = 0
  const persistedUnavailable = () =>
    data.persistedUserQueryId
      ? null
      : (data.persistedUnavailable ?? 'transport not available yet (no persisted user(id) operation in the registry)')
  const room = rotate(data.rooms)
  const cursor = rotate(data.pageCursors ?? [''])
  return [
    usersList,
    {
      name: 'users-page-50',
      target: 'service',
      store,
      shape: 'list',
      description:
        'POST usersConnection(first: 50, after: $cursor) { edges { node { id name createdAt } } pageInfo }, anonymous, cursors spread over all users (keyset: the same cost wherever the page starts)',
      guarded: 'guarded-list',
      next: () => gqlPost(USERS_PAGE_QUERY, { after: cursor() }),
      verify: (_request, response) => {
        const body = parse(response)
        if (typeof body === 'string') return body
        const edges = body.data.usersConnection?.edges
        return Array.isArray(edges) &&
          edges.length === 50 &&
          edges.every((e: any) => exactKeys(e.node, ['id', 'name', 'createdAt']))
          ? null
          : `expected 50 edges, got ${JSON.stringify(edges)?.slice(0, 200)}`
      },
      quickCheck: jsonOk,
      unavailable: () => (data.pageCursors?.length ? null : 'no cursors (the probe could not page through users)')
    },
    {
      name: 'user-by-id',
      target: 'service',
      store,
      shape: 'user',
      description: 'POST user(id: $id) { id name email } with a USER token for that user',
      guarded: 'guarded-user',
      next: () => {
        const { id, token } = user()
        return gqlPost(USER_BY_ID_QUERY, { id }, token)
      },
      verify: checked('user'),
      quickCheck: jsonOk
    },
    {
      name: 'persisted-get',
      target: 'service',
      store,
      shape: 'user',
      description:
        'GET /graphql?queryId=…&variables={"id":…} (the persisted UserById query) with a USER token, as a mobile app sends it',
      guarded: 'guarded-user-get',
      next: () => persistedUserGet(data, persistedUser()),
      verify: verifyPersistedUser,
      quickCheck: jsonOk,
      unavailable: persistedUnavailable
    },
    {
      name: 'cached-persisted-get',
      target: 'service',
      store,
      shape: 'user',
      description:
        "persisted-get's requests (the same rotation over the seeded users, the same checks) with RESPONSE_CACHE=true: after the warm-up, hits of the shared response cache (each sampled answer must carry Age)",
      guarded: 'guarded-user-get',
      env: { RESPONSE_CACHE: 'true', RESPONSE_CACHE_TTL_MS: String(CACHED_ROWS_TTL_MS) },
      next: () => persistedUserGet(data, cachedUser()),
      verify: (request, response) => verifyPersistedUser(request, response) ?? serviceHit(response),
      quickCheck: jsonOk,
      cacheOutcome: (headers) => (ageOf(headers) === undefined ? 'miss' : 'hit'),
      unavailable: persistedUnavailable
    },
    {
      name: 'cached-mixed',
      target: 'service',
      store,
      shape: 'user',
      description:
        "95% persisted-get's reads, 5% writes (every 20th request: POST updateUser(id, { name }) of one of the same users, with that user's own USER token), RESPONSE_CACHE=true: each write invalidates that user's answer",
      guarded: 'guarded-user-get',
      env: { RESPONSE_CACHE: 'true', RESPONSE_CACHE_TTL_MS: String(CACHED_ROWS_TTL_MS) },
      next: () => {
        if (++mixedRequests % 20 !== 0) return persistedUserGet(data, mixedReader())
        const { id, token } = mixedWriter()
        return gqlPost(RENAME_USER_MUTATION, { id, input: { name: `Bench Renamed ${data.runId} ${mixedRequests}` } }, token)
      },
      verify: (request, response) => {
        if (request.method === 'GET') return verifyPersistedUser(request, response) ?? serviceHit(response)
        const body = parse(response)
        if (typeof body === 'string') return body
        const { id, input } = JSON.parse(request.body!).variables
        const updated = body.data.updateUser
        return updated?.id === id && updated.name === input.name
          ? null
          : `renamed user ${id} to ${input.name}, got ${JSON.stringify(updated)}`
      },
      quickCheck: jsonOk,
      // The writes' answers are not cached reads.
      cacheOutcome: (headers, body) =>
        body.startsWith('{"data":{"updateUser"') ? null : ageOf(headers) === undefined ? 'miss' : 'hit',
      unavailable: persistedUnavailable
    },
    {
      name: 'messages-authors',
      target: 'service',
      store,
      shape: 'messages',
      description: 'POST messages(roomId, limit: 50) { content author { name } }, anonymous (loader batching)',
      next: () => gqlPost(MESSAGES_QUERY, { roomId: room() }),
      verify: checked('messages'),
      quickCheck: jsonOk
    },
    {
      name: 'create-user',
      target: 'service',
      store,
      shape: 'create',
      description: 'POST createUser(input) { id name email createdAt } as ADMIN (writes)',
      next: () => gqlPost(CREATE_USER_MUTATION, { input: newUserInput(data) }, data.adminToken),
      verify: checked('create'),
      quickCheck: jsonOk
    }
  ]
}

/**
 * What users would pick instead: Apollo Server 5 and graphql-yoga 5 (bench/peer-server.ts) answering
 * the same two requests as users-list and user-by-id from the same store, in the same groups, so their
 * ratios to `rest` (and so to the service) come from the same run; and the user-by-id read again by GET
 * to each peer with its own response cache on (`cached`), beside cached-persisted-get.
 */
export function peerScenarios (data: BenchData): Record<'list' | 'user' | 'cached', HttpScenario[]> {
  return peerRows(data)
}

/**
 * The peers' cached rows on the deployed topology: each cache on Redis (`PEER=<peer>-redis-cached`,
 * bench/peer-server.ts), reading PostgreSQL, beside cached-persisted-get-deployed.
 */
export function peerRedisCachedScenarios (data: BenchData, redisPrefix: string): HttpScenario[] {
  return peerRows(data).cached.map((row) => {
    const twin = deployedTwin(row, redisPrefix)
    return {
      ...twin,
      description: twin.description.replace('its own response cache (', 'its own response cache on Redis ('),
      env: { ...twin.env, PEER: `${row.env!.PEER!.replace(/-cached$/, '')}-redis-cached` }
    }
  })
}

function peerRows (data: BenchData): Record<'list' | 'user' | 'cached', HttpScenario[]> {
  const peers = [
    ['apollo', 'Apollo Server 5'],
    ['yoga', 'graphql-yoga 5']
  ] as const
  const user = rotate(data.users)
  const cachedUser = rotate(data.users)
  const common = {
    target: 'service' as const,
    script: 'bench/peer-server.ts',
    store: 'sqlite' as const,
    quickCheck: jsonOk
  }
  const row = (peer: string, shape: 'list' | 'user', description: string, next: () => RequestSpec): HttpScenario => ({
    ...common,
    name: `${peer}-${shape === 'list' ? 'users-list' : 'user-by-id'}`,
    env: { PEER: peer },
    shape,
    description,
    guarded: shape === 'list' ? 'guarded-list' : 'guarded-user',
    next,
    verify: checked(shape)
  })
  // How each peer tells that an answer came from its cache: Apollo's plugin sets `age` on a hit; Yoga's,
  // with includeExtensionMetadata, answers extensions.responseCache.hit.
  type PeerCache = { how: string; outcome: (headers: Record<string, string>, body: string) => CacheOutcome }
  const caches: Record<(typeof peers)[number][0], PeerCache> = {
    apollo: {
      how: 'responseCachePlugin() with ApolloServerPluginCacheControl({ defaultMaxAge: ttl }); a hit carries `age`',
      outcome: (headers) => (ageOf(headers) === undefined ? 'miss' : 'hit')
    },
    yoga: {
      how: 'useResponseCache({ session: () => null, ttl, includeExtensionMetadata }) in memory; a hit answers extensions.responseCache.hit',
      outcome: (_headers, body) => (body.includes('"responseCache":{"hit":true') ? 'hit' : 'miss')
    }
  }
  return {
    list: peers.map(([peer, title]) =>
      row(peer, 'list', `${title}, stock setup: POST ${USERS_LIST_QUERY}`, () => gqlPost(USERS_LIST_QUERY, undefined))
    ),
    user: peers.map(([peer, title]) =>
      row(peer, 'user', `${title}, stock setup (no auth, no limits): POST user(id: $id) { id name email }`, () => {
        const { id, token } = user()
        return gqlPost(USER_BY_ID_QUERY, { id }, token)
      })
    ),
    cached: peers.map(([peer, title]): HttpScenario => ({
      ...common,
      name: `${peer}-cached-user-get`,
      env: { PEER: `${peer}-cached`, RESPONSE_CACHE_TTL_MS: String(CACHED_ROWS_TTL_MS) },
      shape: 'user',
      description: `${title} with its own response cache (${caches[peer].how}), shared by every caller: GET /graphql?query=user(id: $id) { id name email }&variables=…, rotating over the seeded users as cached-persisted-get does`,
      guarded: 'guarded-user-get',
      next: () => {
        const { id, token } = cachedUser()
        const query = new URLSearchParams({ query: USER_BY_ID_QUERY, variables: JSON.stringify({ id }) })
        // apollo-require-preflight: Apollo's CSRF prevention refuses a GET without it (Yoga ignores it).
        return {
          method: 'GET',
          path: `/graphql?${query}`,
          headers: { authorization: `Bearer ${token}`, 'apollo-require-preflight': 'true' }
        }
      },
      verify: (request, response) =>
        checked('user')(request, response) ??
        (caches[peer].outcome(response.headers ?? {}, response.body) === 'hit' ? null : `not served from ${title}'s cache`),
      cacheOutcome: caches[peer].outcome
    }))
  }
}

/**
 * The guarded baselines (bench/guarded-server.ts, one process per row, started like the service): the
 * rest routes' reads and JSON behind the service's own JWT auth, request and cost budgets (one chargeCost
 * at the price the service charged the same request), metrics, access log, request id, load shedding and
 * CORS, each in the transport shape of the GraphQL rows compared with it.
 */
export function guardedScenarios (data: BenchData): HttpScenario[] {
  const getUser = rotate(data.users)
  const postUser = rotate(data.users)
  const costs = data.costs ?? { user: 1, list: 1 }
  const common = {
    target: 'service' as const,
    script: 'bench/guarded-server.ts',
    env: { GUARDED_COST_USER: String(costs.user), GUARDED_COST_LIST: String(costs.list) },
    store: 'sqlite' as const,
    guardedRow: true as const,
    quickCheck: jsonOk
  }
  return [
    {
      ...common,
      name: 'guarded-list',
      shape: 'list',
      description: `users-list's POST, anonymous, to a plain route behind the service's protections: chargeCost(${costs.list}) + store.listUsers(20) → JSON`,
      next: () => ({ ...gqlPost(USERS_LIST_QUERY, undefined), path: '/guarded/users' }),
      verify: checked('list')
    },
    {
      ...common,
      name: 'guarded-user-get',
      shape: 'user',
      description: `GET with a USER token (persisted-get's shape) to a plain route behind the service's protections: chargeCost(${costs.user}) + store.usersByIds([id]) → JSON`,
      next: () => {
        const { id, token } = getUser()
        return {
          method: 'GET',
          path: `/guarded/users/${encodeURIComponent(id)}`,
          headers: { authorization: `Bearer ${token}`, 'apollo-require-preflight': 'true' }
        }
      },
      verify: checked('user')
    },
    {
      ...common,
      name: 'guarded-user',
      shape: 'user',
      description: `user-by-id's POST (same body, USER token) to a plain route behind the service's protections: chargeCost(${costs.user}) + store.usersByIds([id]) → JSON`,
      next: () => {
        const { id, token } = postUser()
        return { ...gqlPost(USER_BY_ID_QUERY, { id }, token), path: '/guarded/user' }
      },
      verify: checked('user')
    }
  ]
}

/**
 * A row on the deployed topology, named `<name>-deployed`: PostgreSQL and Redis (the runner's
 * environment for the `deployed` store), Redis keys of its own under `<prefix><name>:` (a cached row's
 * entries and its writes' marks are its own). `scenario` must be freshly made, so that its requests
 * rotate on their own.
 */
export function deployedTwin (scenario: HttpScenario, redisPrefix: string): HttpScenario {
  return {
    ...scenario,
    name: `${scenario.name}-deployed`,
    store: 'deployed',
    description: `${scenario.description}; on PostgreSQL and Redis`,
    env: { ...scenario.env, REDIS_PREFIX: `${redisPrefix}${scenario.name}:` }
  }
}

/** The `rest` baseline each scenario is compared with: the embedded plain route of its shape. */
export function restBaselineOf (scenario: Pick<HttpScenario, 'shape' | 'baselineRow'>): string | null {
  if (scenario.shape === 'limit' || scenario.baselineRow) return null
  return `rest-${scenario.shape}`
}
