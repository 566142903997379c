import type { FastifyRequest } from 'fastify'
import type { MercuriusContext } from 'mercurius'
import type { DomainContext } from '../domain/context.ts'

/** What an operation reports about its price (sent as `extensions.cost`). */
export interface CostReport {
  /** The operation's computed cost. */
  requested: number
  /** The most one operation may cost for this caller's class. */
  budget: number
  /** Cost units left in the caller's current rate-limit window, after this operation. */
  remaining: number
}

declare module 'mercurius' {
  interface MercuriusContext {
    domain: DomainContext
    operationName: string | null
    cost: CostReport | null
    request: FastifyRequest
  }
}

/** The per-request GraphQL context: ours (domain, operationName, cost, request) plus what Mercurius adds. */
export type GraphQLContext = MercuriusContext
