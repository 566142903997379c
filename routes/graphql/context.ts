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

/** The GraphQL context every resolver receives: built per operation by the pipeline. */
export interface GraphQLContext {
  domain: DomainContext
  operationName: string | null
  cost: CostReport
}

// Mercurius types resolvers by its context: ours is what the pipeline passes to every resolver.
declare module 'mercurius' {
  interface MercuriusContext {
    domain: DomainContext
    operationName: string | null
    cost: CostReport
  }
}
