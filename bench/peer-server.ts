// What users would pick instead of this service, started the same way as the service and the
// baselines (`PEER=apollo|yoga node bench/peer-server.ts`, the same environment and store module): the
// same schema subset (User, user(id), users(limit)) served by Apollo Server 5 or graphql-yoga 5, each
// as its documentation shows for plain Node http, resolving with the same store statements as the
// service's loaders (usersByIds, listUsers).
//
// The peers do what a stock setup does and nothing more: no JWT, no field rules, no depth or cost
// limits, no rate limits, no persisted queries. Every difference in the service's favour is therefore
// measured against a peer doing less work.
//
// `PEER=apollo-cached|yoga-cached`: the same peer with its own response cache, set up as its
// documentation shows, in memory and shared by every caller, its entries living as long as the
// service's (the same setting, RESPONSE_CACHE_TTL_MS), and telling a hit apart so the benchmark can check
// it served one. `PEER=apollo-redis-cached|yoga-redis-cached`: the same caches on Redis (REDIS_URL), as a
// deployment of several instances would run them: Apollo's on a Keyv Redis store through its
// KeyvAdapter, Yoga's with @envelop/response-cache-redis; keys under REDIS_PREFIX.
//
// `PEER=node-soap`: what a partner team would pick for SOAP, node-soap's server (soap.listen on plain Node
// http), serving the service's own v1 contract (the WSDL it publishes, so the envelopes are the same) and
// answering GetUser from the same store statement the service's loader runs. No WS-Security at all: the
// header the benchmark sends is ignored, so the service is compared doing every check against a peer
// doing none.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { ApolloServer, HeaderMap } from '@apollo/server'
import { ApolloServerPluginCacheControl } from '@apollo/server/plugin/cacheControl'
import responseCachePlugin from '@apollo/server-plugin-response-cache'
import { createInMemoryCache, useResponseCache, type Cache } from '@graphql-yoga/plugin-response-cache'
import { KeyvAdapter } from '@apollo/utils.keyvadapter'
import { createRedisCache } from '@envelop/response-cache-redis'
import { createKeyv } from '@keyv/redis'
import { Redis } from 'ioredis'
import { createYoga, createSchema } from 'graphql-yoga'
import soap from 'soap'
import { loadConfig } from '../app/core/config/index.ts'
import { openStore } from '../app/core/store/index.ts'
import { SERVICE_VERSIONS } from '../app/soap/operations.ts'
import { buildWsdl } from '../app/soap/wsdl.ts'

const config = loadConfig()
const store = await openStore(config)

const typeDefs = /* GraphQL */ `
  type User { id: ID! name: String! email: String createdAt: String! }
  type Query { user(id: ID!): User, users(limit: Int = 20): [User!]! }
`
const resolvers = {
  Query: {
    user: async (_: unknown, { id }: { id: string }) => (await store.usersByIds([id]))[0] ?? null,
    users: (_: unknown, { limit }: { limit: number }) => store.listUsers(limit)
  }
}

type Handler = (request: IncomingMessage, response: ServerResponse) => void | Promise<void>

const CACHE_TTL_SEC = Math.round(config.responseCache.ttlMs / 1000)

type PeerCache = 'none' | 'memory' | 'redis'
type KeyvOfAdapter = ConstructorParameters<typeof KeyvAdapter<string>>[0]

/** The peers' Redis, with REDIS_PREFIX before every key they write. */
function redisUrl (): string {
  if (!config.redis.address || config.redis.address.cluster) throw new Error('a peer on Redis needs REDIS_URL (one server)')
  return config.redis.address.urls[0]!
}

const keyvOnRedis = () => createKeyv(redisUrl(), { namespace: config.redis.prefix })

async function apolloHandler (cache: PeerCache): Promise<Handler> {
  // Apollo caches only answers whose cache policy has a positive maxAge: every field gets one by default
  // (ApolloServerPluginCacheControl's defaultMaxAge). A hit carries an `age` header.
  const plugins = cache !== 'none'
    ? [ApolloServerPluginCacheControl({ defaultMaxAge: CACHE_TTL_SEC }), responseCachePlugin()]
    : []
  // On Redis: the server's cache (which the response-cache plugin uses) is a Keyv store, as Apollo's
  // documentation configures it for several instances.
  const apollo = new ApolloServer({
    typeDefs,
    resolvers,
    plugins,
    // (Cast: @keyv/redis and the adapter name the one keyv package through its two builds' type declarations.)
    ...(cache === 'redis' ? { cache: new KeyvAdapter(keyvOnRedis() as unknown as KeyvOfAdapter) } : {})
  })
  await apollo.start()
  // What Apollo's own startStandaloneServer does, as its integration guide documents
  // (executeHTTPGraphQLRequest), so that the benchmark's readiness route can sit beside it.
  return async (request, response) => {
    let raw = ''
    for await (const chunk of request) raw += chunk
    const headers = new HeaderMap()
    for (const [name, value] of Object.entries(request.headers)) if (typeof value === 'string') headers.set(name, value)
    const result = await apollo.executeHTTPGraphQLRequest({
      httpGraphQLRequest: { method: request.method!, headers, search: new URL(request.url!, 'http://peer').search, body: raw ? JSON.parse(raw) : undefined },
      context: async () => ({})
    })
    for (const [name, value] of result.headers) response.setHeader(name, value)
    response.statusCode = result.status ?? 200
    if (result.body.kind === 'complete') return void response.end(result.body.string)
    for await (const chunk of result.body.asyncIterator) response.write(chunk)
    response.end()
  }
}

function yogaHandler (cache: PeerCache): Handler {
  // Its in-memory LRU keeps 1000 answers by default: fewer than the users the benchmark rotates over,
  // which would make every read a miss. 100000 holds them (as the service's 64 MiB would). On Redis:
  // the store its documentation gives for several instances (ioredis, keys under REDIS_PREFIX).
  const store = cache === 'redis'
    ? createRedisCache({ redis: new Redis(redisUrl(), { keyPrefix: config.redis.prefix }) as never }) as Cache
    : createInMemoryCache({ max: 100_000 })
  const plugins = cache !== 'none'
    ? [
        useResponseCache({
          session: () => null, // one cache for every caller
          ttl: CACHE_TTL_SEC * 1000,
          // A hit answers extensions.responseCache.hit = true.
          includeExtensionMetadata: true,
          cache: store
        })
      ]
    : []
  const yoga = createYoga({ schema: createSchema({ typeDefs, resolvers }), graphiql: false, logging: false, plugins })
  return (request, response) => yoga(request, response)
}

/** node-soap serving v1's contract at its path; GetUser reads the user as the service's loader does. */
function listenNodeSoap (server: ReturnType<typeof createServer>): void {
  const version = SERVICE_VERSIONS[0]!
  const wsdl = buildWsdl(version, config.soap.namespaceBase, `http://${config.server.host}:${config.server.port}${version.path}`)
  const GetUser = async ({ id }: { id: string }) => {
    const user = (await store.usersByIds([String(id)]))[0]
    // node-soap answers a Fault for a thrown { Fault } object (its documented way), not for an Error.
    // eslint-disable-next-line no-throw-literal
    if (!user) throw { Fault: { faultcode: 'soap:Client', faultstring: 'User not found' } }
    return { user: { id: user.id, name: user.name, email: user.email } }
  }
  const port = { GetUser }
  soap.listen(server, {
    path: version.path,
    xml: wsdl,
    services: { [version.serviceName]: { [`${version.serviceName}Soap`]: port, [`${version.serviceName}Soap12`]: port } },
    suppressStack: true
  })
}

const PEERS = ['apollo', 'yoga', 'apollo-cached', 'yoga-cached', 'apollo-redis-cached', 'yoga-redis-cached', 'node-soap']
const peer = process.env.PEER ?? ''
if (!PEERS.includes(peer)) throw new Error(`PEER must be one of ${PEERS.join(', ')}`)
const cache: PeerCache = peer.endsWith('-redis-cached') ? 'redis' : peer.endsWith('-cached') ? 'memory' : 'none'
const handle = peer === 'node-soap' ? null : peer.startsWith('apollo') ? await apolloHandler(cache) : yogaHandler(cache)

const server = createServer((request, response) => {
  if (request.url === '/health/ready') return void response.end('{"status":"ready"}')
  if (handle) void handle(request, response)
})
if (peer === 'node-soap') listenNodeSoap(server)
const stop = () => server.close(() => { void store.close().then(() => process.exit(0), () => process.exit(1)) })
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
server.listen(config.server.port, config.server.host)
