// How the service logs (pino through Fastify), shared with the benchmark's baseline server so both pay
// the same for it. At info and above (production): one access line per request, after the response
// (request id, method, URL, client IP as trusted, status, time), without headers. At debug and trace (the development
// default): Fastify's request logging too, with request headers, credentials redacted.
import { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import type { Config } from './config.ts'

export interface LoggingOptions {
  /** false silences logging (tests); a stream receives the log lines (tests read them). */
  logger?: false | { stream: NodeJS.WritableStream; level?: string }
}

function verbose (level: string): boolean {
  return level === 'debug' || level === 'trace'
}

export function serverLogging (config: Pick<Config, 'logLevel'>, options: LoggingOptions = {}): Pick<FastifyServerOptions, 'logger' | 'logController'> {
  if (options.logger === false) return { logger: false }
  const level = options.logger?.level || config.logLevel
  return {
    // Through a LogController: Fastify 5 deprecates the top-level disableRequestLogging option (FSTDEP023).
    logController: new LogController({ disableRequestLogging: !verbose(level) }),
    logger: {
      level,
      redact: { paths: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-api-key"]'], censor: '[redacted]' },
      serializers: {
        req: (req: { method: string; url: string; headers: Record<string, unknown>; ip?: string }) => ({ method: req.method, url: req.url, headers: req.headers, remoteAddress: req.ip })
      },
      ...(options.logger?.stream ? { stream: options.logger.stream } : {})
    }
  }
}

/** The one access line per request, when Fastify's own request logging is off. */
export function accessLog (app: FastifyInstance): void {
  const level = app.log.level
  if (verbose(level) || level === 'silent' || level === 'warn' || level === 'error' || level === 'fatal') return
  app.addHook('onResponse', (request, reply, done) => {
    request.log.info({ method: request.method, url: request.url, ip: request.ip, statusCode: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 }, 'request completed')
    done()
  })
}
