// Runs the service: loads the configuration, builds the app, listens, and shuts down gracefully
// (in-flight requests finish, subscriptions complete, stores close) on SIGINT/SIGTERM.
import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.ts'
import { loadConfig } from './config.ts'

let config
try {
  config = loadConfig()
} catch (err) {
  console.error((err as Error).message)
  process.exit(1)
}

const app = await buildApp(config)

closeWithGrace({ delay: config.shutdownGraceMs }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'shutting down after an error')
  else app.log.info({ signal }, 'shutting down')
  await app.close()
})

try {
  await app.listen({ host: config.host, port: config.port })
  app.log.info({ profile: config.profile, store: app.store.kind, pubsub: config.redisUrl ? 'redis' : 'in-process' }, 'service ready')
} catch (err) {
  app.log.error({ err }, 'could not start')
  process.exit(1)
}
