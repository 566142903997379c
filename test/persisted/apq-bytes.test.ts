// Automatically registered texts kept in the process are bounded in bytes as well as in entries
// (APQ_MAX_DOCUMENT_BYTES alone lets 10000 entries hold 160 MB).
import { test } from 'tap'
import { listenTestApp } from '../helpers/app.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { NO_SHEDDING, postJson } from './helpers.ts'

const persistedQuery = (text: string) => ({
  extensions: { persistedQuery: { version: 1, sha256Hash: sha256Hex(text) } }
})

test('APQ_MAX_BYTES=256 KiB: 40 registered 8 KB texts push the first out; the newest is still found by its hash', async (t) => {
  const { url } = await listenTestApp(t, {
    ...NO_SHEDDING,
    APQ_MAX_BYTES: String(256 * 1024),
    RATE_LIMIT_REQUESTS: '10000'
  })
  const text = (n: number) => `{ users(limit: 1) { id } } # ${n} ${'x'.repeat(8000)}`
  for (let n = 0; n <= 40; n++) {
    const registered = await postJson(url, { query: text(n), ...persistedQuery(text(n)) })
    if (!registered.body.data) {
      t.fail(`text ${n} did not register: ${JSON.stringify(registered.body).slice(0, 200)}`)
      return
    }
  }
  const newest = await postJson(url, persistedQuery(text(40)))
  t.ok(newest.body.data?.users, 'the newest runs by its hash alone')
  const first = await postJson(url, persistedQuery(text(0)))
  t.match(
    first.body.errors,
    [{ extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' } }],
    'the first was forgotten: the byte bound, not the entry bound (10000)'
  )
})
