// The ETags remembered for persisted GETs are bounded in bytes as well as in entries: each entry's
// key holds the request's URL, which a client can make as long as the header limit allows.
import { test } from 'tap'
import { listenTestApp } from '../helpers/app.ts'
import { countingStore } from '../helpers/counting-store.ts'
import { MANIFEST_FILE, NO_SHEDDING, PREFLIGHT, queryIdOf } from './helpers.ts'

const USER_BY_ID = queryIdOf('UserById')

/** A persisted GET's URL, `padding` characters longer than it needs to be (whitespace in the variables' JSON). */
const paddedUrl = (url: string, padding: number) =>
  `${url}/graphql?${new URLSearchParams({ queryId: USER_BY_ID, variables: `{"id":"2"${' '.repeat(padding)}}` })}`

async function get (url: string, headers: Record<string, string> = {}) {
  const response = await fetch(url, { headers: { ...PREFLIGHT, ...headers } })
  await response.arrayBuffer()
  return { status: response.status, etag: response.headers.get('etag') }
}

for (const { padding, remembered } of [{ padding: 8000, remembered: false }, { padding: 10, remembered: true }]) {
  test(`CACHE_MAX_BYTES=256 KiB, 40 more URLs of ${padding > 100 ? 'about 8 KB' : 'a few dozen bytes'}: the first ETag is ${remembered ? 'still remembered' : 'forgotten'}`, async (t) => {
    const { store, calls } = countingStore()
    t.teardown(() => store.close())
    const { url } = await listenTestApp(
      t,
      {
        PERSISTED_MANIFEST: MANIFEST_FILE,
        ...NO_SHEDDING,
        CACHE_MAX_BYTES: String(256 * 1024),
        RATE_LIMIT_REQUESTS: '10000',
        // The per-instance ETag memory is what answers without the response cache.
        RESPONSE_CACHE: 'false'
      },
      { store }
    )
    const first = await get(paddedUrl(url, padding))
    t.equal(first.status, 200)
    t.ok(first.etag)
    const statuses = new Set<number>()
    for (let i = 1; i <= 40; i++) statuses.add((await get(paddedUrl(url, padding + i))).status)
    t.same([...statuses], [200], 'each executed and remembered')
    calls.length = 0
    const again = await get(paddedUrl(url, padding), { 'if-none-match': first.etag! })
    t.equal(again.status, 304, 'unchanged bytes: 304 either way')
    if (remembered) t.same(calls, [], 'answered from the remembered ETag, without executing')
    else t.ok(calls.length > 0, 'executed: 40 long keys pushed the first out of the byte bound')
  })
}
