import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { withinDeadline } from '../app/domain/context.ts'

const TIMED_OUT = Symbol('timed out')

declare module 'fastify' {
  interface FastifyInstance {
    /** Dependencies that readiness checks besides the store (e.g. Redis), registered by their plugins. */
    readinessChecks: Map<string, () => Promise<void>>
  }
}

/**
 * Liveness: the process answers. Readiness: every dependency answers within a second, so a load
 * balancer stops sending traffic to an instance whose store or Redis is gone, and resumes by itself.
 */
export default fp(async function health (app: FastifyInstance) {
  app.decorate('readinessChecks', new Map<string, () => Promise<void>>([['store', () => app.store.ping()]]))
  let closing = false
  app.addHook('preClose', async () => { closing = true })

  app.get('/health/live', async () => ({ status: 'ok' }))

  app.get('/health/ready', async (_request, reply) => {
    const checks: Record<string, 'ok' | string> = {}
    await Promise.all([...app.readinessChecks].map(async ([name, check]) => {
      try {
        if (await withinDeadline(check(), 1000, TIMED_OUT) === TIMED_OUT) throw new Error('timed out')
        checks[name] = 'ok'
      } catch (err) {
        checks[name] = `failing: ${(err as Error).message}`
      }
    }))
    const ready = !closing && Object.values(checks).every((v) => v === 'ok')
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : (closing ? 'shutting down' : 'not ready'), checks })
  })
}, { name: 'health', dependencies: ['store'] })
