// The HTTP exchange (routes/graphql/http-exchange.ts) driven with plain objects: no Fastify, no
// listening server. A fake pipeline stands for the admission pipeline, so what is checked is the
// exchange's own rules: the status table, batches, GET parsing, cost stripping, ETag and 304, refusals,
// and the response cache's place in them (what is cached, Age, the request's own cost on a hit).
// The listening-server tests (graphql-http.test.ts, test/persisted/) check the same rules end to end.
import { test } from 'tap'
import { buildSchema, parse } from 'graphql'
import { MemoryCacheStore } from '../app/core/cache/memory-store.ts'
import { ResponseCache } from '../app/core/cache/response-cache.ts'
import { loadConfig } from '../app/core/config/index.ts'
import { AppError } from '../app/core/errors.ts'
import {
  createHttpExchange,
  requestRefusal,
  type HttpAnswer,
  type HttpExchangeInput,
  type HttpExchangeOptions,
  type HttpExchangeResult
} from '../routes/graphql/http-exchange.ts'
import { etagOf } from '../app/graphql/http-cache.ts'
import { textHash } from '../app/core/text-hash.ts'

/** The ETag of an answer as sent: from the digest of its text without extensions, and its extensions. */
function etagOfSent (contentType: string, json: string): string {
  const at = json.lastIndexOf(',"extensions":')
  return etagOf(contentType, textHash(`${json.slice(0, at)}}`), json.slice(at + ',"extensions":'.length, -1))
}
import type { Admission, OperationAdmission, Priced } from '../app/graphql/pipeline.ts'

/**
 * The fake pipeline's schema: `secret` is guarded by a field rule and `viewer` declared PRIVATE, so their
 * answers are per caller; `hello` is every caller's.
 */
const schema = buildSchema(`
  directive @auth(requires: [String!]!) on FIELD_DEFINITION
  enum CacheControlScope { PUBLIC PRIVATE }
  directive @cacheControl(scope: CacheControlScope!) on FIELD_DEFINITION
  type Query { hello: String, secret: String @auth(requires: ["SELF"]), viewer: String @cacheControl(scope: PRIVATE), __fail: String }
  type Mutation { touch: String }
`)

/**
 * A pipeline that admits any operation at cost 4 (`remaining` going down by 4 a request; a budget of
 * 1000, 5000 for an ADMIN) and answers
 * `{ hello: <variables.who> }`, or with `viewer` the id of the caller it was executed as (as a resolver
 * reading the caller would); a query naming `limited` is refused as the request budget refuses
 * (RATE_LIMITED, retry in 7 s), one naming `failing` answers with an error. With `charge`, each
 * admission is paid by it (as through Redis: `onPriced` told first), and refused when it throws.
 * An `id` in `seen.retired` is refused as the registry refuses an operation retired with its deployment.
 */
function fakePipeline (charge?: () => Promise<void>) {
  const seen = {
    admitted: [] as Parameters<OperationAdmission['admit']>[0][],
    /** Ids no longer served (PERSISTED_QUERY_NOT_FOUND), and the requests resolvesRegistered was asked of. */
    retired: new Set<string>(),
    resolved: [] as Parameters<OperationAdmission['resolvesRegistered']>[0][],
    executed: 0,
    cached: [] as string[],
    /** The caller each execution ran as (what its resolvers saw). */
    as: [] as (string | null)[]
  }
  let remaining = 1000
  const admission: HttpExchangeOptions['admission'] = {
    async admit (request) {
      seen.admitted.push(request)
      if (seen.retired.has(String(request.params.id))) {
        throw new AppError('PERSISTED_QUERY_NOT_FOUND', `Persisted query not found: the operation "${String(request.params.id)}" was retired with ios 1.0.0`)
      }
      const query = String(request.params.query ?? '')
      if (query.includes('limited')) {
        throw new AppError('RATE_LIMITED', 'Too many requests', { retryAfter: 7 })
      }
      const document = parse(query.startsWith('mutation') || query.startsWith('{') || query.startsWith('query') ? query : '{ hello }')
      const admission = {
        caller: request.caller,
        operation: {
          name: request.params.operationName ?? null,
          key: query,
          type: query.startsWith('mutation') ? 'mutation' : 'query',
          document,
          introspects: query.includes('__schema')
        },
        cost: { requested: 4, budget: request.caller?.role === 'ADMIN' ? 5000 : 1000, remaining: remaining -= 4 },
        variables: request.params.variables ?? {}
      }
      // A charge paid through a shared counter: the pipeline sends it, tells `onPriced`, then waits.
      if (charge) {
        const paid = charge()
        request.onPriced?.(admission as unknown as Priced)
        await paid
      }
      return admission as unknown as Admission
    },
    async operationType () { return 'query' },
    async resolvesRegistered (params) {
      seen.resolved.push(params)
      return !seen.retired.has(String(params.id))
    }
  }
  const execution: HttpExchangeOptions['execution'] = {
    async execute (admission, _root, _reads, as = admission.caller) {
      seen.executed++
      seen.as.push(as?.id ?? null)
      const text = admission.operation.document.loc?.source.body ?? ''
      if (text.includes('failing')) {
        return { data: { hello: null }, errors: [new AppError('INTERNAL_SERVER_ERROR', 'failed')] } as never
      }
      if (text.includes('viewer')) return { data: { viewer: as?.id ?? null } }
      return { data: { hello: (admission.variables.who as string | undefined) ?? 'world' } }
    },
    cached (_admission, outcome) { seen.cached.push(outcome) }
  }
  return { pipeline: { admission, execution }, seen }
}

function exchangeOver (
  env: Record<string, string> = {}, responseCache: ResponseCache | null = null, charge?: () => Promise<void>
) {
  const { pipeline, seen } = fakePipeline(charge)
  const exchange = createHttpExchange({
    config: loadConfig({ MAX_BATCH_SIZE: '3', CACHE_MAX_AGE_SEC: '60', ...env }),
    ...pipeline,
    persisted: { checkBatch () {} },
    errorOptions: { production: true, logInternal: () => {} },
    responseCache,
    schema: () => schema
  })
  return { exchange, seen }
}

/** A response cache in process, on a clock the test moves. */
function cacheOnClock () {
  const clock = { now: 1_000_000 }
  const now = () => clock.now
  return { clock, cache: new ResponseCache(new MemoryCacheStore({ ttlMs: 60_000, now }), { ttlMs: 60_000, now }) }
}

const post = (body: unknown, headers: Record<string, string> = {}): HttpExchangeInput => ({
  method: 'POST',
  url: '/graphql',
  headers: { 'content-type': 'application/json', ...headers },
  body,
  caller: null,
  ip: '192.0.2.1'
})

/** The result as an answer (not an event stream), its body parsed. */
function answered (result: HttpExchangeResult): HttpAnswer & { json: any } {
  if ('eventStream' in result) throw new Error('expected an answer, got an event stream')
  return { ...result, json: result.body === undefined ? undefined : JSON.parse(result.body) }
}

test('a POST is answered 200 with its data and cost, in the media type asked for', async (t) => {
  const { exchange, seen } = exchangeOver()
  const out = answered(await exchange(post({ query: '{ hello }', variables: { who: 'ada' } })))
  t.equal(out.status, 200)
  t.equal(out.contentType, 'application/json; charset=utf-8')
  t.same(out.json, { data: { hello: 'ada' }, extensions: { cost: { requested: 4, budget: 1000, remaining: 996 } } })
  t.match(out.operation, { name: null, type: 'query' }, 'the admitted operation, for the instruments')
  t.equal(seen.admitted[0]?.transport, 'POST')
  t.equal(seen.admitted[0]?.ip, '192.0.2.1')

  const graphqlResponse = answered(await exchange(post({ query: '{ hello }' }, { accept: 'application/graphql-response+json' })))
  t.equal(graphqlResponse.contentType, 'application/graphql-response+json; charset=utf-8')
})

test('a persisted GET: variables parsed, no rate-limit state, an ETag; the same GET with it is a 304 before executing', async (t) => {
  const { exchange, seen } = exchangeOver()
  const url = '/graphql?id=hello&variables=%7B%22who%22%3A%22bob%22%7D'
  const get = (headers: Record<string, string> = {}): HttpExchangeInput => ({
    method: 'GET', url, headers, query: { id: 'hello', variables: '{"who":"bob"}' }, caller: null, ip: '192.0.2.1'
  })
  const first = answered(await exchange(get()))
  t.equal(first.status, 200)
  t.same(first.json, { data: { hello: 'bob' }, extensions: { cost: { requested: 4, budget: 1000 } } }, 'cost without `remaining`')
  t.same(seen.admitted[0]?.params, { id: 'hello', variables: { who: 'bob' }, extensions: undefined })
  t.equal(seen.admitted[0]?.transport, 'GET')
  const etag = first.headers.etag
  t.match(etag, /^"[0-9a-f]{16}"$/, 'a strong 64-bit ETag')
  t.equal(first.headers['cache-control'], 'public, max-age=60')
  t.equal(first.headers.vary, 'Accept, Authorization')

  const again = answered(await exchange(get({ 'if-none-match': etag as string })))
  t.equal(again.status, 304)
  t.equal(again.body, undefined, 'no body')
  t.equal(again.contentType, undefined, 'no media type')
  t.equal(again.headers.etag, etag)
  t.equal(again.answer, null, 'nothing answered')
  t.equal(seen.executed, 1, 'answered before executing')

  const badVariables = answered(await exchange({ ...get(), query: { id: 'hello', variables: '{' } }))
  t.equal(badVariables.status, 400)
  t.equal(badVariables.json.errors[0].extensions.code, 'BAD_REQUEST')
  t.equal(badVariables.headers['cache-control'], 'no-store')
})

test('a remembered ETag answers 304 only while the registry still serves the id: once retired, the refusal', async (t) => {
  const { exchange, seen } = exchangeOver()
  const get = (headers: Record<string, string> = {}): HttpExchangeInput => ({
    method: 'GET', url: '/graphql?id=hello', headers, query: { id: 'hello' }, caller: null, ip: '192.0.2.1'
  })
  const etag = answered(await exchange(get())).headers.etag!
  t.same(seen.resolved, [], 'no If-None-Match: the registry is not asked twice (admission resolves it)')
  t.equal(answered(await exchange(get({ 'if-none-match': etag }))).status, 304)
  t.match(seen.resolved, [{ id: 'hello' }], 'asked before the remembered ETag answered')
  t.equal(seen.admitted.length, 1, 'nothing admitted for the 304')

  seen.retired.add('hello')
  const stale = answered(await exchange(get({ 'if-none-match': etag })))
  t.equal(stale.status, 200)
  t.equal(stale.json.errors[0].extensions.code, 'PERSISTED_QUERY_NOT_FOUND')
  t.match(stale.json.errors[0].message, /retired with ios 1\.0\.0/)
  t.equal(stale.headers.etag, undefined, 'no ETag: the remembered one is not set on the refusal')
  t.equal(stale.headers['cache-control'], 'no-store')
  t.equal(seen.executed, 1)
})

test('a batch is one 200 answer, an array; a batch over MAX_BATCH_SIZE is refused whole', async (t) => {
  const { exchange, seen } = exchangeOver()
  const out = answered(await exchange(post([{ query: '{ a }', variables: { who: 'a' } }, 'not an object', { query: '{ limited }' }])))
  t.equal(out.status, 200)
  t.equal(out.json.length, 3)
  t.same(out.json[0].data, { hello: 'a' })
  t.equal(out.json[1].errors[0].extensions.code, 'BAD_REQUEST')
  t.equal(out.json[2].errors[0].extensions.code, 'RATE_LIMITED')
  t.same(seen.admitted.map((r) => r.paidByRequest), [true, false], 'the first operation is paid by the request')

  const tooMany = answered(await exchange(post([{ query: '{ a }' }, { query: '{ a }' }, { query: '{ a }' }, { query: '{ a }' }])))
  t.equal(tooMany.status, 400)
  t.equal(tooMany.json.errors[0].extensions.code, 'BAD_REQUEST')
  t.equal(tooMany.json.errors[0].extensions.maxBatchSize, 3)

  const { exchange: noBatches } = exchangeOver({ MAX_BATCH_SIZE: '0' })
  const off = answered(await noBatches(post([{ query: '{ a }' }])))
  t.equal(off.status, 400)
  t.equal(off.json.errors[0].extensions.maxBatchSize, 0)
})

test('refusals: their status, headers and extensions.code', async (t) => {
  const { exchange } = exchangeOver()
  // application/json: a processed request is 200 whatever its errors, except a request not processed at all.
  const limited = answered(await exchange(post({ query: '{ limited }' })))
  t.equal(limited.status, 429, 'RATE_LIMITED is never processed: its own status')
  t.equal(limited.headers['retry-after'], '7')
  t.equal(limited.json.errors[0].extensions.code, 'RATE_LIMITED')

  const body = answered(await exchange(post('a string')))
  t.equal(body.status, 400)
  t.equal(body.json.errors[0].extensions.code, 'BAD_REQUEST')
  t.equal(body.headers['cache-control'], 'no-store')
  t.same(body.answer, body.json, 'the refusal kept for the instruments')

  const put = answered(await exchange({ ...post({}), method: 'PUT' }))
  t.equal(put.status, 405)
  t.equal(put.headers.allow, 'GET, POST')
  t.equal(put.statusMessage, 'graphql-sse single connection mode is not supported')
  t.equal(put.json.errors[0].extensions.code, 'METHOD_NOT_ALLOWED')

  t.equal(requestRefusal('POST', { 'content-type': 'text/plain' })?.code, 'UNSUPPORTED_MEDIA_TYPE', 'no CSRF-able POST')
  t.equal(requestRefusal('GET', { 'x-graphql-event-stream-token': 'x' })?.code, 'BAD_REQUEST', 'no single connection mode')
  t.equal(requestRefusal('POST', { 'content-type': 'application/json; charset=utf-8' }), undefined)
})

test('a POST preferring an event stream is handed back for sse.ts, not answered', async (t) => {
  const { exchange, seen } = exchangeOver()
  const result = await exchange(post({ query: 'subscription { s }' }, { accept: 'text/event-stream' }))
  t.same(result, { eventStream: { query: 'subscription { s }' } })
  t.equal(seen.admitted.length, 0, 'nothing admitted here: the stream admits it')
})

test('with the response cache: a repeated query is a hit (Age, not executed) carrying its own request\'s cost', async (t) => {
  const { cache, clock } = cacheOnClock()
  const { exchange, seen } = exchangeOver({}, cache)
  const first = answered(await exchange(post({ query: '{ hello }', variables: { who: 'ada' } })))
  t.equal(first.headers.age, undefined, 'an executed answer has no Age')
  t.same(first.json.extensions.cost.remaining, 996)
  clock.now += 3500
  const second = answered(await exchange(post({ query: '{ hello }', variables: { who: 'ada' } })))
  t.equal(second.headers.age, '3', 'a hit says how old it is, in whole seconds')
  t.same(second.json, { data: { hello: 'ada' }, extensions: { cost: { requested: 4, budget: 1000, remaining: 992 } } },
    'the cached data with this request\'s cost, never the first request\'s remaining')
  t.equal(seen.executed, 1)
  t.same(seen.cached, ['miss', 'hit'], 'the instruments are told')
  t.equal(seen.admitted.length, 2, 'a hit is admitted (its request and its price paid) like an execution')

  const other = answered(await exchange(post({ query: '{ hello }', variables: { who: 'bob' } })))
  t.equal(other.headers.age, undefined, 'other variables, another entry')
  t.equal(seen.executed, 2)
})

test('with the charge on its way (Redis): the cache is read meanwhile, its entry served and counted only once paid', async (t) => {
  const events: string[] = []
  const now = () => 1_000_000
  const store = new MemoryCacheStore({ ttlMs: 60_000, now })
  const storeGet = store.get.bind(store)
  store.get = (key) => { events.push('cache read'); return storeGet(key) }
  const cache = new ResponseCache(store, { ttlMs: 60_000, now })
  /** Each charge waits until the test answers it: `pay()` or `refuse()`. */
  let pay = () => {}
  let refuse = () => {}
  const charge = () => new Promise<void>((resolve, reject) => {
    events.push('charge sent')
    pay = () => { events.push('paid'); resolve() }
    refuse = () => reject(new AppError('RATE_LIMITED', 'Cost rate limit exceeded', { retryAfter: 3 }))
  })
  const { exchange, seen } = exchangeOver({}, cache, charge)
  const request = () => exchange(post({ query: '{ hello }', variables: { who: 'ada' } }))
  const onPriced = async () => { await new Promise((resolve) => setImmediate(resolve)) }

  const first = request()
  await onPriced()
  pay()
  t.equal(answered(await first).json.data.hello, 'ada', 'a miss, executed once paid')
  t.same(events, ['charge sent', 'cache read', 'paid'], 'the cache read while paying (the fill begins from what it found)')

  events.length = 0
  const second = request()
  await onPriced()
  t.same(events, ['charge sent', 'cache read'], 'the entry is read while the charge is on its way')
  t.equal(cache.stats().hits, 0, 'and not counted before the request is admitted')
  pay()
  const hit = answered(await second)
  t.equal(hit.status, 200)
  t.equal(hit.headers.age, '0', 'served from the cache once paid')
  t.equal(seen.executed, 1)
  t.equal(cache.stats().hits, 1)

  events.length = 0
  const third = request()
  await onPriced()
  t.same(events, ['charge sent', 'cache read'])
  refuse()
  const refused = answered(await third)
  t.equal(refused.status, 429, 'a refused charge is the answer')
  t.same(refused.json.errors.map((e: any) => e.extensions.code), ['RATE_LIMITED'])
  t.equal(refused.json.data, undefined, 'nothing of the entry read meanwhile is sent')
  t.equal(cache.stats().hits, 1, 'nor counted')
  t.equal(seen.executed, 1, 'nothing executed')

  events.length = 0
  const mutation = exchange(post({ query: 'mutation { touch }' }))
  await onPriced()
  pay()
  await mutation
  t.same(events, ['charge sent', 'paid'], 'what is never cached reads nothing while paying')
})

test('with the response cache: mutations, introspection and answers with errors are never cached', async (t) => {
  const { cache } = cacheOnClock()
  const { exchange, seen } = exchangeOver({}, cache)
  for (const query of ['mutation { touch }', '{ __schema { queryType { name } } }', '{ hello failing: hello }']) {
    for (let i = 0; i < 2; i++) t.equal(answered(await exchange(post({ query }))).headers.age, undefined, query)
  }
  t.equal(seen.executed, 6, 'each executed every time')
  t.equal(cache.stats().stored, 0)
})

test('with the response cache: an answer with guarded fields is per caller; one without is shared', async (t) => {
  const { cache } = cacheOnClock()
  const { exchange, seen } = exchangeOver({}, cache)
  const as = (id: string | null, query: string) => ({ ...post({ query }), caller: id ? { id, role: 'USER' as const } : null })
  answered(await exchange(as('1', '{ hello secret }')))
  t.equal(answered(await exchange(as('2', '{ hello secret }'))).headers.age, undefined, 'another user: executed')
  t.equal(answered(await exchange(as(null, '{ hello secret }'))).headers.age, undefined, 'anonymous: executed')
  t.equal(answered(await exchange(as('1', '{ hello secret }'))).headers.age, '0', 'the same user: a hit')
  t.equal(seen.executed, 3)
  answered(await exchange(as('1', '{ hello }')))
  t.equal(answered(await exchange(as(null, '{ hello }'))).headers.age, '0', 'no guarded field: shared by every caller')
  t.equal(seen.executed, 4)
})

test('with the response cache: a persisted GET\'s If-None-Match is answered 304 from the entry, after admission', async (t) => {
  const { cache } = cacheOnClock()
  const { exchange, seen } = exchangeOver({}, cache)
  const get = (headers: Record<string, string> = {}): HttpExchangeInput => ({
    method: 'GET', url: '/graphql?id=x', headers, query: { query: '{ hello }' }, caller: null, ip: '192.0.2.1'
  })
  const first = answered(await exchange(get()))
  t.equal(first.status, 200)
  const etag = first.headers.etag!
  const again = answered(await exchange(get({ 'if-none-match': etag })))
  t.equal(again.status, 304)
  t.equal(again.headers.etag, etag, 'the same ETag as the executed answer')
  t.equal(again.headers.age, '0')
  t.equal(seen.executed, 1, 'not executed')
  t.equal(seen.admitted.length, 2, 'but admitted: a 304 is paid for like any request')
})

test('with the response cache: every GET hit carries the ETag of the bytes it sends, whatever hit the entry before', async (t) => {
  const { cache } = cacheOnClock()
  const { exchange, seen } = exchangeOver({}, cache)
  const admin = { id: '1', role: 'ADMIN' as const }
  const get = (caller: typeof admin | null, accept?: string): HttpExchangeInput => ({
    method: 'GET', url: '/graphql?id=x', headers: accept ? { accept } : {}, query: { query: '{ hello }' }, caller, ip: '192.0.2.1'
  })
  // One shared entry (no guarded field), sent with another budget (ADMIN's) or another media type.
  const kinds = [
    get(null), get(admin), get(null, 'application/graphql-response+json'), get(admin, 'application/graphql-response+json'), get(null)
  ]
  const etags: string[] = []
  for (const input of kinds) {
    const out = answered(await exchange(input))
    t.equal(out.headers.etag, etagOfSent(out.contentType!, out.body!), `${out.body} as ${out.contentType}: the hash of its own bytes`)
    etags.push(out.headers.etag!)
  }
  t.equal(new Set(etags.slice(0, 4)).size, 4, 'four kinds of bytes, four ETags')
  t.equal(etags[4], etags[0], 'the same bytes again, the same ETag')
  t.equal(seen.executed, 1, 'all but the first were hits of one entry')
})

test('with the response cache: an answer every caller shares is executed as nobody; a PRIVATE field makes it each caller\'s own', async (t) => {
  const { cache } = cacheOnClock()
  const { exchange, seen } = exchangeOver({}, cache)
  const as = (id: string | null, query: string, role: 'USER' | 'ADMIN' = 'USER') =>
    ({ ...post({ query }), caller: id ? { id, role } : null })
  answered(await exchange(as('ann', '{ hello }')))
  t.same(seen.as, [null], 'no field says it depends on the caller: run as nobody, so no resolver can put Ann in it')
  answered(await exchange(as('ann', '{ viewer }')))
  answered(await exchange(as('bob', '{ viewer }')))
  answered(await exchange(as('boss', '{ viewer }', 'ADMIN')))
  t.same(seen.as, [null, 'ann', 'bob', 'boss'], 'a PRIVATE field: run as each caller (administrators too)')
  const again = answered(await exchange(as('bob', '{ viewer }')))
  t.equal(again.headers.age, '0', 'a hit of Bob\'s own entry')
  t.same(again.json.data, { viewer: 'bob' })
  t.equal(answered(await exchange(as('carl', '{ viewer }'))).json.data.viewer, 'carl', 'never another caller\'s value')
  t.same(answered(await exchange(as(null, '{ viewer }'))).json.data, { viewer: null })
})

test('Cache-Control on POST and GET follows what the fields declare: private when the answer depends on its caller', async (t) => {
  for (const responseCache of [null, cacheOnClock().cache]) {
    const { exchange } = exchangeOver({}, responseCache)
    const label = responseCache ? 'with the response cache' : 'without it'
    const bearer = { authorization: 'Bearer x' }
    const control = async (input: HttpExchangeInput) => answered(await exchange(input)).headers['cache-control']
    const get = (query: string, headers: Record<string, string> = {}): HttpExchangeInput =>
      ({ method: 'GET', url: `/graphql?q=${query}`, headers, query: { query }, caller: null, ip: '192.0.2.1' })
    t.equal(await control(post({ query: '{ hello }' })), 'public, max-age=60', `${label}: POST, everyone's answer`)
    t.equal(await control(post({ query: '{ hello }' }, bearer)), 'private, max-age=60', `${label}: POST with a token (its cost report is the caller's)`)
    t.equal(await control(post({ query: '{ viewer }' })), 'private, max-age=60', `${label}: POST, a PRIVATE field`)
    t.equal(await control(post({ query: '{ hello failing: hello }' })), 'no-store', `${label}: POST, an answer with an error`)
    t.equal(await control(post({ query: 'mutation { touch }' })), 'no-store', `${label}: POST, a mutation`)
    t.equal(await control(get('{ hello }')), 'public, max-age=60', `${label}: GET, everyone's answer`)
    t.equal(await control(get('{ viewer }')), 'private, max-age=60', `${label}: GET, a PRIVATE field, even without a token`)
    t.equal(await control(get('{ hello }', bearer)), 'private, max-age=60', `${label}: GET with a token`)
    const out = answered(await exchange(post({ query: '{ hello }' })))
    t.equal(out.headers.vary, 'Accept, Authorization')
    t.equal(out.headers.etag, undefined, 'no ETag on POST: POST answers are not revalidated')
  }
})
