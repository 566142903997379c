// The benchmark's two baselines, plain Fastify routes started the same way as the service
// (`node bench/baseline-server.ts`, the same environment, the same logger settings, the same store module):
// - `limit`: prebuilt bytes identical to the users-list scenario's response (LIMIT_BODY_FILE): the HTTP
//   ceiling of this machine;
// - `rest`: hand-written routes doing the same store reads as the GraphQL scenarios and returning the
//   same `data` JSON: what the work costs without GraphQL (no JWT, no cost analysis, no execution).
import { readFileSync } from 'node:fs'
import Fastify from 'fastify'
import { accessLog, logDestination, serverLogging } from '../plugins/logging.ts'
import { loadConfig } from '../app/core/config/index.ts'
import { openStore } from '../app/core/store/index.ts'

const config = loadConfig()
const store = await openStore(config)
const limitBody = process.env.LIMIT_BODY_FILE ? readFileSync(process.env.LIMIT_BODY_FILE) : Buffer.from('{}')
const JSON_TYPE = 'application/json; charset=utf-8'

const destination = logDestination()
const app = Fastify({
  ...serverLogging(config, {}, destination),
  bodyLimit: config.server.bodyLimitBytes
})
accessLog(app, destination, false)
app.addHook('onClose', () => store.close())

app.get('/health/ready', async () => {
  await store.ping()
  return { status: 'ready' }
})

app.get('/limit', async (_request, reply) => reply.type(JSON_TYPE).send(limitBody))

app.get<{ Querystring: { limit?: string } }>('/rest/users', async (request, reply) => {
  const rows = await store.listUsers(Number(request.query.limit ?? 20))
  return reply
    .type(JSON_TYPE)
    .send({ data: { users: rows.map(({ id, name, createdAt }) => ({ id, name, createdAt })) } })
})

app.get<{ Params: { id: string } }>('/rest/users/:id', async (request, reply) => {
  const [row] = await store.usersByIds([request.params.id])
  return reply.type(JSON_TYPE).send({ data: { user: row ? { id: row.id, name: row.name, email: row.email } : null } })
})

app.get<{ Params: { roomId: string }, Querystring: { limit?: string } }>('/rest/rooms/:roomId/messages', async (request, reply) => {
  const messages = await store.messagesByRoom(request.params.roomId, Number(request.query.limit ?? 20))
  const authors = new Map((await store.usersByIds([...new Set(messages.map((m) => m.authorId))])).map((u) => [u.id, u]))
  return reply.type(JSON_TYPE).send({
    data: { messages: messages.map((m) => ({ content: m.content, author: { name: authors.get(m.authorId)!.name } })) }
  })
})

app.post<{ Body: { name: string, email: string } }>('/rest/users', async (request, reply) => {
  const { id, name, email, createdAt } = await store.createUser({ name: request.body.name, email: request.body.email })
  return reply.type(JSON_TYPE).send({ data: { createUser: { id, name, email, createdAt } } })
})

process.once('SIGTERM', () => { app.close().then(() => process.exit(0), () => process.exit(1)) })
process.once('SIGINT', () => { app.close().then(() => process.exit(0), () => process.exit(1)) })

await app.listen({ host: config.server.host, port: config.server.port })
