// Runs the service: loads the configuration, builds the app, listens, and shuts down gracefully
// (in-flight requests finish, subscriptions complete, stores close) on SIGINT/SIGTERM.
// A start that fails (a bad setting, an unreachable store, a manifest that does not match) prints
// one line per problem on stderr, never a stack trace nor a URL setting's credentials, and exits with 1.
import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.ts'
import { loadConfigOrExit, withoutCredentials } from './config.ts'

const config = loadConfigOrExit()

/** An error's message on one line (a driver's message may span several), without any URL's credentials. */
const oneLine = (err: unknown) => withoutCredentials(String((err as Error).message ?? err).replace(/\s*\n\s*/g, ' '))

let app
try {
  app = await buildApp(config)
} catch (err) {
  console.error(`Could not start: ${oneLine(err)}`)
  process.exit(1)
}

closeWithGrace({ delay: config.shutdownGraceMs }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'shutting down after an error')
  else app.log.info({ signal }, 'shutting down')
  await app.close()
})

try {
  await app.listen({ host: config.host, port: config.port })
  app.log.info(
    { profile: config.profile, store: app.store.kind, pubsub: config.redisUrl ? 'redis' : 'in-process' },
    'service ready'
  )
} catch (err) {
  console.error(`Could not start: ${oneLine(err)}`)
  process.exit(1)
}
