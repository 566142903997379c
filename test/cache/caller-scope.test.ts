// Answers shared between callers, through a listening server, with two throwaway fields added to the
// service's schema: `viewerId`, whose resolver reads the caller without saying so in the SDL (what
// test/schema-caller-scope.test.ts keeps out of the real schema), and `ownViewerId`, the same resolver
// declared @cacheControl(scope: PRIVATE). The response cache never hands one caller's value to another,
// and Cache-Control, by GET and by POST, follows the same declaration.
import { test, type Test } from 'tap'
import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import type { GraphQLContext } from '../../app/graphql/context.ts'
import { gql, testConfig } from '../helpers/app.ts'
import { PREFLIGHT } from '../persisted/helpers.ts'

const THROWAWAY_SDL = `
extend type Query {
  viewerId: ID
  ownViewerId: ID @cacheControl(scope: PRIVATE)
}
`

/** The service, listening, with the throwaway fields in its schema and resolvers; `as(id)` a user's headers. */
async function listenWithThrowawayFields (t: Test, env: Record<string, string> = {}) {
  const schemaModule = await import('../../app/graphql/schema.ts')
  const { resolvers } = await import('../../app/graphql/resolvers.ts')
  const viewerId = (_parent: unknown, _args: unknown, ctx: GraphQLContext) => ctx.domain.caller?.id ?? null
  const { buildApp } = await t.mockImport<typeof import('../../app/app.ts')>('../../app/app.ts', {
    '../../app/graphql/schema.ts': { ...schemaModule, schemaSDL: schemaModule.schemaSDL + THROWAWAY_SDL },
    '../../app/graphql/resolvers.ts': {
      resolvers: { ...resolvers, Query: { ...resolvers.Query, viewerId, ownViewerId: viewerId } }
    }
  })
  const { openSqliteStore } = await import('../../app/core/store/sqlite.ts')
  const { loadDemoData } = await import('../../app/core/store/sample-data.ts')
  const { mintToken } = await import('../../cli/mint-token.ts')
  const config = testConfig({ CACHE_MAX_AGE_SEC: '60', ...env })
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  const app = await buildApp(config, { store, logger: false })
  t.teardown(async () => { await app.close(); await store.close() })
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  const as = (id: string) => ({ authorization: `Bearer ${mintToken(config.jwt, id, 'USER')}` })
  return { app, url, as }
}

/** Where tracing may export its spans (OTEL_EXPORTER_OTLP_ENDPOINT): accepts them all, keeps nothing. */
async function spanSink (t: Test): Promise<string> {
  const server = createServer((request, response) => { request.resume().on('end', () => response.end()) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  const address = server.address() as { port: number }
  return `http://127.0.0.1:${address.port}`
}

/** Ada's, Grace's and anonymous answers to the undeclared field and to the declared one. */
async function answeredAsDeclared (t: Test, { url, as }: Awaited<ReturnType<typeof listenWithThrowawayFields>>) {
  const ada = await gql(url, '{ viewerId }', undefined, as('2'))
  t.same(ada.body.data, { viewerId: null }, 'Ada\'s shared answer was executed as nobody')
  t.equal(ada.body.extensions.cost.budget, 10000, 'yet its cost report is Ada\'s, a USER\'s (charged at admission)')
  const grace = await gql(url, '{ viewerId }', undefined, as('3'))
  t.equal(grace.headers.get('age'), '0', 'Grace is answered from the entry Ada\'s request filled')
  t.equal(grace.body.data.viewerId, null, 'never Ada\'s id')
  t.equal((await gql(url, '{ viewerId }')).body.extensions.cost.budget, 1000, 'an anonymous caller\'s report is theirs')

  const own = async (id: string) => {
    const answer = await gql(url, '{ ownViewerId }', undefined, as(id))
    return [answer.body.data.ownViewerId, answer.headers.get('age')]
  }
  t.same(await own('2'), ['2', null], 'declared: Ada\'s own answer, executed as her')
  t.same(await own('3'), ['3', null], 'Grace\'s own, not Ada\'s entry')
  t.same(await own('2'), ['2', '0'], 'Ada again: her own entry')
  t.equal((await gql(url, '{ ownViewerId }')).body.data.ownViewerId, null, 'anonymous')
}

// With tracing on, execution goes through its phases (app/core/tracing.ts), which pass the caller to run as along.
for (const tracing of [false, true]) {
  const name = 'through the response cache, an undeclared read of the caller answers as nobody; a PRIVATE field, ' +
    `each caller their own (tracing ${tracing ? 'on' : 'off'})`
  test(name, async (t) => {
    const env: Record<string, string> = tracing ? { OTEL_EXPORTER_OTLP_ENDPOINT: await spanSink(t) } : {}
    const service = await listenWithThrowawayFields(t, env)
    t.equal(service.app.tracing !== null, tracing)
    await answeredAsDeclared(t, service)
  })
}

// With the response cache off, a 304 is answered before executing, from this instance's memory of the
// ETags it sent: its Cache-Control is remembered with them.
for (const responseCache of [true, false]) {
  const name = 'Cache-Control by POST and by GET: public for everyone\'s answer, private for a PRIVATE field ' +
    `whatever the headers, 304s included (response cache ${responseCache ? 'on' : 'off'})`
  test(name, async (t) => {
    const { url, as } = await listenWithThrowawayFields(t, { RESPONSE_CACHE: String(responseCache) })
    const control = (response: { headers: Headers }) => response.headers.get('cache-control')
    /** A GET of an automatic persisted query (registered by POST first: GET runs registered operations only). */
    const get = async (query: string, headers: Record<string, string> = {}, status = 200) => {
      const extensions = { persistedQuery: { version: 1, sha256Hash: createHash('sha256').update(query).digest('hex') } }
      await fetch(`${url}/graphql`, { method: 'POST', headers: PREFLIGHT, body: JSON.stringify({ query, extensions }) })
      const params = new URLSearchParams({ extensions: JSON.stringify(extensions) })
      const response = await fetch(`${url}/graphql?${params}`, { headers: { ...PREFLIGHT, ...headers } })
      t.equal(response.status, status)
      return response
    }
    t.equal(control(await gql(url, '{ viewerId }')), 'public, max-age=60', 'POST, nothing declared, anonymous')
    t.equal(control(await gql(url, '{ viewerId }', undefined, as('2'))), 'private, max-age=60', 'POST with a token')
    t.equal(control(await gql(url, '{ ownViewerId }')), 'private, max-age=60', 'POST, PRIVATE, anonymous')
    t.equal(control(await gql(url, '{ ownViewerId }', undefined, as('2'))), 'private, max-age=60', 'POST, PRIVATE')
    t.equal(control(await get('{ viewerId }')), 'public, max-age=60', 'GET, nothing declared, anonymous')
    t.equal(control(await get('{ viewerId }', as('2'))), 'private, max-age=60', 'GET with a token')
    const own = await get('{ ownViewerId }')
    t.equal(control(own), 'private, max-age=60', 'GET, PRIVATE, anonymous')
    const etag = own.headers.get('etag')
    t.ok(etag, 'an ETag on GET')
    const revalidated = await get('{ ownViewerId }', { 'if-none-match': etag! }, 304)
    t.equal(control(revalidated), 'private, max-age=60', '304 of a PRIVATE answer')
    const post = await gql(url, '{ ownViewerId }')
    t.equal(post.headers.get('vary'), 'Accept, Authorization')
    t.equal(post.headers.get('etag'), null, 'no ETag on POST')
  })
}
