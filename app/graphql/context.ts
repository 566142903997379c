import type { DomainContext } from '../core/domain/context.ts'
import type { CostReport } from '../core/limits/cost-report.ts'

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
