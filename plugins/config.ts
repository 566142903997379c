import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import type { Config } from '../app/core/config/index.ts'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
  }
}

/** Makes the configuration loaded by the caller of buildApp available as `app.config`. */
export default fp(async function config (app: FastifyInstance, opts: { config: Config }) {
  app.decorate('config', opts.config)
}, { name: 'config' })
