// The admission pipeline: the one way a GraphQL operation gets to run, whatever carries it (HTTP
// POST, persisted GET, WebSocket in either subprotocol, server-sent events).
//
//   request → document text (persisted id, APQ hash or ad-hoc query; persisted.ts)
//           → plan (made once per text and cached by bytes: plan.ts)
//           → operation chosen by operationName, allowed on this transport
//           → introspection rule (by caller) → variables coerced (variables.ts or graphql-js) and capped
//           → cost = the plan's function of the variables, against the caller's budget
//           → cost units spent (one call, every transport) → execution (graphql-jit) under a deadline
//
// The request budget is spent before any of this: by the route hook for HTTP requests (SSE included),
// by `spendRequest` here for each WebSocket operation. A refused operation has spent its request.
//
// One engine runs everything: graphql-jit's compilation of the chosen operation, made on its first
// admitted execution and kept with the plan. Mercurius builds the schema (resolvers, mercurius-auth's
// @auth wrappers) and is not on the request path.
import {
  GraphQLError,
  createSourceEventStream,
  getVariableValues,
  type ExecutionResult,
  type GraphQLSchema
} from 'graphql'
import type { CompiledQuery } from 'graphql-jit'
import { AppError, Messages } from '../core/errors.ts'
import { assertWithinCaps } from '../core/domain/input.ts'
import { createDomainContext, withinDeadline, type Caller, type DomainDeps } from '../core/domain/context.ts'
import type { ReadSet } from '../core/domain/read-tags.ts'
import type { BudgetSpending, CostReport } from '../core/limits/cost-report.ts'
import type { GraphQLContext } from './context.ts'
import type { Instrumentation, OperationPhases } from './dependencies.ts'
import { ValidationFailed, type DocumentPlan, type OperationPlan } from './plan.ts'
import type { Plans } from './plans.ts'
import type { OperationLimits } from './operation-limits.ts'
import {
  PersistedMessages,
  hasPersistedQueryExtension,
  persistedIdOf,
  type ClientApp,
  type GraphQLRequestParams,
  type PersistedOperation,
  type PersistedQueries
} from './persisted.ts'
import { scalarCoercion, type ScalarCoercion } from './variables.ts'

/** What carries the operation: decides which operation types it may run. */
export type Transport = 'GET' | 'POST' | 'WS' | 'SSE'

export interface OperationRequest {
  params: GraphQLRequestParams
  transport: Transport
  caller: Caller | null
  ip: string
  /** The app the request says it comes from (its client name and version headers): its deployment's usage. */
  client?: ClientApp | null
  /**
   * Whether an HTTP request (whose route hook spent the request budget) carries this operation alone.
   * Default: yes, except on a WebSocket; false for the operations of a batch after its first.
   */
  paidByRequest?: boolean
  /**
   * Told once the operation is priced, while its charge is still on its way to a shared counter (Redis):
   * a read that may overlap the payment starts here, so both go out in one write and come back in one
   * read (the response cache's lookup: cached-answers.ts). Not told when the charge is answered at once
   * (in-process counters) or refused before it leaves. What it starts is used only once the operation
   * is admitted, and must not be what the budget pays for (execution).
   */
  onPriced?: (priced: Priced) => void
}

/** An operation priced and checked, its charge not yet answered. */
export type Priced = Pick<Admission, 'caller' | 'operation' | 'variables'>

/** An operation that passed every check and has paid: ready to execute or subscribe. */
export interface Admission {
  caller: Caller | null
  operation: OperationPlan
  compiled: CompiledQuery
  variables: Record<string, unknown>
  cost: CostReport
}

/** What admission needs: the schema and limits, the plans, the persisted registry, the caller's budgets. */
export interface AdmissionOptions extends Pick<BudgetSpending, 'spendRequest' | 'chargeCost'> {
  schema (): GraphQLSchema
  limits: OperationLimits
  introspection: boolean
  plans: Pick<Plans, 'plan' | 'compiled'>
  persisted: Pick<PersistedQueries, 'resolve' | 'countUse'>
}

/** What execution needs: the schema, the deadline, the domain's dependencies (a fresh context per operation). */
export interface ExecutionOptions {
  schema (): GraphQLSchema
  timeoutMs: number
  domain: DomainDeps
}

/** Admission: every check and charge an operation passes before it may run, and what a carrier may ask first. */
export interface OperationAdmission {
  /** Checks and prices an operation, spends its cost units; throws (having spent nothing else) when refused. */
  admit (request: OperationRequest): Promise<Admission>
  /**
   * The type of the operation a request names, when its document resolves and plans (both cached);
   * undefined otherwise (admission then reports why). Checks nothing: it lets a carrier pick its answer's form.
   */
  operationType (params: GraphQLRequestParams, caller: Caller | null): Promise<string | undefined>
  /**
   * Whether a persisted GET's document resolves as admission resolves it: to a registered operation
   * the persisted registry still serves (not one retired with its app deployment), its plan cached.
   * Asked before a remembered ETag answers 304 (http-exchange.ts). Checks, charges and counts nothing
   * else (a deployment's usage counts admitted requests, and the 304 admits none).
   */
  resolvesRegistered (params: GraphQLRequestParams, caller: Caller | null): Promise<boolean>
}

/** Execution: what runs an admitted operation (the phases after admission, as the instruments see them). */
export interface OperationExecution {
  /**
   * Runs an admitted query or mutation (or one event of a subscription, its root value) under the
   * execution deadline, with a fresh domain context (fresh loaders): its result, or "Query timeout"
   * when the deadline passes first (the domain then refuses any further write of that operation).
   * `as`: the caller the resolvers see, when not the admission's (OperationPhases.execute).
   */
  execute (admission: Admission, root?: unknown, reads?: ReadSet, as?: Caller | null): Promise<ExecutionResult>
  /** Tells the instruments the response cache's word on an admitted query (OperationPhases.cached). */
  cached (admission: Admission, outcome: 'hit' | 'miss'): void
  /**
   * Starts an admitted subscription's source: the stream of its events (each then answered by
   * `execute(admission, event)`), or one result when it failed to start.
   */
  subscribe (admission: Admission): Promise<AsyncIterable<unknown> | ExecutionResult>
}

/** Admission and execution together, their phases wrapped once by the instruments: what every carrier runs. */
export interface Pipeline {
  admission: OperationAdmission
  execution: OperationExecution
}

const ALLOWED: Record<Transport, ReadonlySet<string>> = {
  GET: new Set(['query']),
  POST: new Set(['query', 'mutation']),
  WS: new Set(['query', 'mutation', 'subscription']),
  SSE: new Set(['query', 'mutation', 'subscription'])
}

const GET_PERSISTED_ONLY =
  'GET accepts persisted queries only (an id, or extensions.persistedQuery with the hash alone); send other operations by POST, and register a text under its hash (APQ) by POST'

function refuseOnTransport (type: string, transport: Transport): never {
  if (transport === 'GET') {
    throw new AppError('METHOD_NOT_ALLOWED', 'Only queries can be sent by GET; send mutations by POST')
  }
  throw new AppError(
    'BAD_REQUEST',
    `Subscriptions are served over WebSocket (graphql-transport-ws) or server-sent events (POST with Accept: text/event-stream), not as a plain ${transport} ${type}`
  )
}

/** The operation a request names: by operationName, or the only one. */
function selectOperation (plan: DocumentPlan, operationName: string | null): OperationPlan {
  const { operations } = plan
  if (operations.length === 0) throw new AppError('GRAPHQL_VALIDATION_FAILED', 'The document contains no operation')
  if (operationName !== null) {
    const named = operations.find((op) => op.name === operationName)
    if (!named) throw new AppError('OPERATION_NOT_FOUND', `Unknown operation named "${operationName.slice(0, 80)}"`)
    return named
  }
  if (operations.length > 1) {
    throw new AppError(
      'OPERATION_NOT_FOUND',
      'Must provide operationName when the document contains several operations'
    )
  }
  return operations[0]!
}

/** Each operation's checker for plain scalar variables (variables.ts), made on its first request; null: graphql-js. */
const scalarCoercions = new WeakMap<OperationPlan, ScalarCoercion | null>()

function scalarCoercionOf (operation: OperationPlan): ScalarCoercion | null {
  let coercion = scalarCoercions.get(operation)
  if (coercion === undefined) scalarCoercions.set(operation, coercion = scalarCoercion(operation.variableDefinitions))
  return coercion
}

export function createAdmission (options: AdmissionOptions): OperationAdmission {
  const { limits, plans } = options

  /**
   * Variables coerced (plain scalars by the operation's own checker, anything else and every refusal by
   * graphql-js, in its words), then held to the input caps.
   */
  function coerceVariables (operation: OperationPlan, sent: unknown): Record<string, unknown> {
    if (sent != null && (typeof sent !== 'object' || Array.isArray(sent))) {
      throw new AppError('BAD_REQUEST', 'variables must be a JSON object')
    }
    const definitions = operation.variableDefinitions
    if (definitions.length === 0) return {}
    const inputs = (sent ?? {}) as Record<string, unknown>
    const coerced = scalarCoercionOf(operation)?.(inputs) ?? coerceByGraphQL(definitions, inputs)
    // Only declared variables, as deep as their types: the caps walk is bounded by the schema.
    assertWithinCaps(coerced, limits, 'variables')
    return coerced
  }

  function coerceByGraphQL (definitions: OperationPlan['variableDefinitions'], inputs: Record<string, unknown>): Record<string, unknown> {
    const { coerced, errors } = getVariableValues(options.schema(), definitions, inputs, { maxErrors: 10 })
    if (errors) throw new ValidationFailed(errors, 'BAD_USER_INPUT')
    return coerced
  }

  /**
   * The operation a request names: its document resolved, planned, and the operation chosen (with the document's text).
   */
  async function operationOf (
    params: GraphQLRequestParams,
    caller: Caller | null,
    transport?: Transport
  ): Promise<{ operation: OperationPlan; source: string; deployed: PersistedOperation | undefined }> {
    const operationName = params.operationName ?? null
    if (operationName !== null && typeof operationName !== 'string') {
      throw new AppError('BAD_REQUEST', 'operationName must be a string')
    }
    // Persisted-only mode lets one thing through besides registered ids: an ADMIN's ad-hoc document
    // that only introspects (schema tooling such as graphql-codegen sends getIntrospectionQuery()).
    // Only an ADMIN's text is parsed at all; any other ad-hoc operation is refused as in that mode.
    // The interface allows GET for persisted queries only (their URLs are stable, hence cacheable). An
    // automatic registration (hash and text) is accepted by POST only, refused before anything is
    // resolved: by GET, any ad-hoc text wrapped as one would run and be cached publicly. A registered
    // hash is then fetched by GET alone.
    if (
      transport === 'GET' &&
      params.query != null &&
      persistedIdOf(params) === undefined &&
      hasPersistedQueryExtension(params)
    ) {
      throw new AppError('METHOD_NOT_ALLOWED', GET_PERSISTED_ONLY)
    }
    const document = await options.persisted.resolve(params, caller?.role === 'ADMIN')
    if (transport === 'GET' && !document.registered) throw new AppError('METHOD_NOT_ALLOWED', GET_PERSISTED_ONLY)
    const operation = selectOperation(plans.plan(document.text), operationName)
    if (document.introspectionOnly && !operation.onlyIntrospects) {
      throw new AppError('PERSISTED_QUERY_REQUIRED', PersistedMessages.required)
    }
    return { operation, source: document.text, deployed: document.deployed }
  }

  async function admit ({
    params,
    transport,
    caller,
    ip,
    client = null,
    paidByRequest = transport !== 'WS',
    onPriced
  }: OperationRequest): Promise<Admission> {
    // HTTP requests have paid at the route; a WebSocket (or a batch) carries many operations on one request.
    if (!paidByRequest) await options.spendRequest(caller, ip)
    const { operation, source, deployed } = await operationOf(params, caller, transport)
    if (!ALLOWED[transport].has(operation.type)) refuseOnTransport(operation.type, transport)
    if (operation.introspects && !options.introspection && caller?.role !== 'ADMIN') {
      throw new AppError('INTROSPECTION_DISABLED', Messages.introspectionDisabled)
    }
    const variables = coerceVariables(operation, params.variables)
    // In-process counters answer at once: no turn of the event loop waits for them.
    const charged = options.chargeCost(caller, ip, operation.cost(variables))
    let cost: CostReport
    if (charged instanceof Promise) {
      onPriced?.({ caller, operation, variables })
      cost = await charged
    } else {
      cost = charged
    }
    // Compiled once paid for: the compilation is bounded by the budget just checked (each field costs at least 1).
    const compiled = plans.compiled(operation, source)
    // Only an admitted request counts for its app deployment's usage (a refused one did not use it).
    if (deployed) options.persisted.countUse(deployed, client)
    return { caller, operation, compiled, variables, cost }
  }

  return {
    admit,
    async operationType (params, caller) {
      try {
        return (await operationOf(params, caller)).operation.type
      } catch {
        return undefined
      }
    },
    async resolvesRegistered (params, caller) {
      try {
        await operationOf(params, caller, 'GET')
        return true
      } catch {
        return false
      }
    }
  }
}

export function createExecution (options: ExecutionOptions): OperationExecution {
  const { timeoutMs } = options
  const contextOf = (
    admission: Admission, deadline: number, reads: ReadSet | null, caller: Caller | null
  ): GraphQLContext => ({
    domain: createDomainContext(options.domain, caller, deadline, reads),
    operationName: admission.operation.name,
    cost: admission.cost
  })
  return {
    execute (admission, root, reads, as = admission.caller) {
      const deadline = Date.now() + timeoutMs
      const context = contextOf(admission, deadline, reads ?? null, as)
      const result = admission.compiled.query(root, context, admission.variables)
      // Synchronous results (no resolver waited) are complete; only a pending one races the deadline.
      return result instanceof Promise ? withinDeadline(result, timeoutMs, TIMED_OUT) : Promise.resolve(result)
    },
    async subscribe (admission) {
      const { operation, variables } = admission
      // The source stream comes from graphql-js's createSourceEventStream: graphql-jit 0.8 hands the
      // subscribe resolver the operation's variables instead of the field's arguments. Its events are
      // executed by `execute` (the carriers share one execution among subscribers: fanout.ts).
      return createSourceEventStream({
        schema: options.schema(),
        document: operation.document,
        operationName: operation.name,
        variableValues: variables,
        contextValue: contextOf(admission, Infinity, null, admission.caller)
      })
    },
    cached () {}
  }
}

/** Admission and execution, with the instruments (tracing) wrapping their phases once, here. */
export function createPipeline (
  options: AdmissionOptions & ExecutionOptions & { instrumentation?: Instrumentation }
): Pipeline {
  const admission = createAdmission(options)
  const execution = createExecution(options)
  const phases: OperationPhases<OperationRequest, Admission> = { admit: admission.admit, ...execution }
  const wrapped = options.instrumentation?.phases?.(phases)
  if (!wrapped) return { admission, execution }
  const { admit, execute, subscribe, cached } = wrapped
  return { admission: { ...admission, admit }, execution: { execute, subscribe, cached } }
}

const TIMED_OUT: ExecutionResult = {
  data: null,
  errors: [new GraphQLError(Messages.queryTimeout, { extensions: { code: 'TIMEOUT' } })]
}
