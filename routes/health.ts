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
 * The endpoint is unbudgeted (balancers probe it), so its verdict is shared: concurrent calls wait for
 * one check, and a finished check answers every call for READINESS_CACHE_MS; a flood costs the
 * store and Redis one ping per interval.
 */
export default fp(async function health (app: FastifyInstance) {
  app.decorate('readinessChecks', new Map<string, () => Promise<void>>([['store', () => app.store.ping()]]))
  let closing = false
  app.addHook('preClose', async () => { closing = true })

  /** Every check's outcome ('ok' or why it fails); never rejects. */
  const runChecks = async (): Promise<Record<string, string>> => {
    const checks: Record<string, 'ok' | string> = {}
    await Promise.all([...app.readinessChecks].map(async ([name, check]) => {
      try {
        if (await withinDeadline(check(), 1000, TIMED_OUT) === TIMED_OUT) throw new Error('timed out')
        checks[name] = 'ok'
      } catch (err) {
        checks[name] = `failing: ${(err as Error).message}`
      }
    }))
    return checks
  }
  const cacheMs = app.config.readinessCacheMs
  /** The last check started: in flight (doneAt null) or finished at doneAt. */
  let last: { checks: Promise<Record<string, string>>; doneAt: number | null } | null = null
  const sharedChecks = () => {
    if (last === null || (last.doneAt !== null && Date.now() - last.doneAt >= cacheMs)) {
      const started: NonNullable<typeof last> = { checks: runChecks(), doneAt: null }
      void started.checks.then(() => { started.doneAt = Date.now() })
      last = started
    }
    return last.checks
  }

  app.get('/health/live', async () => ({ status: 'ok' }))

  app.get('/health/ready', async (_request, reply) => {
    const checks = await sharedChecks()
    const ready = !closing && Object.values(checks).every((v) => v === 'ok')
    return reply
      .code(ready ? 200 : 503)
      .send({ status: ready ? 'ready' : closing ? 'shutting down' : 'not ready', checks })
  })
}, { name: 'health', dependencies: ['config', 'store'] })
