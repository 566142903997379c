// What the room's index (index.ts) hands its carriers (HTTP, WebSocket, SSE): the ports and the core
// built over them, in one value.
import type { GraphQLSchema } from 'graphql'
import type { FormatOptions } from '../../app/error-format.ts'
import type { Pipeline } from './pipeline.ts'
import type { GraphQLPorts } from './ports.ts'

/** What the room's index hands its Fastify carriers (HTTP, WebSocket, SSE): the ports and the core built over them. */
export interface RoomCore {
  ports: GraphQLPorts
  /** The executable schema (built by Mercurius, with mercurius-auth's @auth wrappers). */
  schema (): GraphQLSchema
  /** Every GraphQL operation, whatever its transport, is admitted and run through it. */
  pipeline: Pipeline
  /** How errors are shaped for callers (no internals in production), and where internal ones are logged. */
  errorOptions: FormatOptions
}
