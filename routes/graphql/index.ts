// The GraphQL engine: Mercurius builds the executable schema from our SDL and resolvers and hosts
// mercurius-auth (the @auth directive wraps the protected fields' resolvers in the schema itself);
// the admission pipeline (app/graphql/pipeline.ts) runs every operation of every transport through
// graphql-jit against that schema. Mercurius's routes, caches and hooks are not used: the HTTP routes
// are in routes/graphql.ts, the subscription transports in plugins/subscriptions.ts.
import { readFileSync } from 'node:fs'
import fp from 'fastify-plugin'
import mercurius from 'mercurius'
import mercuriusAuthModule, { type MercuriusAuthOptions } from 'mercurius-auth'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import { isObjectType, type ArgumentNode, type DirectiveNode, type GraphQLSchema, type ListValueNode } from 'graphql'
import { meets, type AccessRequirement } from '../app/domain/authorization.ts'
import { assertBeforeDeadline } from '../app/domain/context.ts'
import { cursorKey } from '../app/domain/pages.ts'
import { forbidden, unauthenticated } from '../app/errors.ts'
import type { GraphQLContext } from '../app/graphql/context.ts'
import type { FormatOptions } from '../app/graphql/error-format.ts'
import { createPipeline, type Pipeline } from '../app/graphql/pipeline.ts'
import { resolvers } from '../app/graphql/resolvers.ts'

// mercurius-auth is CommonJS whose typings declare `export default`: at run time the import is the plugin itself.
const mercuriusAuth = mercuriusAuthModule as unknown as FastifyPluginAsync<MercuriusAuthOptions>

export const schemaSDL = readFileSync(new URL('../app/graphql/schema.graphql', import.meta.url), 'utf8')

declare module 'fastify' {
  interface FastifyInstance {
    graphqlErrorOptions: FormatOptions
    /** Every GraphQL operation, whatever its transport, is admitted and run through it. */
    graphqlPipeline: Pipeline
  }
  interface FastifyRequest {
    /** The operation this request executes, once admitted (read by metrics). */
    graphqlOperation: { name: string | null; type: string } | null
  }
}

function requirementsOf (directive: DirectiveNode): AccessRequirement[] {
  const requires = directive.arguments?.find((a: ArgumentNode) => a.name.value === 'requires')?.value as ListValueNode | undefined
  return (requires?.values ?? []).map((v) => (v as { value: string }).value as AccessRequirement)
}

/**
 * Every field that has a resolver (root fields, Message.author, the @auth-wrapped fields) first checks
 * the operation's deadline: once "Query timeout" has been answered, the rest of the execution reads
 * and writes nothing more. (The deadline timer cannot interrupt synchronous work; that work is bounded
 * by the cost budget and the answer cap instead.) Plain property fields have no resolver, so graphql-jit
 * keeps inlining them.
 */
function stopResolversAtDeadline (schema: GraphQLSchema): void {
  for (const type of Object.values(schema.getTypeMap())) {
    if (!isObjectType(type) || type.name.startsWith('__') || type === schema.getSubscriptionType()) continue
    for (const field of Object.values(type.getFields())) {
      const resolve = field.resolve
      if (!resolve) continue
      field.resolve = (parent, args, context: GraphQLContext, info) => {
        assertBeforeDeadline(context.domain)
        return resolve(parent, args, context, info)
      }
    }
  }
}

export default fp(async function graphql (app: FastifyInstance) {
  const { config } = app
  app.decorate('graphqlErrorOptions', {
    production: config.profile === 'production',
    logInternal: (err) => app.log.error({ err }, 'GraphQL request failed')
  } satisfies FormatOptions)

  // `subscription` on: only then does Mercurius's defineResolvers take the Subscription fields'
  // { subscribe, resolve } pairs (plugins/subscriptions.ts). Its pub/sub is not used: room events reach
  // subscribers through the fan-out hub (app/graphql/fanout.ts) over the service's emitter.
  await app.register(mercurius, { schema: schemaSDL, resolvers, routes: false, jit: 0, cache: false, subscription: { emitter: app.emitter } })

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

  stopResolversAtDeadline(app.graphql.schema)

  app.decorateRequest('graphqlOperation', null)
  const pipeline = createPipeline({
    schema: () => app.graphql.schema,
    limits: config.limits,
    introspection: config.introspection,
    domain: { store: app.store, events: app.events, caps: config.limits, cursorKey: cursorKey(config.cursorSecret) },
    persisted: () => app.persistedQueries,
    chargeCost: (caller, ip, cost) => app.chargeCost(caller, ip, cost),
    spendRequest: (caller, ip) => app.spendRequest(caller, ip),
    spendCostUnits: (caller, ip, units) => app.spendCostUnits(caller, ip, units)
  })
  // With tracing on, every operation of every transport is a span (app/tracing.ts).
  app.decorate('graphqlPipeline', app.tracing ? app.tracing.pipeline(pipeline) : pipeline)
}, { name: 'graphql', dependencies: ['config', 'store', 'events', 'auth', 'rate-limit'] })
