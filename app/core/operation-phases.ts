// The phases of a GraphQL operation's life, as instruments see them. Defined here, below both, so that the
// GraphQL engine (app/graphql/dependencies.ts) and the instruments in app/ (tracing.ts) share one definition
// without app/ importing the engine.
import type { ExecutionResult } from 'graphql'
import type { Caller } from './domain/context.ts'
import type { ReadSet } from './domain/read-tags.ts'

/** An admitted operation, as an instrument reads it. */
export interface AdmittedOperation {
  operation: { name: string | null; type: string }
  cost: { requested: number }
}

/** The phases of an operation's life the core runs: admission, then its execution or its subscription's start. */
export interface OperationPhases<Request, A extends AdmittedOperation> {
  admit (request: Request): Promise<A>
  /**
   * `reads`: where the request's store records what it reads (an answer the response cache will keep).
   * `as`: the caller the resolvers see, when not the admission's (an answer shared by every caller runs
   * as nobody: answer-scope.ts).
   */
  execute (admission: A, root?: unknown, reads?: ReadSet, as?: Caller | null): Promise<ExecutionResult>
  /**
   * The response cache's word on an admitted query: `hit` (answered from it: the operation ends here,
   * nothing executes) or `miss` (it executes next).
   */
  cached (admission: A, outcome: 'hit' | 'miss'): void
  subscribe (admission: A): Promise<AsyncIterable<unknown> | ExecutionResult>
}
