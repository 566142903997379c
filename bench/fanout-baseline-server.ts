// The fan-out's physical reference (`ws-broadcast`): a bare node:http + `ws` process (no Fastify, no
// GraphQL, no auth, no store) that speaks just enough graphql-transport-ws for the bench's graphql-ws
// clients (connection_init → connection_ack, subscribe, ping → pong, complete), so the client side costs
// the same as against the service. Each POST /graphql (the bench's postMessage request) builds one `next`
// message per subscription id (the bench gives every client the same id, so one in practice) from
// FANOUT_SAMPLE, a `next` payload the service delivered, with the posted content in place of its content,
// and writes those same bytes to every subscriber: what delivering a message of that size costs on this
// machine, the ceiling for the service's fan-out.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { WebSocketServer, type WebSocket } from 'ws'

const PROTOCOL = 'graphql-transport-ws'
interface Sample { data: { messageAdded: { content: string } & Record<string, unknown> } }
const sample = JSON.parse(
  process.env.FANOUT_SAMPLE ?? '{"data":{"messageAdded":{"id":"0","content":"","author":{"name":"Bench User"}}}}'
) as Sample

/** Subscribers by subscription id (the bench's clients all use the same one). */
const subscribers = new Map<string, Set<WebSocket>>()
let posted = 0
/** A Buffer goes out as a binary frame unless told otherwise; graphql-ws clients read text frames only. */
const TEXT = { binary: false }

const wss = new WebSocketServer({
  noServer: true,
  handleProtocols: (offered) => (offered.has(PROTOCOL) ? PROTOCOL : false)
})
wss.on('connection', (socket) => {
  const mine: string[] = []
  socket.on('message', (raw) => {
    const message = JSON.parse(String(raw)) as { type: string; id?: string }
    if (message.type === 'connection_init') socket.send('{"type":"connection_ack"}')
    else if (message.type === 'ping') socket.send('{"type":"pong"}')
    else if (message.type === 'subscribe' && message.id !== undefined) {
      let set = subscribers.get(message.id)
      if (!set) subscribers.set(message.id, set = new Set())
      set.add(socket)
      mine.push(message.id)
    } else if (message.type === 'complete' && message.id !== undefined) subscribers.get(message.id)?.delete(socket)
  })
  socket.on('close', () => { for (const id of mine) subscribers.get(id)?.delete(socket) })
})

function readBody (request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => resolve(Buffer.concat(chunks).toString()))
    request.on('error', reject)
  })
}

async function handle (request: IncomingMessage, response: ServerResponse): Promise<void> {
  if (request.method === 'GET' && request.url === '/health/ready') {
    response.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ready"}')
    return
  }
  if (request.method !== 'POST' || request.url !== '/graphql') {
    response.writeHead(404).end()
    return
  }
  const body = JSON.parse(await readBody(request)) as { variables: { content: string } }
  const id = String(++posted)
  const payload = {
    ...sample,
    data: { messageAdded: { ...sample.data.messageAdded, content: body.variables.content } }
  }
  for (const [subscriptionId, sockets] of subscribers) {
    const bytes = Buffer.from(JSON.stringify({ id: subscriptionId, type: 'next', payload }))
    for (const socket of sockets) socket.send(bytes, TEXT)
  }
  response
    .writeHead(200, { 'content-type': 'application/json; charset=utf-8' })
    .end(`{"data":{"postMessage":{"id":"${id}"}}}`)
}

const server = createServer((request, response) => {
  handle(request, response).catch((err: Error) =>
    response.writeHead(400).end(JSON.stringify({ errors: [{ message: err.message }] }))
  )
})
server.on('upgrade', (request, socket, head) => {
  if (request.url !== '/graphql') return socket.destroy()
  wss.handleUpgrade(request, socket, head, (ws) => wss.emit('connection', ws, request))
})

const stop = () => {
  for (const client of wss.clients) client.terminate()
  server.close(() => process.exit(0))
}
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? '127.0.0.1')
