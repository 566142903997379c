// What users would pick instead of this service, started the same way as the service and the
// baselines (`PEER=apollo|yoga node bench/peer-server.ts`, the same environment and store module): the
// same schema subset (User, user(id), users(limit)) served by Apollo Server 5 or graphql-yoga 5, each
// as its documentation shows for plain Node http, resolving with the same store statements as the
// service's loaders (usersByIds, listUsers).
//
// The peers do what a stock setup does and nothing more: no JWT, no field rules, no depth or cost
// limits, no rate limits, no persisted queries. Every difference in the service's favour is therefore
// measured against a peer doing less work.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { ApolloServer, HeaderMap } from '@apollo/server'
import { createYoga, createSchema } from 'graphql-yoga'
import { loadConfig } from '../app/config.ts'
import { openStore } from '../app/store/index.ts'

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

async function apolloHandler (): Promise<Handler> {
  const apollo = new ApolloServer({ typeDefs, resolvers })
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

function yogaHandler (): Handler {
  const yoga = createYoga({ schema: createSchema({ typeDefs, resolvers }), graphiql: false, logging: false })
  return (request, response) => yoga(request, response)
}

const peer = process.env.PEER
if (peer !== 'apollo' && peer !== 'yoga') throw new Error('PEER must be apollo or yoga')
const handle = peer === 'apollo' ? await apolloHandler() : yogaHandler()

const server = createServer((request, response) => {
  if (request.url === '/health/ready') return void response.end('{"status":"ready"}')
  void handle(request, response)
})
const stop = () => server.close(() => { void store.close().then(() => process.exit(0), () => process.exit(1)) })
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
server.listen(config.port, config.host)
