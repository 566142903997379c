// The verified-token cache is bounded in bytes as well as in entries: each entry is keyed by the
// Authorization header, which can be as long as Node's header limit allows.
import { test } from 'tap'
import { createSigner } from 'fast-jwt'
import { listenTestApp, TEST_JWT_SECRET } from './helpers/app.ts'

test('1100 verified 8 KB tokens overflow the 16 MiB bound: the first is verified again when it returns, the newest is remembered', async (t) => {
  const { app, url } = await listenTestApp(t, { RATE_LIMIT_REQUESTS: '100000' })
  let verifications = 0
  const verify = app.jwt.verify.bind(app.jwt)
  app.jwt.verify = ((token: string) => { verifications++; return verify(token) }) as typeof app.jwt.verify
  const sign = createSigner({ key: TEST_JWT_SECRET, expiresIn: 600_000 })
  const send = async (token: string) => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: '{ __typename }' })
    })
    await response.arrayBuffer()
    return response.status
  }

  const short = sign({ sub: '2', role: 'USER' })
  // Signed once each (a token signed again gets a new iat, so a new text).
  const longTokens = Array.from({ length: 1101 }, (_, n) =>
    sign({ sub: '2', role: 'USER', padding: `${n}${'x'.repeat(6000)}` })
  )
  const long = (n: number) => longTokens[n]!
  t.equal(await send(short), 200)
  t.equal(await send(long(0)), 200)
  const statuses = new Set<number>()
  for (let n = 1; n <= 1100; n++) statuses.add(await send(long(n)))
  t.same([...statuses], [200])

  verifications = 0
  t.equal(await send(long(0)), 200)
  t.equal(verifications, 1, 'the first long token was forgotten: 1100 more long headers passed the byte bound')
  verifications = 0
  t.equal(await send(long(1100)), 200)
  t.equal(verifications, 0, 'the newest is remembered')
})
