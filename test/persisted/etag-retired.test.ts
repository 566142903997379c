// A persisted GET revalidated with If-None-Match after its app deployment was retired: the operation no
// longer runs, so the client must hear so (PERSISTED_QUERY_NOT_FOUND naming the retired deployment), not a
// 304 that keeps it on its cached answer. Without the response cache this instance's remembered ETags
// answer If-None-Match before executing, so they must be asked only once the registry still serves the id;
// with it, the shared entry answers only after admission, which resolves the id first.
import { test } from 'tap'
import { listenTestApp } from '../helpers/app.ts'
import { countingStore } from '../helpers/counting-store.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { NO_SHEDDING, PREFLIGHT } from './helpers.ts'

const USERS = 'query RetiredUsers { users { id } }'
const HASH = sha256Hex(USERS)
const MANIFEST = { format: 'apollo-persisted-query-manifest', version: 1, operations: [{ id: HASH, body: USERS }] }

// Both documented GET forms: a registered id, and the APQ hash alone (persisted-only mode names the
// retired deployment for a hash too).
const FORMS = {
  queryId: `/graphql?${new URLSearchParams({ queryId: `sha256:${HASH}` })}`,
  extensions: `/graphql?${new URLSearchParams({
    extensions: JSON.stringify({ persistedQuery: { version: 1, sha256Hash: HASH } })
  })}`
}

for (const responseCache of ['false', 'true']) {
  test(`RESPONSE_CACHE=${responseCache}: once its deployment is retired, an operation's old ETag is answered PERSISTED_QUERY_NOT_FOUND, not 304`, async (t) => {
    const { store, calls } = countingStore()
    t.teardown(() => store.close())
    const { url, token } = await listenTestApp(
      t,
      { PERSISTED_ONLY: 'true', RESPONSE_CACHE: responseCache, CACHE_MAX_AGE_SEC: '60', ...NO_SHEDDING },
      { store }
    )
    const admin = { authorization: `Bearer ${token('1', 'ADMIN')}` }
    const put = await fetch(`${url}/admin/app-deployments/ios/1.0.0`, {
      method: 'PUT', headers: { ...admin, 'content-type': 'application/json' }, body: JSON.stringify(MANIFEST)
    })
    t.equal(put.status, 201, 'published')

    const get = async (path: string, headers: Record<string, string> = {}) => {
      const response = await fetch(`${url}${path}`, { headers: { ...PREFLIGHT, ...headers } })
      const text = await response.text()
      return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : undefined }
    }

    const etags: Record<string, string> = {}
    for (const [form, path] of Object.entries(FORMS)) {
      const first = await get(path)
      t.equal(first.status, 200, `${form}: served`)
      t.equal(first.body.data.users.length, 5, form)
      etags[form] = first.headers.get('etag')!
      t.match(etags[form], /^"[0-9a-f]{16}"$/, `${form}: an ETag`)
      calls.length = 0
      const revalidated = await get(path, { 'if-none-match': etags[form] })
      t.equal(revalidated.status, 304, `${form}: while deployed, its ETag is answered 304`)
      if (responseCache === 'false') t.same(calls, [], `${form}: from the remembered ETag, nothing executed`)
    }

    const retire = await fetch(`${url}/admin/app-deployments/ios/1.0.0/retire`, { method: 'POST', headers: admin })
    t.equal(retire.status, 200, 'retired')

    for (const [form, path] of Object.entries(FORMS)) {
      const stale = await get(path, { 'if-none-match': etags[form]! })
      t.equal(stale.status, 200, `${form}: not a 304 (an application/json refusal of a processed request is 200)`)
      t.equal(stale.body?.errors?.[0]?.extensions?.code, 'PERSISTED_QUERY_NOT_FOUND', form)
      t.match(stale.body?.errors?.[0]?.message, /was retired with ios 1\.0\.0/, `${form}: the retired deployment named`)
      t.equal(stale.headers.get('etag'), null, `${form}: no ETag on the refusal`)
      t.equal(stale.headers.get('cache-control'), 'no-store', form)
    }
  })
}
