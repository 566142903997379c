// Runs the service: loads the configuration, builds the app, listens, and shuts down gracefully
// (in-flight requests finish, subscriptions complete, stores close) on SIGINT/SIGTERM.
// A start that fails (a bad setting, an unreachable store, a manifest that does not match) prints
// one line per problem on stderr, never a stack trace nor a URL setting's credentials, and exits with 1.
import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.ts'
import { readCommandLine } from './core/command-line.ts'
import { loadSettingsOrExit, SERVICE_AREAS, withoutCredentials } from './core/config/index.ts'

// The service takes no arguments: its settings are environment variables (or a .env file).
readCommandLine(`usage: npm start        (node app/server.ts: the production image runs this)
       npm run dev      (the development profile, restarted when a file changes)
Runs the GraphQL and SOAP service. It takes no arguments: every setting is an environment variable, read
from the environment and from .env in the project root (.env.example and docs/settings.md list them;
NODE_ENV=production for the production profile). SIGTERM or Ctrl+C stops it gracefully.`, { options: {} })

const config = loadSettingsOrExit(SERVICE_AREAS)
const STOP_SIGNALS = ['SIGINT', 'SIGTERM'] as const
/** How soon after a stop signal a repeat is the same request delivered twice (npm's forwarded copy). */
const REPEAT_MS = 500

/** An error's message on one line (a driver's message may span several), without any URL's credentials. */
const oneLine = (err: unknown) => withoutCredentials(String((err as Error).message ?? err).replace(/\s*\n\s*/g, ' '))

let app
try {
  app = await buildApp(config)
} catch (err) {
  console.error(`Could not start: ${oneLine(err)}`)
  process.exit(1)
}

// close-with-grace closes on the other signals and on an uncaught error; SIGINT and SIGTERM are ours.
const grace = { delay: config.server.shutdownGraceMs, skip: [...STOP_SIGNALS] }
const shutdown = closeWithGrace(grace, async ({ err, signal }) => {
  if (err) app.log.error({ err }, 'shutting down after an error')
  else if (signal) app.log.info({ signal }, 'shutting down')
  await app.close()
  app.log.info('shut down')
})

/**
 * Ctrl+C in a terminal signals the whole process group: npm and the service get SIGINT at once, and
 * npm forwards its copy to the service a moment later. The two copies are one request to stop, so a
 * repeat within REPEAT_MS is ignored; a later one (Ctrl+C pressed again) stops at once. The listeners
 * stay installed until the process exits: with none, Node restores the signal's default action, and a
 * copy arriving in that gap killed the service mid-shutdown (npm then exited 130, no line logged).
 */
let stopAskedAt = 0
for (const signal of STOP_SIGNALS) {
  process.on(signal, () => {
    if (stopAskedAt === 0) {
      stopAskedAt = Date.now()
      app.log.info({ signal }, 'shutting down')
      void shutdown.close()
    } else if (Date.now() - stopAskedAt >= REPEAT_MS) {
      app.log.warn({ signal }, 'second stop signal: exiting without waiting')
      process.exit(1)
    }
  })
}

try {
  await app.listen({ host: config.server.host, port: config.server.port })
  app.log.info(
    // Where each piece of state instances share lives (plugins/redis.ts decides): the events' is `pubsub`.
    {
      profile: config.profile,
      store: app.store.kind,
      pubsub: app.redis.placements.events,
      shared: app.redis.placements
    },
    'service ready'
  )
} catch (err) {
  console.error(`Could not start: ${oneLine(err)}`)
  process.exit(1)
}
