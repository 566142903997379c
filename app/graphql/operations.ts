// What the streaming carriers (WebSocket in both subprotocols, server-sent events) run: an operation
// admitted by the pipeline, then either one answer (a query or mutation) or a stream of answers (a
// subscription), every answer in the interface's shape and held to the answer cap. A refusal throws,
// before anything has started; a subscription whose source stream cannot start (a bad room id, a
// count target over the cap) is a refusal too.
import type { ExecutionResult } from 'graphql'
import { AppError } from '../errors.ts'
import { formatError, formatResult, type FormatOptions, type GraphQLAnswer } from './error-format.ts'
import { mapStream, type OperationRequest, type Pipeline } from './pipeline.ts'
import type { OperationPlan } from './plan.ts'

export interface StartedOperation {
  operation: OperationPlan
  /** One answer, or the stream of a subscription's answers (`return()` ends it and releases its source). */
  answer: GraphQLAnswer | AsyncIterableIterator<GraphQLAnswer>
}

export type StartOperation = (request: OperationRequest) => Promise<StartedOperation>

function isAsyncIterator<T> (value: unknown): value is AsyncIterableIterator<T> {
  return typeof (value as AsyncIterator<T> | null)?.next === 'function'
}

export function operationStarter (pipeline: () => Pipeline, format: () => FormatOptions, maxResponseBytes: number): StartOperation {
  /** An answer as sent, or the refusal that replaces one over the cap (measured once here; the carrier serialises it again). */
  const bounded = (result: ExecutionResult): GraphQLAnswer => {
    const answer = formatResult(result, format())
    if (JSON.stringify(answer).length <= maxResponseBytes) return answer
    const error = new AppError('RESPONSE_TOO_LARGE', `The answer is larger than ${maxResponseBytes} bytes: ask for fewer fields or smaller pages`, { maxResponseBytes })
    return { errors: [formatError(error, format())] }
  }
  return async (request) => {
    const admission = await pipeline().admit(request)
    const { operation } = admission
    if (operation.type !== 'subscription') return { operation, answer: bounded(await pipeline().execute(admission)) }
    const stream = await pipeline().subscribe(admission)
    // graphql-jit answers a source stream that failed to start with its errors, as graphql-js does.
    if (!isAsyncIterator<ExecutionResult>(stream)) throw Object.assign(new Error('The subscription could not start'), { errors: stream.errors ?? [] })
    return { operation, answer: mapStream(stream, bounded) }
  }
}
