// The benchmark's guarded baselines: the `rest` routes' work (the same store reads, the same JSON) behind
// every per-request protection the service's GraphQL routes pay, and no GraphQL. The process is composed
// from the service's own plugins, registered by app/app.ts's own functions (same order, same Fastify
// options, the same configuration loader), up to the rate limits; the GraphQL plugins and routes are not
// registered. Each route identifies its caller as the GraphQL routes do in routes/graphql/index.ts (JWT
// through the auth plugin, in the route's own onRequest hook, so the request budget appended after it
// counts the user) and spends the cost budget once, at the fixed price the service charged that GraphQL
// request in the probe (GUARDED_COST_USER, GUARDED_COST_LIST). So a guarded row minus its rest row is
// what the protections cost, and a GraphQL row against its guarded row is what GraphQL itself costs.
//
// The server and the protections are app/app.ts's own (createServer, registerProtections), so the rows
// cannot drift from the service. Not added: the error handler's GraphQL shape (a benchmark row fails on any
// error anyway).
import type { onRequestHookHandler } from 'fastify'
import { createServer, registerProtections } from '../app/app.ts'
import { loadConfig } from '../app/core/config/index.ts'
import { AppError } from '../app/core/errors.ts'
import healthRoutes from '../routes/health.ts'

const config = loadConfig()
const price = (name: string): number => {
  const value = Number(process.env[name])
  if (!Number.isInteger(value) || value < 1) { throw new Error(`${name} must be the cost the service charges for that request (a positive integer)`) }
  return value
}
const userCost = price('GUARDED_COST_USER')
const listCost = price('GUARDED_COST_LIST')
const JSON_TYPE = 'application/json; charset=utf-8'
const JSON_BODY = /^application\/json\s*(;|$)/i // routes/graphql/http-exchange.ts's test of a POST's Content-Type

// The service's own server and protections (app/app.ts), in its order; then only health and the plain routes.
const app = createServer(config)
await registerProtections(app, config)
await app.register(healthRoutes)

// What the GraphQL onRequest hooks check (routes/graphql/index.ts; requestRefusal in
// routes/graphql/http-exchange.ts) before the request budget: a JSON body for a POST,
// then who is calling.
const identify: onRequestHookHandler = (request, _reply, done) => {
  try {
    request.caller = app.authenticate(request.headers.authorization)
  } catch (err) {
    return done(err as AppError)
  }
  done()
}
const identifyPost: onRequestHookHandler = (request, reply, done) => {
  const type = request.headers['content-type']
  if (!type || !JSON_BODY.test(type)) { return done(new AppError('UNSUPPORTED_MEDIA_TYPE', 'Content-Type must be application/json')) }
  identify.call(app, request, reply, done)
}

async function userById (id: string) {
  const [row] = await app.store.usersByIds([id])
  return { data: { user: row ? { id: row.id, name: row.name, email: row.email } : null } }
}

// persisted-get's shape: GET with a USER token.
app.get<{ Params: { id: string } }>('/guarded/users/:id', { onRequest: identify }, async (request, reply) => {
  await app.budgets.chargeCost(request.caller, request.ip, userCost)
  return reply.type(JSON_TYPE).send(await userById(request.params.id))
})

// user-by-id's shape: POST with a USER token and the same JSON body ({ query, variables: { id } }; the query
// is not read).
app.post<{ Body: { variables?: { id?: unknown } } }>(
  '/guarded/user',
  { onRequest: identifyPost },
  async (request, reply) => {
    const id = request.body?.variables?.id
    if (typeof id !== 'string') throw new AppError('BAD_REQUEST', 'variables.id must be a string')
    await app.budgets.chargeCost(request.caller, request.ip, userCost)
    return reply.type(JSON_TYPE).send(await userById(id))
  }
)

// users-list's shape: an anonymous POST with the same JSON body ({ query }; not read).
app.post('/guarded/users', { onRequest: identifyPost }, async (request, reply) => {
  await app.budgets.chargeCost(request.caller, request.ip, listCost)
  const rows = await app.store.listUsers(20)
  return reply
    .type(JSON_TYPE)
    .send({ data: { users: rows.map(({ id, name, createdAt }) => ({ id, name, createdAt })) } })
})

process.once('SIGTERM', () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1)
  )
})
process.once('SIGINT', () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1)
  )
})

await app.listen({ host: config.server.host, port: config.server.port })
