import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply } from 'fastify'
import { withinDeadline } from '../app/core/domain/context.ts'

const TIMED_OUT = Symbol('timed out')

/**
 * Liveness: the process answers. Readiness: every dependency answers within a second, so a load
 * balancer stops sending traffic to an instance whose store or Redis is gone, and resumes by itself.
 * Both are unbudgeted (balancers probe them, often from one address), so a probe costs no more than the
 * cheapest request: readiness is answered from a shared verdict (concurrent calls wait for one check, a
 * finished check answers every call for READINESS_CACHE_MS, so a flood costs the store and Redis one
 * ping per interval) whose answer is serialized once per check, and neither route is access-logged
 * (a flood of probes must not flood the log; metrics count them).
 */
export default fp(async function health (app: FastifyInstance) {
  let closing = false
  app.addHook('preClose', async () => { closing = true })

  /** Every check's outcome ('ok' or why it fails); never rejects. */
  const runChecks = async (): Promise<Record<string, string>> => {
    const checks: Record<string, 'ok' | string> = {}
    await Promise.all([...app.readinessChecks].map(async ([name, check]) => {
      try {
        const outcome = await withinDeadline(check(), 1000, TIMED_OUT)
        if (outcome === TIMED_OUT) throw new Error('timed out')
        checks[name] = outcome ?? 'ok'
      } catch (err) {
        checks[name] = `failing: ${(err as Error).message}`
      }
    }))
    return checks
  }
  /** The answer to every call while a verdict stands: its status and its body, serialized once. */
  const answerFor = (checks: Record<string, string>, shuttingDown: boolean): Answer => {
    const ready = !shuttingDown && Object.values(checks).every((v) => !v.startsWith('failing'))
    const status = ready ? 'ready' : shuttingDown ? 'shutting down' : 'not ready'
    return { code: ready ? 200 : 503, body: JSON.stringify({ status, checks }) }
  }
  const cacheMs = app.config.server.readinessCacheMs
  /** The last check started: in flight (done null) or finished, with its outcome and answer. */
  let last: {
    checks: Promise<Record<string, string>>
    done: { checks: Record<string, string>; answer: Answer; at: number } | null
  } | null = null
  const sharedChecks = () => {
    if (last === null || (last.done !== null && Date.now() - last.done.at >= cacheMs)) {
      const started: NonNullable<typeof last> = { checks: runChecks(), done: null }
      void started.checks.then((checks) => {
        started.done = { checks, answer: answerFor(checks, false), at: Date.now() }
      })
      last = started
    }
    return last
  }
  const send = (reply: FastifyReply, answer: Answer) => {
    reply.code(answer.code).type(JSON_TYPE).send(answer.body)
  }

  // logLevel warn: Fastify's per-route log level, which the access log (plugins/logging.ts) reads to skip them.
  app.get('/health/live', { logLevel: 'warn' }, (_request, reply) => send(reply, LIVE))

  app.get('/health/ready', { logLevel: 'warn' }, (_request, reply) => {
    const { checks, done } = sharedChecks()
    if (done === null) return checks.then((outcome) => send(reply, answerFor(outcome, closing)))
    // The common case, synchronously: the verdict stands, and so does its answer (unless shutting down).
    send(reply, closing ? answerFor(done.checks, true) : done.answer)
  })
}, { name: 'health', dependencies: ['config', 'readiness'] })

interface Answer {
  code: number
  body: string
}

const JSON_TYPE = 'application/json; charset=utf-8'
const LIVE: Answer = { code: 200, body: JSON.stringify({ status: 'ok' }) }
