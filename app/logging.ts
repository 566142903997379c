// How the service logs (pino through Fastify), shared with the benchmark's baseline server so both pay
// the same for it. At info and above (production): one access line per request, after the response
// (request id, method, path, persisted query id, client IP as trusted, status, time), without headers.
// No line carries user data: a URL is logged as its path only (a persisted GET's query string holds
// its variables), with the persisted id beside it; bodies are never logged. At debug and trace (the development
// default): Fastify's request logging too, with request headers, credentials redacted.
import { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import pino from 'pino'
import type { Config } from './config.ts'

/** How long a line may wait in memory before it is written (also bounds what a SIGKILL loses). */
const LOG_FLUSH_MS = 200
/** Lines are handed on once this many characters are gathered: one write(2) for a hundred requests or so. */
const LOG_BATCH_CHARS = 16 * 1024

/**
 * Standard output, written off the request's path: lines are gathered in memory and handed to pino's
 * asynchronous destination (sonic-boom) as one string per batch, which it writes with one write(2).
 * A line handed to sonic-boom on its own costs more than the whole line's formatting: its write()
 * measures the UTF-8 length of everything still pending on every call (measured: 6 µs of a persisted
 * GET's CPU at 4 KiB batches). Every line is kept: a batch is handed on when it is full, every
 * LOG_FLUSH_MS, and on exit (an uncaught error included), where it is written synchronously. A
 * SIGKILL or a crash of V8 itself loses what was gathered (docs/operations.md).
 */
function batchedStdout (): pino.DestinationStream {
  // One per process: every app built in it writes to the same descriptor.
  if (stdout) return stdout
  const sonic = pino.destination({ dest: 1, sync: false })
  let lines: string[] = []
  let chars = 0
  const handOn = () => {
    if (lines.length === 0) return
    const batch = lines.join('')
    lines = []
    chars = 0
    sonic.write(batch)
  }
  // Unref'd: the timer never keeps the process alive.
  setInterval(handOn, LOG_FLUSH_MS).unref()
  process.once('exit', () => {
    handOn()
    try { sonic.flushSync() } catch { /* standard output is gone: nothing left to write to */ }
  })
  stdout = {
    write (line: string) {
      lines.push(line)
      chars += line.length
      if (chars >= LOG_BATCH_CHARS) handOn()
    }
  }
  return stdout
}
let stdout: pino.DestinationStream | undefined

export interface LoggingOptions {
  /** false silences logging (tests); a stream receives the log lines (tests read them). */
  logger?: false | { stream: NodeJS.WritableStream; level?: string }
}

function verbose (level: string): boolean {
  return level === 'debug' || level === 'trace'
}

export function serverLogging (
  config: Pick<Config, 'logLevel'>,
  options: LoggingOptions = {}
): Pick<FastifyServerOptions, 'logger' | 'logController'> {
  if (options.logger === false) return { logger: false }
  const level = options.logger?.level || config.logLevel
  return {
    // Through a LogController: Fastify 5 deprecates the top-level disableRequestLogging option (FSTDEP023).
    logController: new LogController({ disableRequestLogging: !verbose(level) }),
    logger: {
      level,
      redact: {
        paths: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-api-key"]'],
        censor: '[redacted]'
      },
      serializers: {
        req: (req: { method: string; url: string; headers: Record<string, unknown>; ip?: string }) => ({
          method: req.method,
          url: pathOf(req.url),
          headers: req.headers,
          remoteAddress: req.ip
        })
      },
      stream: options.logger?.stream ?? batchedStdout()
    }
  }
}

/** A URL without its query string (which may carry variables). */
function pathOf (url: string): string {
  const end = url.indexOf('?')
  return end === -1 ? url : url.slice(0, end)
}

/**
 * What a persisted id may look like to be logged (sha256:<hex>, a hex hash, a manifest key); anything else is left out.
 */
const LOGGABLE_ID = /^[A-Za-z0-9:._-]{1,100}$/
const ID_PARAMS = ['queryId', 'documentId', 'doc_id', 'id']
const APQ_HASH = /"sha256Hash"\s*:\s*"([0-9a-f]{64})"/

/** The persisted query a GET names (by id, or by its APQ hash), for the access line; undefined for anything else. */
function persistedIdOf (query: unknown): string | undefined {
  if (query === null || typeof query !== 'object') return undefined
  const params = query as Record<string, unknown>
  for (const name of ID_PARAMS) {
    const id = params[name]
    if (typeof id === 'string') return LOGGABLE_ID.test(id) ? id : undefined
  }
  const hash = typeof params.extensions === 'string' ? APQ_HASH.exec(params.extensions)?.[1] : undefined
  return hash === undefined ? undefined : `sha256:${hash}`
}

/** The one access line per request, when Fastify's own request logging is off. */
export function accessLog (app: FastifyInstance): void {
  const level = app.log.level
  if (verbose(level) || level === 'silent' || level === 'warn' || level === 'error' || level === 'fatal') return
  app.addHook('onResponse', (request, reply, done) => {
    const persistedId = request.method === 'GET' ? persistedIdOf(request.query) : undefined
    request.log.info(
      {
        method: request.method,
        url: pathOf(request.url),
        persistedId,
        ip: request.ip,
        statusCode: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 10) / 10
      },
      'request completed'
    )
    done()
  })
}
