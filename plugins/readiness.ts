// What /health/ready checks: each dependency's plugin (the store, Redis) and the GraphQL routes (their
// app deployments) add a check here when they are registered; routes/health.ts runs them.
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Dependencies that readiness checks: a check throws when the instance should not take traffic, and
     * may resolve to a note (something it serves only in part) that /health/ready shows without failing.
     */
    readinessChecks: Map<string, () => Promise<void | string>>
  }
}

export default fp(async function readiness (app: FastifyInstance) {
  app.decorate('readinessChecks', new Map<string, () => Promise<void | string>>())
}, { name: 'readiness' })
