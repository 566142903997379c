// The GraphQL routes' hooks stay in their scope (their plugin is not wrapped by fastify-plugin): the
// WebSocket upgrade check and @fastify/websocket's own hooks never run on SOAP or health requests.
// Proven with a WebSocket handshake from an origin GraphQL refuses: /graphql refuses it (403, its
// upgrade check); to the SOAP contract or the health check, that check does not run: the upgrade
// is refused because no WebSocket is served there (400), and the connection ends, so the server closes.
import { connect } from 'node:net'
import { test } from 'tap'
import { listenTestApp } from '../helpers/app.ts'

/** Sends a WebSocket handshake for `path` on a raw socket; what came back within a second (status line and body). */
function handshake (url: string, path: string): Promise<{ status: number; text: string }> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let text = ''
    socket.on('data', (chunk) => { text += chunk })
    socket.on('error', reject)
    // The server may keep the connection open after answering (keep-alive): read what came, then close.
    setTimeout(() => {
      socket.destroy()
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text })
    }, 1000)
    socket.write(
      `GET ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
      'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n' +
      'Sec-WebSocket-Protocol: graphql-transport-ws\r\nOrigin: https://elsewhere.example\r\n\r\n'
    )
  })
}

test('the GraphQL upgrade check runs on its own route only, not on SOAP or health requests', async (t) => {
  const { url } = await listenTestApp(t, { CORS_ORIGINS: 'https://app.example' })
  const graphql = await handshake(url, '/graphql')
  t.equal(graphql.status, 403, '/graphql refuses the origin')
  t.match(graphql.text, /WebSocket connections from origin https:\/\/elsewhere\.example are not allowed/)

  for (const path of ['/v1/UserService?wsdl', '/health/live']) {
    const answer = await handshake(url, path)
    t.equal(answer.status, 400, `${path}: no WebSocket here`)
    t.match(answer.text, /WebSocket connections are served on \/graphql only/)
    t.notMatch(answer.text, /from origin/, `${path}: the GraphQL upgrade check did not run`)
  }
  // A test's teardown closes the app: it would hang on a connection left open.
})
