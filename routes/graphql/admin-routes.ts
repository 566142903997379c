// The app deployments' routes for release pipelines (`npm run app` over HTTP when the database is out of
// reach): /admin/app-deployments, in the GraphQL routes' scope (their errors answer in the GraphQL shape).
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Config } from '../../app/core/config/index.ts'
import { staleIdentity, storedRole } from '../../app/core/domain/authorization.ts'
import type { deploymentVerbs } from '../../app/graphql/app-deployments.ts'
import type { GraphQLDependencies } from '../../app/graphql/dependencies.ts'

export function adminRoutes (
  app: FastifyInstance,
  verbs: ReturnType<typeof deploymentVerbs>,
  deps: Pick<GraphQLDependencies, 'authenticate' | 'domain'>,
  config: Config
): void {
  // App deployments for release pipelines (app-deployments.ts `deploymentVerbs`: administrators only,
  // refused before the body is read; a manifest may be as large as DEPLOYMENTS_MAX_BYTES). The token's
  // ADMIN role must still be the user's in the store (staleIdentity): a demoted administrator's token is
  // refused with FORBIDDEN, a deleted one's with UNAUTHENTICATED, before it expires. This hook waits on
  // the store (one read of the caller's row), so it is async, unlike the others.
  const admitAdministrator = async (request: FastifyRequest) => {
    const caller = verbs.admit(deps.authenticate(request.headers.authorization))
    const stale = staleIdentity(caller, await storedRole(deps.domain.store, caller.id))
    if (stale) throw stale
    request.caller = caller
  }
  const adminRoute = {
    onRequest: admitAdministrator,
    // A manifest whose operations weigh DEPLOYMENTS_MAX_BYTES in memory has a text of less than a 96th of it (plan.ts).
    bodyLimit: Math.max(config.server.bodyLimitBytes, Math.ceil(config.deployments.maxBytes / 32))
  }
  type Named = { Params: { name: string; version: string } }
  app.get<{ Querystring: { staleDays?: string } }>('/admin/app-deployments', adminRoute,
    (request) => verbs.list(request.caller, request.query.staleDays))
  app.post('/admin/app-deployments/check', adminRoute, async (request) => verbs.check(request.caller, request.body))
  app.put<Named>('/admin/app-deployments/:name/:version', adminRoute, async (request, reply) => {
    const published = await verbs.publish(request.caller, request.params.name, request.params.version, request.body)
    return reply.code(published.outcome === 'published' ? 201 : 200).send(published)
  })
  app.post<Named>('/admin/app-deployments/:name/:version/retire', adminRoute,
    async (request) => verbs.retire(request.caller, request.params.name, request.params.version))
}
