// A plain GET that merely carries `Upgrade: websocket` (no handshake took place) is a GET like any
// other: its answer carries the HTTP cache headers of any persisted GET.
import { test } from 'tap'
import { request } from 'node:http'
import { listenTestApp } from '../helpers/app.ts'
import { MANIFEST_FILE, persistedGetUrl, queryIdOf } from './helpers.ts'

function get (
  url: string,
  headers: Record<string, string>
): Promise<{ status: number; headers: Record<string, unknown>; body: any }> {
  return new Promise((resolve, reject) => {
    // No `Connection: Upgrade`: Node serves it as a plain request, as a proxy or a page could send it.
    const req = request(url, { headers }, (response) => {
      let body = ''
      response.on('data', (chunk: Buffer) => {
        body += chunk
      })
      response.on('end', () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body: body ? JSON.parse(body) : null })
      )
    })
    req.on('error', reject)
    req.end()
  })
}

test('a GET with an Upgrade header but no handshake is answered as any GET, with Cache-Control', async (t) => {
  const { url } = await listenTestApp(t, { PERSISTED_MANIFEST: MANIFEST_FILE, PERSISTED_ONLY: 'true' })
  const address = persistedGetUrl(url, queryIdOf('UserById'), { id: '2' })
  const ok = await get(address, { upgrade: 'websocket' })
  t.equal(ok.status, 200)
  t.equal(ok.body.data.user.name, 'Ada Lovelace')
  t.match(ok.headers['cache-control'], /max-age=/, 'the cache headers of any persisted GET')
  t.ok(ok.headers.etag)
})
