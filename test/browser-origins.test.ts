// A browser on another origin (Debian's headless chromium, driven by playwright-core): CORS_ORIGINS alone
// admits its WebSocket (the browser sends Origin) and its fetches with Apollo's client-awareness and W3C
// trace headers; a page on an origin not listed gets neither.
import { test } from 'tap'
import { createServer, type Server } from 'node:http'
import { listenTestApp } from './helpers/app.ts'
import { launchChromium } from './helpers/chromium.ts'

/** A page server on an origin of its own (127.0.0.1 on another port), serving an empty page. */
async function pageOrigin (t: { teardown (fn: () => unknown): void }): Promise<string> {
  const server: Server = createServer((_req, res) =>
    res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>app</title>')
  )
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  // The browser keeps its keep-alive connections to the page open until it closes: close them with the
  // server, or server.close() waits for their idle timeout (about 100 s here).
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  }))
  const address = server.address() as { port: number }
  return `http://127.0.0.1:${address.port}`
}

/** What the page observes: a graphql-transport-ws exchange over a browser WebSocket, and a CORS fetch. */
const inPage = async ({ api, token }: { api: string; token: string }) => {
  const ws = await new Promise<{ opened: boolean; answer?: unknown; closeCode?: number }>((resolve) => {
    const socket = new WebSocket(`${api.replace(/^http/, 'ws')}/graphql`, 'graphql-transport-ws')
    let opened = false
    socket.onopen = () => {
      opened = true
      socket.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${token}` } }))
    }
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data)
      if (message.type === 'connection_ack') {
        socket.send(
          JSON.stringify({ id: '1', type: 'subscribe', payload: { query: 'subscription { count(target: 2) }' } })
        )
      }
      if (message.type === 'next') { socket.close(1000); resolve({ opened, answer: message.payload }) }
    }
    socket.onclose = (event) => resolve({ opened, closeCode: event.code })
  })
  let fetched: unknown
  try {
    const response = await fetch(`${api}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${token}`,
        'apollographql-client-name': 'web',
        'apollographql-client-version': '1.2.3',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        tracestate: 'vendor=value',
        baggage: 'userId=alice'
      },
      body: JSON.stringify({ query: '{ user(id: "2") { name } }' })
    })
    fetched = await response.json()
  } catch (err) {
    fetched = String(err)
  }
  return { ws, fetched }
}

test('browser on another origin: CORS_ORIGINS admits its WebSocket and its traced, client-named fetches', async (t) => {
  const context = await launchChromium(t)
  if (!context) return
  const allowed = await pageOrigin(t)
  const other = await pageOrigin(t)
  // WS_ALLOWED_ORIGINS is left empty: CORS_ORIGINS is the one allowlist.
  const { url, token } = await listenTestApp(t, { CORS_ORIGINS: allowed })

  const page = context.pages()[0] ?? await context.newPage()
  const args = { api: url, token: token('2') }

  await page.goto(`${allowed}/`)
  const admitted = await page.evaluate(inPage, args)
  t.match(admitted.ws, { opened: true, answer: { data: { count: 0 } } }, 'a WebSocket from an origin in CORS_ORIGINS')
  t.match(
    admitted.fetched,
    { data: { user: { name: 'Ada Lovelace' } } },
    'a fetch with apollographql-client-* and trace headers passes the preflight'
  )

  await page.goto(`${other}/`)
  const refused = await page.evaluate(inPage, args)
  t.match(refused.ws, { opened: false }, 'a WebSocket from an origin not listed is refused at the upgrade')
  t.match(refused.fetched, /TypeError|Failed to fetch/, 'and its fetch is blocked by the browser')
})
