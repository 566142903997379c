// What the GraphQL engine needs from the rest of the service, handed to it explicitly (as SOAP's
// `Admission` is): the GraphQL routes (routes/graphql/index.ts) fill these in from the cross-cutting
// plugins once, at start, and every engine module receives what it uses from here, never from a
// Fastify decorator. The engine defines these interfaces, and this file imports none of the engine's
// modules: the dependencies serve the engine, never the reverse.
import type { MQEmitter } from 'mqemitter'
import type { ResponseCache } from '../core/cache/response-cache.ts'
import type { Config } from '../core/config/index.ts'
import type { Caller, DomainDeps } from '../core/domain/context.ts'
import type { BudgetSpending } from '../core/limits/cost-report.ts'
import type { AdmittedOperation, OperationPhases } from '../core/operation-phases.ts'

export type { AdmittedOperation, OperationPhases }

/** Where the engine reports what it cannot answer itself (internal errors, a Redis outage). */
export interface EngineLogger {
  error (details: object, message: string): void
  warn (details: object, message: string): void
  info (details: object, message: string): void
}

export interface GraphQLDependencies {
  /** The budgets every GraphQL transport spends through (plugins/rate-limit.ts implements them). */
  budgets: BudgetSpending
  /**
   * Resolves an `Authorization` value ("Bearer <token>") to a
   * caller; null when absent; throws UNAUTHENTICATED when invalid.
   */
  authenticate (authorization: string | undefined): Caller | null
  /** The domain's dependencies (store, events, caps, cursor key), built once for every transport (app/app.ts). */
  domain: DomainDeps
  /** Pub/sub the GraphQL subscriptions listen on, and the topic of a chat room's events. */
  emitter: MQEmitter
  roomTopic (roomId: string): string
  /** The topic of `userChanged` events: a user's role written or the user deleted, on any instance. */
  userChangesTopic: string
  config: Config
  log: EngineLogger
  /** Where the core reports its work at named phases (tracing); nothing when no instrument is on. */
  instrumentation: Instrumentation
  /**
   * The shared cache of query answers (app/core/cache/), built by the composition root, which also makes
   * every domain write invalidate it; null when RESPONSE_CACHE is off.
   */
  responseCache: ResponseCache | null
}

/**
 * Instruments the core calls at named phases (app/core/tracing.ts implements `phases`: a span per operation,
 * from its admission to the end of its execution). The core runs its phases through them; it neither
 * knows nor copies what they do.
 */
export interface Instrumentation {
  /** Wraps the operation phases (admit, execute, subscribe) of every transport. */
  phases?<Request, A extends AdmittedOperation>(phases: OperationPhases<Request, A>): OperationPhases<Request, A>
  /**
   * An HTTP exchange was answered (told once the response is sent): the answer, or a batch's answers,
   * as sent; the operation it executed, when one was admitted; the parameters it was sent with.
   */
  answered?(
    answer: unknown,
    executed: { name: string | null; type: string } | null,
    params: { query?: unknown; operationName?: unknown } | null
  ): void
}
