// Graceful shutdown behind a load balancer that keeps idle keep-alive connections to us (nginx's
// upstream `keepalive`). Node's server.close() destroys idle connections at once; the balancer may be
// writing a request on one of them at that very moment, and since it cannot know whether we read it,
// it answers that client 502 rather than resend a POST (measured: 3 to 31 such 502s per restart under
// load). So idle connections get SHUTDOWN_IDLE_DRAIN_MS: a request arriving on one is served (with
// `Connection: close`, see app/app.ts), and only those still idle at the end are closed. New connections
// are refused from the start; the balancer retries those elsewhere, since they never reached us.
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'

export default fp(async function gracefulDrain (app: FastifyInstance) {
  const drainMs = app.config.shutdownIdleDrainMs
  if (drainMs === 0) return
  app.addHook('onListen', async () => {
    const server = app.server
    const closeIdleNow = server.closeIdleConnections.bind(server)
    // server.close() calls this once; our version waits before closing what is still idle.
    server.closeIdleConnections = () => { setTimeout(closeIdleNow, drainMs) }
  })
}, { name: 'graceful-drain', dependencies: ['config'] })
