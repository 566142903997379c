// A plain GET that merely carries `Upgrade: websocket` (no handshake took place) is a GET like any
// other: the preflight-header rule (CSRF) and the HTTP cache headers apply to it.
import { test } from 'tap'
import { request } from 'node:http'
import { listenTestApp } from '../helpers/app.ts'
import { MANIFEST_FILE, persistedGetUrl, queryIdOf } from './helpers.ts'

function get (url: string, headers: Record<string, string>): Promise<{ status: number; headers: Record<string, unknown>; body: any }> {
  return new Promise((resolve, reject) => {
    // No `Connection: Upgrade`: Node serves it as a plain request, as a proxy or a page could send it.
    const req = request(url, { headers }, (response) => {
      let body = ''
      response.on('data', (chunk: Buffer) => { body += chunk })
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: body ? JSON.parse(body) : null }))
    })
    req.on('error', reject)
    req.end()
  })
}

test('a GET with an Upgrade header but no handshake obeys the preflight rule and carries Cache-Control', async (t) => {
  const { url } = await listenTestApp(t, { PERSISTED_MANIFEST: MANIFEST_FILE, PERSISTED_ONLY: 'true' })
  const address = persistedGetUrl(url, queryIdOf('UserById'), { id: '2' })
  const bare = await get(address, { upgrade: 'websocket' })
  t.equal(bare.status, 400, 'no preflight-forcing header: refused as any GET')
  t.match(bare.body.errors, [{ message: /must carry a header that forces a CORS preflight/, extensions: { code: 'BAD_REQUEST' } }])
  const ok = await get(address, { upgrade: 'websocket', 'apollo-require-preflight': 'true' })
  t.equal(ok.status, 200)
  t.equal(ok.body.data.user.name, 'Ada Lovelace')
  t.match(ok.headers['cache-control'], /max-age=/, 'the cache headers of any persisted GET')
  t.ok(ok.headers.etag)
})
