// What an operation is checked against, wherever it is checked: when the service plans and runs it, when
// `npm run app`, `schema:check` or `persisted:build` checks a manifest, and in the profile each instance
// records in the store, against which a publish is checked (app-deployments.ts). The configuration groups
// these settings by what they are (a document's shape, input caps, execution, budgets); a check needs them
// together, under the names the recorded profiles have always used, so that instances of the previous and
// the next version read each other's profiles during a rolling release.
import { budgets, document, execution, input, type Config } from '../core/config/index.ts'

/** The areas of the configuration the limits come from: what a command that checks operations loads. */
export const OPERATION_LIMIT_AREAS = [document, input, execution, budgets] as const

export function operationLimits (config: Pick<Config, 'document' | 'input' | 'execution' | 'budgets'>) {
  const { maxStringLength, maxListLength, maxPageSize } = config.input
  return {
    ...config.document,
    maxStringLength,
    maxListLength,
    maxPageSize,
    mutationCost: config.budgets.mutationCost,
    /** The most one operation may cost, by caller: a published operation must fit some caller's. */
    budgets: config.budgets.maxOperationCost,
    timeoutMs: config.execution.timeoutMs
  }
}

export type OperationLimits = ReturnType<typeof operationLimits>
