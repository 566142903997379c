// The GraphQL engine: Mercurius with graphql-jit, our schema and resolvers, the @auth directive
// (mercurius-auth), and the checks that must see the caller (introspection, cost budget), which run
// before each execution because validation results are cached without a request context.
// `app.runGraphQL` runs queries and mutations: through Mercurius on a text's first uses, then through
// its graphql-jit compilation (app/graphql/compiled-queries.ts). HTTP routes live in
// routes/graphql.ts; Mercurius's own routes are off.
import { readFileSync } from 'node:fs'
import fp from 'fastify-plugin'
import mercurius from 'mercurius'
import mercuriusAuthModule, { type MercuriusAuthOptions } from 'mercurius-auth'
import type { FastifyInstance, FastifyPluginAsync, FastifyReply } from 'fastify'
import type { ArgumentNode, DirectiveNode, DocumentNode, ExecutionResult, GraphQLSchema, ListValueNode, OperationDefinitionNode } from 'graphql'
import { meets, type AccessRequirement } from '../app/domain/authorization.ts'
import { AppError, Messages, forbidden, unauthenticated } from '../app/errors.ts'
import type { GraphQLContext } from '../app/graphql/context.ts'
import { createCompiledQueries } from '../app/graphql/compiled-queries.ts'
import { factsOf, selectOperation } from '../app/graphql/document.ts'
import { formatError, type ErrorJson, type FormatOptions } from '../app/graphql/error-format.ts'
import { depthLimitRule, literalCapsRule, priceOperation, type SpendCostUnits } from '../app/graphql/limits.ts'
import { resolvers } from '../app/graphql/resolvers.ts'

// mercurius-auth is CommonJS whose typings declare `export default`: at run time the import is the plugin itself.
const mercuriusAuth = mercuriusAuthModule as unknown as FastifyPluginAsync<MercuriusAuthOptions>

export const schemaSDL = readFileSync(new URL('../app/graphql/schema.graphql', import.meta.url), 'utf8')

declare module 'fastify' {
  interface FastifyInstance {
    graphqlErrorOptions: FormatOptions
    /** Spends `cost` units of the caller's window: what is left (negative when over) and when the window resets. Set by the rate-limit plugin. */
    spendCostUnits: SpendCostUnits
    /**
     * Runs a query or mutation (not a subscription): through its graphql-jit compilation from a text's
     * third use, otherwise through Mercurius (with `reply` when there is one).
     * Answers `{ data, errors }` with errors in the interface's shape; throws what Mercurius throws
     * before execution (parse, validation and our checks), as `reply.graphql` does.
     */
    runGraphQL: (reply: FastifyReply | null, source: string, context: GraphQLContext, variables?: Record<string, unknown>, operationName?: string) => Promise<GraphQLAnswer>
  }
  interface FastifyRequest {
    /** The operation this request executes, once selected (read by metrics). */
    graphqlOperation: OperationDefinitionNode | null
  }
}

/** An execution's outcome, its errors already in the interface's shape. */
export interface GraphQLAnswer {
  data?: unknown
  errors?: ErrorJson[]
}

/** Parsed and validated documents Mercurius keeps, and compiled operations kept here, by text. */
const PARSED_DOCUMENTS = 1024

/** Our validation rules beyond graphql-js's; subscriptions (plugins/subscriptions.ts) apply the same ones. */
export function graphqlValidationRules (config: FastifyInstance['config']) {
  return [depthLimitRule(config.limits.maxDepth), literalCapsRule(config.limits)]
}

function requirementsOf (directive: DirectiveNode): AccessRequirement[] {
  const requires = directive.arguments?.find((a: ArgumentNode) => a.name.value === 'requires')?.value as ListValueNode | undefined
  return (requires?.values ?? []).map((v) => (v as { value: string }).value as AccessRequirement)
}

export default fp(async function graphql (app: FastifyInstance) {
  const { config } = app
  const production = config.profile === 'production'
  const errorOptions: FormatOptions = {
    production,
    logInternal: (err) => app.log.error({ err }, 'GraphQL request failed')
  }
  app.decorate('graphqlErrorOptions', errorOptions)
  const withFormattedErrors = (execution: ExecutionResult): GraphQLAnswer => ({ data: execution.data ?? null, errors: (execution.errors ?? []).map((e) => formatError(e, errorOptions)) })

  // Compilation happens in app/graphql/compiled-queries.ts (`jit: 0` here: Mercurius would compile
  // every text a second time).
  await app.register(mercurius, {
    schema: schemaSDL,
    resolvers,
    routes: false,
    jit: 0,
    cache: PARSED_DOCUMENTS,
    validationRules: graphqlValidationRules(config),
    // Subscription events come from the service's emitter; the WebSocket and SSE transports are in plugins/subscriptions.ts.
    subscription: { emitter: app.emitter },
    errorFormatter: (execution, _context) => ({ statusCode: 200, response: withFormattedErrors(execution) as any })
  })

  // Directive requirements are parsed once per directive node, not per resolved field.
  const parsedRequirements = new WeakMap<DirectiveNode, AccessRequirement[]>()
  await app.register(mercuriusAuth, {
    authDirective: 'auth',
    applyPolicy: async (policy: DirectiveNode, parent: { id?: string }, _args: unknown, context: GraphQLContext) => {
      let requirements = parsedRequirements.get(policy)
      if (!requirements) parsedRequirements.set(policy, requirements = requirementsOf(policy))
      const caller = context.domain.caller
      if (meets(caller, requirements, parent.id ?? null)) return true
      return caller ? forbidden('Not allowed to read this field') : unauthenticated()
    }
  })

  app.decorateRequest('graphqlOperation', null)
  /** What every query and mutation passes before it runs, on either path: returns the single-operation document to run instead, if any. */
  async function checkOperation (schema: GraphQLSchema, document: DocumentNode, context: GraphQLContext, variables: Record<string, unknown> | undefined) {
    const { operation, introspects, singleOperationDocument } = selectOperation(document, context.operationName)
    context.request.graphqlOperation = operation
    const caller = context.domain.caller
    if (introspects && !config.introspection && caller?.role !== 'ADMIN') {
      throw new AppError('INTROSPECTION_DISABLED', Messages.introspectionDisabled)
    }
    if (context.request.method === 'GET' && operation.operation !== 'query') {
      throw new AppError('METHOD_NOT_ALLOWED', 'Only queries can be sent by GET; send mutations by POST')
    }
    context.cost = await priceOperation(schema, document, operation, variables, caller, context.request.ip, config.limits, app.spendCostUnits)
    return { singleOperationDocument }
  }

  const compiled = createCompiledQueries(() => app.graphql.schema, PARSED_DOCUMENTS)
  /** The text each context's request runs, so the hook can tell compiled-queries which text passed. */
  const sourceOf = new WeakMap<GraphQLContext, string>()
  app.graphql.addHook('preExecution', async (schema, document, context: GraphQLContext, variables) => {
    // A use counts once the text is parsed and validated, whatever the per-request checks decide (as
    // Mercurius counts its own).
    const source = sourceOf.get(context)
    const { operations } = factsOf(document)
    if (source !== undefined && operations.length === 1 && operations[0]!.operation !== 'subscription') compiled.passed(source, document, operations[0]!)
    const { singleOperationDocument } = await checkOperation(schema, document, context, variables)
    return singleOperationDocument ? { document: singleOperationDocument } : undefined
  })

  app.decorate('runGraphQL', async (reply: FastifyReply | null, source: string, context: GraphQLContext, variables?: Record<string, unknown>, operationName?: string): Promise<GraphQLAnswer> => {
    const operation = compiled.get(source)
    // A GET of a mutation goes to Mercurius, which refuses it in its own words before anything runs.
    if (!operation || (context.request.method === 'GET' && operation.type !== 'query')) {
      sourceOf.set(context, source)
      // Mercurius's errorFormatter (above) has put its errors in the interface's shape.
      return (reply ? reply.graphql(source, context, variables, operationName) : app.graphql(source, context, variables, operationName)) as Promise<GraphQLAnswer>
    }
    // The same order and the same answers as Mercurius: variables that were sent are checked first
    // (refused by throwing, before anything is spent), then our checks (which spend cost units).
    // Absent variables are left to the execution, which reports missing required ones as errors.
    const variableErrors = variables === undefined ? null : operation.variableErrors(variables)
    if (variableErrors) throw Object.assign(new Error('Invalid variables'), { errors: variableErrors })
    await checkOperation(app.graphql.schema, operation.document, context, variables)
    const execution = await operation.query.query(undefined, context, variables ?? {})
    return execution.errors?.length ? withFormattedErrors(execution) : { data: execution.data }
  })
}, { name: 'graphql', dependencies: ['config', 'store', 'events', 'auth', 'rate-limit'] })
