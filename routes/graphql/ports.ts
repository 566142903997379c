// What the GraphQL room needs from the rest of the service, handed to its core explicitly (as SOAP's
// `Admission` is): the room's index (routes/graphql/index.ts) fills these in from the cross-cutting
// plugins once, at start, and every core module receives what it uses from here, never from a
// Fastify decorator.
import type { GraphQLSchema } from 'graphql'
import type { MQEmitter } from 'mqemitter'
import type { Config } from '../../app/config.ts'
import type { Caller, DomainDeps } from '../../app/domain/context.ts'
import type { CostReport } from '../../app/limits/cost-report.ts'
import type { FormatOptions } from '../../app/error-format.ts'
import type { SpendCostUnits } from './event-pricing.ts'
import type { Pipeline } from './pipeline.ts'

/** The budgets every GraphQL transport spends through (plugins/rate-limit.ts implements them). */
export interface Budgets {
  /** Spends one request from the caller's request budget; throws RATE_LIMITED when over. */
  spendRequest (caller: Caller | null, ip: string): Promise<void>
  /**
   * Refuses an operation over the caller's budget, spends its cost units
   * (RATE_LIMITED when exhausted): the one call every transport makes.
   */
  chargeCost (caller: Caller | null, ip: string, cost: number): CostReport | Promise<CostReport>
  /** Spends cost units of the caller's window: what is left, and when the window resets (subscription events). */
  spendCostUnits: SpendCostUnits
}

/** Where the room reports what it cannot answer itself (internal errors, a Redis outage). */
export interface RoomLogger {
  error (details: object, message: string): void
  warn (details: object, message: string): void
  info (details: object, message: string): void
}

export interface GraphQLPorts {
  budgets: Budgets
  /**
   * Resolves an `Authorization` value ("Bearer <token>") to a
   * caller; null when absent; throws UNAUTHENTICATED when invalid.
   */
  authenticate (authorization: string | undefined): Caller | null
  /** The domain's dependencies (store, events, caps, cursor key), built once for every transport (app/app.ts). */
  domain: DomainDeps
  /** Pub/sub the room's subscriptions listen on, and the topic of a chat room's events. */
  emitter: MQEmitter
  roomTopic (roomId: string): string
  /** The topic of `userChanged` events: a user's role written or the user deleted, on any instance. */
  userChangesTopic: string
  config: Config
  log: RoomLogger
}

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
