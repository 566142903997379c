// With REDIS_URL, WS-Security nonces are shared: a message accepted by one instance is refused as a
// replay by another, in any spelling of its bytes. Needs Redis at
// 127.0.0.1:6379 (the app refuses to start, with that message, without it).
import { randomUUID } from 'node:crypto'
import { test } from 'tap'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { fixture, listenSoapApp, post, readFault } from './helpers.ts'

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

test('a nonce used on one instance is refused on another (shared through Redis)', async (t) => {
  // Two instances over one store, as behind a load balancer (the store is shared; so is Redis).
  const store = openSqliteStore(':memory:')
  t.teardown(() => store.close())
  await loadDemoData(store)
  await createPartnerAccount(store, TEST_PARTNER_SECRET_KEY, { login: 'partner', password: 's3cret', userId: '5' })
  await store.createUser({ id: '007', name: 'James Bond', email: 'jb@example.com' })
  const prefix = `test-soap-${randomUUID()}:`
  const env = { SOAP_PUBLIC_URL: 'https://example.com', SOAP_NAMESPACE_BASE: 'https://example.com', REDIS_URL, REDIS_PREFIX: prefix }
  const clock = () => Date.parse('2026-11-22T07:17:00Z')
  const first = await listenSoapApp(t, env, { store, clock })
  const second = await listenSoapApp(t, env, { store, clock })
  t.teardown(async () => {
    const keys = await first.app.redis.client!.keys(`${prefix}*`)
    if (keys.length > 0) await first.app.redis.client!.del(...keys)
  })

  const { body, headers } = fixture('node-soap-1')
  const accepted = await post(`${first.url}/v1/UserService`, body, headers)
  t.equal(accepted.status, 200, accepted.text)
  const replay = await post(`${second.url}/v1/UserService`, body, headers)
  t.equal(replay.status, 500)
  t.match(readFault(replay.text), { code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED', reason: /already been used/ })

  // The same bytes spelled otherwise (no padding, one "=", an unused low bit set) are the same nonce.
  for (const spelling of ['XZEp4BASDrA6NLpCMB9nDA', 'XZEp4BASDrA6NLpCMB9nDA=', 'XZEp4BASDrA6NLpCMB9nDB==']) {
    const respelled = body.replace('>XZEp4BASDrA6NLpCMB9nDA==<', `>${spelling}<`)
    t.not(respelled, body)
    for (const instance of [first, second]) {
      const again = await post(`${instance.url}/v1/UserService`, respelled, headers)
      t.equal(again.status, 500, `re-spelled as ${spelling}`)
      t.match(readFault(again.text), { code: 'wsse:FailedAuthentication', errorCode: 'UNAUTHENTICATED' })
    }
  }

  // Keyed by the partner's user (5) and the nonce's bytes, in canonical Base64.
  const key = `${prefix}wsse-nonce:5:XZEp4BASDrA6NLpCMB9nDA==`
  t.equal(await first.app.redis.client!.get(key), '1', 'the nonce is stored under the deployment prefix')
  const ttl = await first.app.redis.client!.pttl(key)
  t.ok(ttl > 0 && ttl <= 305_000, `it expires with the freshness window (pttl ${ttl})`)
})
