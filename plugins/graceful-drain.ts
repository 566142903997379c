// Graceful shutdown behind a load balancer that keeps idle keep-alive connections to us (nginx's
// upstream `keepalive`). Node's server.close() destroys idle connections at once; the balancer may be
// writing a request on one of them at that very moment, and since it cannot know whether we read it,
// it answers that client 502 rather than resend a POST (measured: 3 to 31 such 502s per restart under
// load). So idle connections get SHUTDOWN_IDLE_DRAIN_MS: a request arriving on one is served (with
// `Connection: close`, see app/app.ts), and only those still idle at the end are closed. New connections
// are refused from the start; the balancer retries those elsewhere, since they never reached us.
//
// Node counts a connection that has not sent a request yet (a browser's or a balancer's preconnect)
// as busy, not idle: left open, it held every shutdown for the whole SHUTDOWN_GRACE_MS, which then
// ended in the timeout's exit 1. At the end of the drain (at once without one), every connection
// without a response in progress is closed; WebSockets are left to the GraphQL routes, which closes them.
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'

export default fp(async function gracefulDrain (app: FastifyInstance) {
  const drainMs = app.config.server.shutdownIdleDrainMs
  app.addHook('onListen', async () => {
    const server = app.server
    /** Open HTTP connections (not upgraded), and the last response each one carried. */
    const connections = new Map<Socket, ServerResponse | null>()
    server.on('connection', (socket: Socket) => {
      connections.set(socket, null)
      socket.once('close', () => connections.delete(socket))
    })
    server.on('request', (request, response) => { connections.set(request.socket, response) })
    server.on('upgrade', (request) => { connections.delete(request.socket) })
    const closeIdleNow = server.closeIdleConnections.bind(server)
    const closeUnused = () => {
      closeIdleNow()
      for (const [socket, response] of connections) {
        if (response === null || response.writableFinished) socket.destroy()
      }
    }
    // server.close() calls this once (and Fastify before it); our version waits before closing what is still idle.
    server.closeIdleConnections = drainMs === 0 ? closeUnused : () => { setTimeout(closeUnused, drainMs) }
  })
}, { name: 'graceful-drain', dependencies: ['config'] })
