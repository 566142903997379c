// CORS over real HTTP: closed unless CORS_ORIGINS lists the origin; preflights for /graphql allow the
// headers a browser client needs; never credentials.
import { test } from 'tap'
import { buildTestApp, gql, listenTestApp } from './helpers/app.ts'
import { loadConfig } from '../app/core/config/index.ts'

const ALLOWED = 'https://app.example.com'
const OTHER = 'https://evil.example.net'

function preflight (
  url: string,
  origin: string,
  headers = 'content-type, authorization, apollo-require-preflight, x-apollo-operation-name'
) {
  return fetch(`${url}/graphql`, {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': headers }
  })
}

function corsHeadersOf (response: Response): string[] {
  return [...response.headers.keys()].filter((name) => name.startsWith('access-control-'))
}

for (const profile of ['production', 'development'] as const) {
  test(`${profile} without CORS_ORIGINS: no cross-origin access`, async (t) => {
    const { url } = await listenTestApp(t, { NODE_ENV: profile })
    const answer = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { origin: ALLOWED, 'content-type': 'application/json' },
      body: '{"query":"{ users { id } }"}'
    })
    t.same(corsHeadersOf(answer), [], 'an answer carries no CORS headers')

    const response = await preflight(url, ALLOWED)
    t.equal(response.status, 404, 'no preflight route at all')
    t.same(corsHeadersOf(response), [], 'and no CORS headers')
    t.match(await response.json(), { errors: [{ extensions: { code: 'NOT_FOUND' } }] })
  })
}

test('an allowed origin may call /graphql cross-origin, without credentials', async (t) => {
  const { url, token } = await listenTestApp(t, { CORS_ORIGINS: `${ALLOWED}, http://localhost:5173` })

  const { status, headers, body } = await gql(url, '{ users(limit: 2) { name } }', undefined, {
    origin: ALLOWED,
    authorization: `Bearer ${token('1', 'ADMIN')}`
  })
  t.equal(status, 200)
  t.same(body.data.users, [{ name: 'Admin' }, { name: 'Ada Lovelace' }])
  t.equal(headers.get('access-control-allow-origin'), ALLOWED, 'the allowed origin is reflected')
  t.match(headers.get('vary'), /origin/i, 'caches keep answers for different origins apart')
  t.equal(headers.get('access-control-allow-credentials'), null, 'credentials are never allowed')
  t.match(headers.get('access-control-expose-headers'), /x-request-id/)

  const second = await gql(url, '{ users(limit: 1) { id } }', undefined, { origin: 'http://localhost:5173' })
  t.equal(second.headers.get('access-control-allow-origin'), 'http://localhost:5173', 'every listed origin is allowed')
})

test('preflight for /graphql from an allowed origin', async (t) => {
  const { url } = await listenTestApp(t, { CORS_ORIGINS: ALLOWED })
  const response = await preflight(url, ALLOWED)
  t.equal(response.status, 204)
  t.equal(response.headers.get('access-control-allow-origin'), ALLOWED)
  const methods = response.headers.get('access-control-allow-methods')!.split(',').map((s) => s.trim())
  t.same(methods.sort(), ['GET', 'POST'])
  const allowed = response.headers.get('access-control-allow-headers')!.split(',').map((s) => s.trim().toLowerCase())
  for (const header of ['content-type', 'authorization', 'apollo-require-preflight', 'x-apollo-operation-name']) {
    t.ok(allowed.includes(header), `${header} may be sent`)
  }
  t.equal(response.headers.get('access-control-max-age'), '600')
  t.equal(response.headers.get('access-control-allow-credentials'), null)
})

test('a disallowed origin gets no CORS headers, on requests and preflights', async (t) => {
  const { url } = await listenTestApp(t, { CORS_ORIGINS: ALLOWED })
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { origin: OTHER, 'content-type': 'application/json' },
    body: '{"query":"{ users { id } }"}'
  })
  t.equal(response.status, 200)
  t.same(corsHeadersOf(response), [])
  t.match(response.headers.get('vary'), /origin/i)

  const denied = await preflight(url, OTHER)
  t.equal(denied.status, 404)
  t.same(corsHeadersOf(denied), [])

  const lookalike = await preflight(url, `${ALLOWED}.evil.example.net`)
  t.equal(lookalike.status, 404, 'origins match exactly, not by prefix')
  t.same(corsHeadersOf(lookalike), [])
})

test('refusals answered before the route (here 415) still carry CORS headers for an allowed origin', async (t) => {
  const { url } = await listenTestApp(t, { CORS_ORIGINS: ALLOWED })
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { origin: ALLOWED, 'content-type': 'text/plain' },
    body: '{}'
  })
  t.equal(response.status, 415)
  t.equal(response.headers.get('access-control-allow-origin'), ALLOWED, 'a browser client can read why it was refused')
})

test('production with an allowlist opens exactly those origins', async (t) => {
  const { url } = await listenTestApp(t, { NODE_ENV: 'production', CORS_ORIGINS: ALLOWED })
  t.equal((await preflight(url, ALLOWED)).headers.get('access-control-allow-origin'), ALLOWED)
  t.equal((await preflight(url, OTHER)).status, 404)
})

test('CORS_ORIGINS entries must be origins', async (t) => {
  t.same(loadConfig({ CORS_ORIGINS: 'https://App.Example.com:443/, http://localhost:5173' }).cors.origins, ['https://app.example.com', 'http://localhost:5173'],
    'normalized to the form browsers send')
  t.same(loadConfig({}).cors.origins, [])
  for (const bad of ['*', 'null', 'app.example.com', 'https://app.example.com/path', 'ftp://app.example.com', 'https://user@app.example.com', 'https://app.example.com?x=1']) {
    t.throws(() => loadConfig({ CORS_ORIGINS: bad }), /CORS_ORIGINS entry .* is not an origin/, `refuses ${bad}`)
  }
  await t.rejects(buildTestApp(t, { CORS_ORIGINS: 'https://app.example.com/' + 'api' }), /CORS_ORIGINS entry "https:\/\/app.example.com\/api" is not an origin/,
    'the service refuses to start with a bad entry')
})
