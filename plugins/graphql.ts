// The GraphQL engine: Mercurius with graphql-jit, our schema, resolvers and loaders, the @auth
// directive (mercurius-auth), and the checks that must see the caller (introspection, cost budget),
// which run in preExecution because validation results are cached without a request context.
// HTTP routes live in routes/graphql.ts; Mercurius's own routes are off.
import { readFileSync } from 'node:fs'
import fp from 'fastify-plugin'
import mercurius from 'mercurius'
import mercuriusAuthModule, { type MercuriusAuthOptions } from 'mercurius-auth'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import type { ArgumentNode, DirectiveNode, ListValueNode, OperationDefinitionNode } from 'graphql'
import { meets, type AccessRequirement } from '../app/domain/authorization.ts'
import { AppError, Messages, forbidden, unauthenticated } from '../app/errors.ts'
import type { GraphQLContext } from '../app/graphql/context.ts'
import { selectOperation } from '../app/graphql/document.ts'
import { formatError, type FormatOptions } from '../app/graphql/error-format.ts'
import { depthLimitRule, literalCapsRule, priceOperation, type SpendCostUnits } from '../app/graphql/limits.ts'
import { loaders, resolvers } from '../app/graphql/resolvers.ts'

// mercurius-auth is CommonJS whose typings declare `export default`: at run time the import is the plugin itself.
const mercuriusAuth = mercuriusAuthModule as unknown as FastifyPluginAsync<MercuriusAuthOptions>

export const schemaSDL = readFileSync(new URL('../app/graphql/schema.graphql', import.meta.url), 'utf8')

declare module 'fastify' {
  interface FastifyInstance {
    graphqlErrorOptions: FormatOptions
    /** Spends `cost` units of the caller's window: what is left (negative when over) and when the window resets. Set by the rate-limit plugin. */
    spendCostUnits: SpendCostUnits
  }
  interface FastifyRequest {
    /** The operation this request executes, once selected (read by metrics). */
    graphqlOperation: OperationDefinitionNode | null
  }
}

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

  await app.register(mercurius, {
    schema: schemaSDL,
    resolvers,
    loaders,
    routes: false,
    jit: 1,
    cache: 1024,
    validationRules: graphqlValidationRules(config),
    // Subscription events come from the service's emitter; the WebSocket and SSE transports are in plugins/subscriptions.ts.
    subscription: { emitter: app.emitter },
    errorFormatter: (execution, _context) => ({
      statusCode: 200,
      response: { data: execution.data ?? null, errors: (execution.errors ?? []).map((e) => formatError(e, errorOptions)) as any }
    })
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
  app.graphql.addHook('preExecution', async (schema, document, context: GraphQLContext, variables) => {
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
    return singleOperationDocument ? { document: singleOperationDocument } : undefined
  })
}, { name: 'graphql', dependencies: ['config', 'store', 'events', 'auth', 'rate-limit'] })
