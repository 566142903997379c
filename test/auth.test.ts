// Identity and authorization through real HTTP requests: the token boundary, field rules, action
// rules per caller class, and introspection in production.
import { test } from 'tap'
import { createHmac, generateKeyPairSync } from 'node:crypto'
import { createSigner } from 'fast-jwt'
import { spawnSync } from 'node:child_process'
import { gql, listenTestApp, TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from './helpers/app.ts'
import { processEnv, REPO } from './helpers/server-process.ts'
import { collect, wsClient } from './subscriptions/clients.ts'

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
const now = () => Math.floor(Date.now() / 1000)

/** Runs `npm run token -- <args>` as a process (node cli/mint-token.ts) with only `env` set. */
function mint (args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, ['cli/mint-token.ts', ...args], {
    cwd: REPO,
    env: processEnv(env),
    encoding: 'utf8'
  })
}

function hs256 (payload: object, header: object = { alg: 'HS256', typ: 'JWT' }, secret = TEST_JWT_SECRET): string {
  const unsigned = `${b64(header)}.${b64(payload)}`
  return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`
}

test('the token boundary refuses bad tokens before execution (401, UNAUTHENTICATED)', async (t) => {
  const { url, store } = await listenTestApp(t)
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const valid = hs256({ sub: '1', role: 'ADMIN', exp: now() + 60 })
  const [head, payload, signature] = valid.split('.')
  const bad: Record<string, string> = {
    expired: hs256({ sub: '1', role: 'ADMIN', exp: now() - 3600 }),
    tampered: `${head}.${b64({ sub: '1', role: 'ADMIN', exp: now() + 3600, extra: 1 })}.${signature}`,
    'wrong secret': hs256({ sub: '1', role: 'ADMIN', exp: now() + 60 }, undefined, 'another-secret-that-is-long-enough-000000'),
    'alg none': `${b64({ alg: 'none', typ: 'JWT' })}.${payload}.`,
    'wrong algorithm (HS512)': (() => {
      const unsigned = `${b64({ alg: 'HS512', typ: 'JWT' })}.${payload}`
      return `${unsigned}.${createHmac('sha512', TEST_JWT_SECRET).update(unsigned).digest('base64url')}`
    })(),
    'wrong algorithm (RS256)': createSigner({ key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, algorithm: 'RS256' })({ sub: '1', role: 'ADMIN', exp: now() + 60 }),
    'no exp': hs256({ sub: '1', role: 'ADMIN' }),
    'unknown role': hs256({ sub: '1', role: 'ROOT', exp: now() + 60 }),
    'no subject': hs256({ role: 'ADMIN', exp: now() + 60 }),
    garbage: 'not-a-token'
  }
  for (const [name, token] of Object.entries(bad)) {
    const before = await store.countUsers()
    const { status, body } = await gql(url, 'mutation { deleteUser(id: "2") }', undefined, {
      authorization: `Bearer ${token}`
    })
    t.equal(status, 401, `${name}: 401`)
    t.match(body, { errors: [{ extensions: { code: 'UNAUTHENTICATED' } }] }, `${name}: UNAUTHENTICATED`)
    t.notOk(body.data, `${name}: nothing executed`)
    t.equal(await store.countUsers(), before, `${name}: nothing changed`)
  }
  const expired = await gql(url, '{ users { id } }', undefined, { authorization: `Bearer ${bad.expired}` })
  t.equal(expired.body.errors[0].message, 'Token expired')
  const basic = await gql(url, '{ users { id } }', undefined, { authorization: 'Basic dXNlcjpwYXNz' })
  t.equal(basic.status, 401)
  t.equal(basic.body.errors[0].message, 'Invalid Authorization header: expected "Bearer <token>"')
  const malformed = await gql(url, '{ users { id } }', undefined, { authorization: 'Bearer abc' })
  t.equal(malformed.status, 401)
  t.equal(
    malformed.body.errors[0].message,
    'Malformed bearer token: a JWT is three base64url parts separated by dots',
    '"Bearer abc" has the expected form: the token is what is wrong'
  )
  // The valid token works, and a cookie is never read.
  const ok = await gql(url, '{ user(id: "2") { email adminNotes } }', undefined, { authorization: `Bearer ${valid}` })
  t.same(ok.body.data, { user: { email: 'ada@example.com', adminNotes: null } })
  const cookie = await gql(url, '{ user(id: "2") { email } }', undefined, {
    cookie: `token=${valid}; authorization=Bearer%20${valid}`
  })
  t.same(cookie.body.data, { user: { email: null } })
})

test('a verified token is remembered only until it expires, and only by its exact text', async (t) => {
  const { app, url } = await listenTestApp(t, { JWT_CLOCK_TOLERANCE_SEC: '0' })
  const token = hs256({ sub: '2', role: 'USER', exp: now() + 2 })
  const send = (value: string) =>
    gql(url, '{ user(id: "2") { email } }', undefined, { authorization: `Bearer ${value}` })
  t.same((await send(token)).body.data, { user: { email: 'ada@example.com' } }, 'verified and remembered')
  t.same((await send(token)).body.data, { user: { email: 'ada@example.com' } }, 'answered from memory')
  // The same claims under another signature: not the remembered text, so verified, and refused.
  const [head, payload] = token.split('.')
  const forged = await send(`${head}.${payload}.${hs256({ other: 1 }).split('.')[2]}`)
  t.equal(forged.status, 401, 'a twin with a wrong signature is refused')
  // A remembered caller cannot be altered by whoever receives it.
  const caller = app.authenticate(`Bearer ${token}`)!
  t.ok(Object.isFrozen(caller), 'remembered callers are frozen')
  t.throws(() => { (caller as { role: string }).role = 'ADMIN' })
  t.equal(app.authenticate(`Bearer ${token}`)!.role, 'USER')
  // Past exp the remembered entry is dropped: the token is checked again, and refused.
  await new Promise((resolve) => setTimeout(resolve, (now() + 1) * 1000 - Date.now() + 1100))
  const late = await send(token)
  t.equal(late.status, 401, 'refused once expired, although it was remembered')
  t.equal(late.body.errors[0].message, 'Token expired')
})

test('clock tolerance, issuer and audience are enforced when configured', async (t) => {
  const { url } = await listenTestApp(t, { JWT_ISSUER: 'https://issuer.example', JWT_AUDIENCE: 'graphql-api', JWT_CLOCK_TOLERANCE_SEC: '10' })
  const send = (claims: object) =>
    gql(url, '{ users(limit: 1) { id } }', undefined, {
      authorization: `Bearer ${hs256({ sub: '2', role: 'USER', ...claims })}`
    })
  t.equal((await send({ exp: now() + 60, iss: 'https://issuer.example', aud: 'graphql-api' })).status, 200)
  t.equal((await send({ exp: now() - 5, iss: 'https://issuer.example', aud: 'graphql-api' })).status, 200, 'within the clock tolerance')
  t.equal((await send({ exp: now() - 30, iss: 'https://issuer.example', aud: 'graphql-api' })).status, 401, 'past the clock tolerance')
  t.equal((await send({ exp: now() + 60, iss: 'https://evil.example', aud: 'graphql-api' })).status, 401, 'wrong issuer')
  t.equal((await send({ exp: now() + 60, iss: 'https://issuer.example', aud: 'other-api' })).status, 401, 'wrong audience')
  t.equal((await send({ exp: now() + 60 })).status, 401, 'missing iss and aud')
})

test('token lifetime: too long a life or an iat in the future is refused, over HTTP and at connection_init', async (t) => {
  const { url } = await listenTestApp(t, { JWT_MAX_LIFETIME_SEC: '86400', JWT_CLOCK_TOLERANCE_SEC: '5' })
  const day = 86_400
  const refused: Record<string, [object, string]> = {
    'a 100-year exp': [{ iat: now(), exp: now() + 100 * 365 * day }, 'Token lifetime longer than 86400 s'],
    'an iat one day ahead': [{ iat: now() + day, exp: now() + day + 60 }, 'Token issued in the future'],
    'no iat, a far exp': [{ exp: now() + 30 * day }, 'Token lifetime longer than 86400 s'],
    'an iat that is no number': [{ iat: 'yesterday', exp: now() + 60 }, 'Invalid token claims']
  }
  const passing: Record<string, object> = {
    'an hour, issued now': { iat: now(), exp: now() + 3600 },
    'exactly the maximum': { iat: now() - 60, exp: now() - 60 + day },
    'an iat within the clock tolerance': { iat: now() + 3, exp: now() + 600 },
    'no iat, a near exp': { exp: now() + 600 }
  }
  const ask = (claims: object) =>
    gql(url, '{ user(id: "2") { email } }', undefined, {
      authorization: `Bearer ${hs256({ sub: '2', role: 'USER', ...claims })}`
    })
  for (const [name, [claims, message]] of Object.entries(refused)) {
    const { status, body } = await ask(claims)
    t.equal(status, 401, `${name}: 401`)
    t.match(body, { errors: [{ message, extensions: { code: 'UNAUTHENTICATED' } }] }, `${name}: ${message}`)
    t.notOk(body.data, `${name}: nothing executed`)
    // The same verification at connection_init: the connection closes with 4403.
    const client = wsClient(url, { authToken: `Bearer ${hs256({ sub: '2', role: 'USER', ...claims })}` })
    const closed = await Promise.race([
      client.closed,
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 5000))
    ])
    client.dispose()
    t.match(closed, { code: 4403, reason: `Forbidden: ${message}` }, `${name}: closed 4403 at connection_init`)
  }
  for (const [name, claims] of Object.entries(passing)) {
    const { status, body } = await ask(claims)
    t.equal(status, 200, `${name}: accepted`)
    t.same(body.data, { user: { email: 'ada@example.com' } }, `${name}: as the user`)
    const client = wsClient(url, { authToken: `Bearer ${hs256({ sub: '2', role: 'USER', ...claims })}` })
    const outcome = await Promise.race([
      collect(client, 'subscription { count(target: 1) }').done,
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 5000))
    ])
    client.dispose()
    t.match(outcome, { completed: true, values: [{ data: { count: 0 } }] }, `${name}: accepted at connection_init`)
  }
})

test('RS256 with a public key verifies tokens signed by the private key', async (t) => {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const { url, token } = await listenTestApp(t, {
    JWT_SECRET: '',
    JWT_PUBLIC_KEY: publicKey.export({ type: 'spki', format: 'pem' }) as string,
    JWT_PRIVATE_KEY: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string
  })
  const ok = await gql(url, '{ user(id: "2") { email } }', undefined, { authorization: `Bearer ${token('2')}` })
  t.same(ok.body.data, { user: { email: 'ada@example.com' } })
  // An HS256 token made with the public key as the HMAC secret (the classic confusion attack) is refused.
  const confused = hs256(
    { sub: '1', role: 'ADMIN', exp: now() + 60 },
    undefined,
    publicKey.export({ type: 'spki', format: 'pem' }) as string
  )
  t.equal((await gql(url, '{ users { id } }', undefined, { authorization: `Bearer ${confused}` })).status, 401)
})

test('field rules: email for the user themself or an ADMIN, adminNotes for ADMIN only', async (t) => {
  const { url, token } = await listenTestApp(t)
  const query = '{ user(id: "4") { id name email adminNotes } }'
  const as = (sub?: string, role?: 'USER' | 'ADMIN' | 'SERVICE') =>
    gql(url, query, undefined, sub ? { authorization: `Bearer ${token(sub, role)}` } : {})
  const grace = { id: '4', name: 'Grace Hopper' }

  const anonymous = await as()
  t.same(anonymous.body.data.user, { ...grace, email: null, adminNotes: null })
  t.match(anonymous.body.errors, [
    { message: 'Must be logged in', path: ['user', 'email'], extensions: { code: 'UNAUTHENTICATED' } },
    { message: 'Must be logged in', path: ['user', 'adminNotes'], extensions: { code: 'UNAUTHENTICATED' } }
  ])
  t.equal(anonymous.status, 200, 'a denied field never makes the request fail')

  const self = await as('4')
  t.same(self.body.data.user, { ...grace, email: 'grace@example.com', adminNotes: null })
  t.match(self.body.errors, [{ path: ['user', 'adminNotes'], extensions: { code: 'FORBIDDEN' } }])

  const other = await as('2')
  t.same(other.body.data.user, { ...grace, email: null, adminNotes: null })
  t.match(other.body.errors, [
    { path: ['user', 'email'], extensions: { code: 'FORBIDDEN' } },
    { path: ['user', 'adminNotes'], extensions: { code: 'FORBIDDEN' } }
  ])

  const admin = await as('1', 'ADMIN')
  t.same(admin.body.data.user, { ...grace, email: 'grace@example.com', adminNotes: 'Prefers COBOL' })
  t.notOk(admin.body.errors)

  const service = await as('5', 'SERVICE')
  t.same(service.body.data.user, { ...grace, email: null, adminNotes: null })
  t.match(service.body.errors, [{ extensions: { code: 'FORBIDDEN' } }, { extensions: { code: 'FORBIDDEN' } }])
})

test('field rules hold inside lists: each user decides for their own email', async (t) => {
  const { url, token } = await listenTestApp(t)
  const { status, body } = await gql(url, '{ users { id email } }', undefined, {
    authorization: `Bearer ${token('3')}`
  })
  t.equal(status, 200)
  t.same(body.data.users.map((u: { email: string | null }) => u.email), [null, null, 'alan@example.com', null, null])
  t.equal(body.errors.length, 4)
})

test('every mutation authorizes its action, per caller class', async (t) => {
  const { url, token, store } = await listenTestApp(t)
  type Who = 'anonymous' | 'self' | 'other' | 'admin' | 'service'
  const headers = (who: Who): Record<string, string> => ({
    anonymous: {},
    self: { authorization: `Bearer ${token('3')}` },
    other: { authorization: `Bearer ${token('2')}` },
    admin: { authorization: `Bearer ${token('1', 'ADMIN')}` },
    service: { authorization: `Bearer ${token('5', 'SERVICE')}` }
  })[who]
  const expectDenied = async (who: Who, query: string, code: string, message?: RegExp | string) => {
    const before = JSON.stringify(await store.usersByIds(['3']))
    const { body, status } = await gql(url, query, undefined, headers(who))
    t.equal(status, 200, `${who}: ${query}: 200`)
    t.match(body.errors, [{ extensions: { code }, ...(message ? { message } : {}) }], `${who}: ${query}: ${code}`)
    t.equal(JSON.stringify(await store.usersByIds(['3'])), before, `${who}: nothing changed`)
  }

  let n = 0
  const create = () =>
    `mutation { createUser(input: { name: "New ${++n}", email: "new${n}@example.com" }) { id name } }`
  await expectDenied('anonymous', create(), 'UNAUTHENTICATED', 'Must be logged in')
  await expectDenied('self', create(), 'FORBIDDEN')
  t.match((await gql(url, create(), undefined, headers('admin'))).body.data.createUser, { name: /^New/ })
  t.match((await gql(url, create(), undefined, headers('service'))).body.data.createUser, { name: /^New/ })

  const rename = 'mutation { updateUser(id: "3", input: { name: "Alan M. Turing" }) { name } }'
  await expectDenied('anonymous', rename, 'UNAUTHENTICATED', 'Must be logged in')
  await expectDenied('other', rename, 'FORBIDDEN')
  await expectDenied('service', rename, 'FORBIDDEN')
  t.same((await gql(url, rename, undefined, headers('self'))).body.data, { updateUser: { name: 'Alan M. Turing' } })
  t.same((await gql(url, rename.replace('Alan M. Turing', 'Alan Turing'), undefined, headers('admin'))).body.data, {
    updateUser: { name: 'Alan Turing' }
  })

  const promote = 'mutation { updateUser(id: "3", input: { role: ADMIN }) { id } }'
  await expectDenied('self', promote, 'FORBIDDEN', /Only administrators may change role or adminNotes/)
  await expectDenied('self', 'mutation { updateUser(id: "3", input: { adminNotes: "mine" }) { id } }', 'FORBIDDEN')
  t.same(
    (
      await gql(
        url,
        'mutation { updateUser(id: "3", input: { adminNotes: "checked" }) { adminNotes } }',
        undefined,
        headers('admin')
      )
    ).body.data,
    { updateUser: { adminNotes: 'checked' } }
  )

  const remove = 'mutation { deleteUser(id: "3") }'
  for (const who of ['anonymous', 'self', 'other', 'service'] as const) {
    await expectDenied(who, remove, who === 'anonymous' ? 'UNAUTHENTICATED' : 'FORBIDDEN')
  }
  t.same((await gql(url, remove, undefined, headers('admin'))).body.data, { deleteUser: true })
  t.same((await gql(url, remove, undefined, headers('admin'))).body.data, { deleteUser: false })

  const post = 'mutation { postMessage(roomId: "general", content: "hi") { content author { id } } }'
  const anonymousPost = await gql(url, post)
  t.match(anonymousPost.body.errors, [{ message: 'Must be logged in', extensions: { code: 'UNAUTHENTICATED' } }])
  t.equal(anonymousPost.body.data, null)
  t.same(
    (await gql(url, post, undefined, headers('other'))).body.data,
    { postMessage: { content: 'hi', author: { id: '2' } } },
    'the author is the caller'
  )
})

test('introspection in production: refused however it is written, allowed for ADMIN', async (t) => {
  const { url, token } = await listenTestApp(t, { NODE_ENV: 'production', PERSISTED_ONLY: 'false' })
  const forms = {
    plain: '{ __schema { queryType { name } } }',
    type: '{ __type(name: "User") { name } }',
    aliased: '{ s: __schema { types { name } } }',
    'named fragment': 'query { ...F } fragment F on Query { __schema { queryType { name } } }',
    'inline fragment': 'query { ... on Query { __type(name: "User") { name } } }',
    'nested __type': '{ users(limit: 1) { id } t: __type(name: "Query") { fields { type { name } } } }',
    'fragment chain': 'query { ...A } fragment A on Query { ...B } fragment B on Query { __schema { types { name } } }'
  }
  for (const [name, query] of Object.entries(forms)) {
    const denied = await gql(url, query)
    t.match(
      denied.body,
      { errors: [{ message: 'Introspection disabled', extensions: { code: 'INTROSPECTION_DISABLED' } }] },
      `${name}: refused`
    )
    t.notOk(denied.body.data, `${name}: no data`)
    const user = await gql(url, query, undefined, { authorization: `Bearer ${token('2')}` })
    t.match(user.body.errors, [{ message: 'Introspection disabled' }], `${name}: refused for USER`)
    const admin = await gql(url, query, undefined, { authorization: `Bearer ${token('1', 'ADMIN')}` })
    t.notOk(admin.body.errors, `${name}: allowed for ADMIN`)
    t.ok(admin.body.data, `${name}: ADMIN gets data`)
  }
  const typename = await gql(url, '{ __typename users(limit: 1) { __typename id } }')
  t.same(
    typename.body.data,
    { __typename: 'Query', users: [{ __typename: 'User', id: '1' }] },
    '__typename is not introspection'
  )
})

test('introspection is open in development and the SDL shows the @auth directive', async (t) => {
  const { url } = await listenTestApp(t)
  const { body } = await gql(
    url,
    '{ __schema { directives { name args { name } } } __type(name: "User") { fields { name } } }'
  )
  t.notOk(body.errors)
  t.ok(body.data.__schema.directives.some((d: { name: string }) => d.name === 'auth'))
  t.same(
    body.data.__type.fields.map((f: { name: string }) => f.name),
    ['id', 'name', 'email', 'createdAt', 'adminNotes']
  )
})

test('npm run token mints a token the service accepts, says which key signed it, and takes --expires-in 1h', async (t) => {
  const { url } = await listenTestApp(t)
  const minted = mint(['--sub', '1', '--role', 'ADMIN', '--expires-in', '1h'], { JWT_SECRET: TEST_JWT_SECRET })
  t.equal(minted.status, 0, minted.stderr)
  const { body } = await gql(url, '{ user(id: "4") { adminNotes } }', undefined, {
    authorization: `Bearer ${minted.stdout.trim()}`
  })
  t.same(body.data, { user: { adminNotes: 'Prefers COBOL' } })
  const claims = JSON.parse(Buffer.from(minted.stdout.trim().split('.')[1]!, 'base64url').toString())
  t.equal(claims.exp - claims.iat, 3600, '--expires-in 1h is an hour')
  t.match(minted.stderr, /^Signed with JWT_SECRET \(HS256\); expires in 3600 s\.$/m)
  t.equal(mint(['--sub', '1', '--expires-in', '15m']).status, 0, 'minutes too')
  const bad = mint(['--sub', '1', '--expires-in', 'soon'])
  t.equal(bad.status, 2)
  t.match(bad.stderr, /usage: .*--expires-in/)
})

test('npm run token without JWT_SECRET: the development key, said so; refused in production', async (t) => {
  const development = mint(['--sub', '2'])
  t.equal(development.status, 0)
  t.match(development.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/, 'the token alone on stdout')
  t.match(development.stderr, /Signed with the development key \(JWT_SECRET is not set\)/)
  const production = mint(['--sub', '2'], { NODE_ENV: 'production', PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY })
  t.equal(production.status, 1, 'refused')
  t.equal(production.stdout, '', 'nothing minted')
  t.match(production.stderr, /^Configuration: set JWT_PRIVATE_KEY \(RS256\/ES256\) or JWT_SECRET \(HS256\)/)
  t.notMatch(production.stderr, /^\s+at /m, 'no stack trace')
  const publicKeyOnly = mint(['--sub', '2'], { NODE_ENV: 'production', JWT_PUBLIC_KEY: generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey.export({ type: 'spki', format: 'pem' }) as string })
  t.equal(publicKeyOnly.status, 1, 'a public key cannot sign')
  t.match(publicKeyOnly.stderr, /set JWT_PRIVATE_KEY/)
})

test('npm run token in production needs only the key it signs with', async (t) => {
  // No PARTNER_SECRET_KEY, and a setting the service would refuse (CORS_ORIGINS): neither is read.
  const secret = mint(['--sub', '1'], { NODE_ENV: 'production', JWT_SECRET: TEST_JWT_SECRET, CORS_ORIGINS: 'not an origin' })
  t.equal(secret.status, 0, secret.stderr)
  t.match(secret.stderr, /^Signed with JWT_SECRET \(HS256\)/m)
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string
  const rsa = mint(['--sub', '1', '--role', 'ADMIN'], { NODE_ENV: 'production', JWT_PRIVATE_KEY: pem })
  t.equal(rsa.status, 0, rsa.stderr)
  t.match(rsa.stderr, /^Signed with JWT_PRIVATE_KEY \(RS256\)/m, 'a private key alone signs RS256')
  // The service configured with the matching public key accepts it.
  const { url } = await listenTestApp(t, { JWT_SECRET: '', JWT_PUBLIC_KEY: publicKey.export({ type: 'spki', format: 'pem' }) as string })
  const { body } = await gql(url, '{ user(id: "4") { adminNotes } }', undefined, { authorization: `Bearer ${rsa.stdout.trim()}` })
  t.same(body.data, { user: { adminNotes: 'Prefers COBOL' } })
})
