// The benchmark's guarded baselines: the `rest` routes' work (the same store reads, the same JSON) behind
// every per-request protection the service's GraphQL routes pay, and no GraphQL. The process is composed
// from the service's own plugins, registered as app/app.ts registers them (same order, same Fastify
// options, the same configuration loader), up to the rate limits; the GraphQL plugins and routes are not
// registered. Each route identifies its caller as routes/graphql.ts does (JWT through the auth plugin,
// in the route's own onRequest hook, so the request budget appended after it counts the user) and spends
// the cost budget once, at the fixed price the service charged that GraphQL request in the probe
// (GUARDED_COST_USER, GUARDED_COST_LIST). So a guarded row minus its rest row is what the protections
// cost, and a GraphQL row against its guarded row is what GraphQL itself costs.
//
// Copied from app/app.ts (keep in step): the Fastify options, the connection guards, the access log, the
// request-id and closing hooks, the plugin order. Not copied: the client-error handler (malformed HTTP
// only) and the error handler's GraphQL shape (a benchmark row fails on any error anyway).
import Fastify, { type onRequestHookHandler } from 'fastify'
import { loadConfig } from '../app/config.ts'
import { accessLog, serverLogging } from '../app/logging.ts'
import { limitConnectionsPerPeer, requestIdFrom, trustedPeers } from '../app/peers.ts'
import { connectionCaps, guardListener } from '../app/descriptors.ts'
import { AppError } from '../app/errors.ts'
import configPlugin from '../plugins/config.ts'
import tracingPlugin from '../plugins/tracing.ts'
import corsPlugin from '../plugins/cors.ts'
import storePlugin from '../plugins/store.ts'
import metricsPlugin from '../plugins/metrics.ts'
import underPressurePlugin from '../plugins/under-pressure.ts'
import gracefulDrainPlugin from '../plugins/graceful-drain.ts'
import eventsPlugin from '../plugins/events.ts'
import redisPlugin from '../plugins/redis.ts'
import authPlugin from '../plugins/auth.ts'
import rateLimitPlugin from '../plugins/rate-limit.ts'
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
const JSON_BODY = /^application\/json\s*(;|$)/i // routes/graphql.ts's test of a POST's Content-Type

const trustedPeer = trustedPeers(config.trustProxy)
const app = Fastify({
  ...serverLogging(config),
  bodyLimit: config.bodyLimitBytes,
  trustProxy: config.trustProxy.length > 0 ? config.trustProxy : false,
  requestIdHeader: false,
  genReqId: requestIdFrom(trustedPeer),
  requestTimeout: config.requestTimeoutMs,
  connectionTimeout: config.connectionTimeoutMs,
  http: {
    requestTimeout: config.requestTimeoutMs,
    connectionsCheckingInterval:
      config.requestTimeoutMs > 0 ? Math.min(30_000, Math.max(100, config.requestTimeoutMs / 4)) : 30_000
  },
  return503OnClosing: false,
  routerOptions: { maxParamLength: 200 }
})
limitConnectionsPerPeer(app.server, config.maxConnectionsPerIp, trustedPeer)
guardListener(app.server, connectionCaps(config.maxConnections, (config.metricsPort ?? 0) > 0).api, app.log, 'api')
accessLog(app)
app.addHook('onRequest', (request, reply, done) => {
  reply.header('x-request-id', request.id)
  done()
})
let closing = false
app.addHook('preClose', async () => {
  closing = true
})
app.addHook('onSend', (_request, reply, payload, done) => {
  if (closing) reply.header('connection', 'close')
  done(null, payload)
})

await app.register(configPlugin, { config })
await app.register(tracingPlugin)
await app.register(corsPlugin)
await app.register(metricsPlugin)
await app.register(underPressurePlugin)
await app.register(gracefulDrainPlugin)
await app.register(storePlugin)
await app.register(redisPlugin)
await app.register(eventsPlugin)
await app.register(authPlugin)
await app.register(rateLimitPlugin)
await app.register(healthRoutes)

// What routes/graphql/http.ts's onRequest hooks check before the request budget: a JSON body for a POST,
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
  await app.chargeCost(request.caller, request.ip, userCost)
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
    await app.chargeCost(request.caller, request.ip, userCost)
    return reply.type(JSON_TYPE).send(await userById(id))
  }
)

// users-list's shape: an anonymous POST with the same JSON body ({ query }; not read).
app.post('/guarded/users', { onRequest: identifyPost }, async (request, reply) => {
  await app.chargeCost(request.caller, request.ip, listCost)
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

await app.listen({ host: config.host, port: config.port })
