// How the service logs (pino through Fastify), shared with the benchmark's baseline server so both pay
// the same for it. One access line per request (health probes excepted), after the response (request
// id, method, path, persisted query id, client IP as trusted, status, time), without headers. No line
// carries user data: a URL is logged as its path only (a persisted GET's query string holds its
// variables), with the persisted id beside it; bodies are never logged. At info and above (production):
// JSON lines, the access line formatted by hand. At debug and trace (the development default), for a
// person at a terminal: each line on standard output is readable text (`12:00:01.234 INFO  GET /graphql
// 200 3.1 ms`), formatted off the production path.
import { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify'
import { hostname } from 'node:os'
import pino from 'pino'
import { withoutCredentials, type Config } from '../app/core/config/index.ts'
import { clientAddress } from '../app/core/peers.ts'

/** How long a line may wait in memory before it is written (also bounds what a SIGKILL loses). */
const LOG_FLUSH_MS = 200
/** Lines are handed on once this many characters are gathered: one write(2) for a hundred requests or so. */
const LOG_BATCH_CHARS = 16 * 1024
/**
 * What may wait in memory for standard output to be read, in bytes. Past it, lines are dropped and counted:
 * a log reader that stalls (a paused pipe, a blocked collector) must not grow the process until it is
 * killed. Measured: 100000 requests with nobody reading grew a service by 115 MiB before this bound.
 */
export const LOG_BUFFER_MAX_BYTES = 16 * 1024 * 1024

/** Lines dropped because standard output was not read, since the process started (a metric reads it). */
let droppedLines = 0
export const droppedLogLines = (): number => droppedLines

/**
 * Standard output, written off the request's path: lines are gathered in memory and handed to pino's
 * asynchronous destination (sonic-boom) as one string per batch, which it writes with one write(2).
 * A line handed to sonic-boom on its own costs more than the whole line's formatting: its write()
 * measures the UTF-8 length of everything still pending on every call (measured: 6 µs of a persisted
 * GET's CPU at 4 KiB batches). Every line is kept while standard output is read: a batch is handed on
 * when it is full, every LOG_FLUSH_MS, and on exit (an uncaught error included), where it is written
 * synchronously. A SIGKILL or a crash of V8 itself loses what was gathered (docs/operations.md), and
 * an unread standard output what exceeds LOG_BUFFER_MAX_BYTES (counted, and told in one line once
 * lines are written again, with the count since start).
 */
function batchedStdout (): pino.DestinationStream {
  // One per process: every app built in it writes to the same descriptor.
  if (stdout) return stdout
  const sonic = pino.destination({ dest: 1, sync: false, maxLength: LOG_BUFFER_MAX_BYTES })
  let lines: string[] = []
  let chars = 0
  let told = 0
  sonic.on('drop', (batch: string) => {
    for (let i = batch.indexOf('\n'); i !== -1; i = batch.indexOf('\n', i + 1)) droppedLines++
  })
  const handOn = () => {
    if (lines.length === 0) return
    if (droppedLines > told) {
      // Ahead of the batch, with the count since start (as the metric): if the reader is still stalled it
      // is dropped with the batch, and the next batch tells the new count.
      told = droppedLines
      lines.unshift(`{"level":40,"time":${Date.now()},"pid":${process.pid},"hostname":${JSON.stringify(hostname())},` +
        `"dropped":${told},"msg":"log lines dropped: standard output was not read"}\n`)
    }
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

/**
 * Where the server's lines go: the stream a test gave, else standard output (batched), as readable text
 * at debug and trace; null when logging is off.
 */
export function logDestination (options: LoggingOptions = {}, level = 'info'): pino.DestinationStream | null {
  if (options.logger === false) return null
  if (options.logger?.stream) return options.logger.stream
  return verbose(level) ? readable(batchedStdout()) : batchedStdout()
}

const LEVEL_NAMES: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO ', 40: 'WARN ', 50: 'ERROR', 60: 'FATAL' }

/** Each JSON line as one line of text: time, level, message, then the other fields (an error's stack below). */
function readable (destination: pino.DestinationStream): pino.DestinationStream {
  return {
    write (line: string) {
      let entry: Record<string, unknown>
      try { entry = JSON.parse(line) } catch { return destination.write(line) }
      const { level, time, msg, pid: _pid, hostname: _hostname, err, ...fields } = entry
      const clock = new Date(Number(time)).toISOString().slice(11, 23)
      let text = `${clock} ${LEVEL_NAMES[Number(level)] ?? String(level)} `
      if (msg === 'request completed') {
        const { method, url, statusCode, ms, persistedId, reqId } = fields
        text += `${method} ${url} ${statusCode} ${ms} ms${persistedId ? ` ${persistedId}` : ''} (${reqId})`
      } else {
        text += String(msg ?? '')
        for (const [key, value] of Object.entries(fields)) {
          text += ` ${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`
        }
      }
      const stack = (err as { stack?: unknown } | undefined)?.stack
      if (typeof stack === 'string') text += `\n${stack}`
      else if (err !== undefined) text += ` err=${typeof err === 'string' ? err : JSON.stringify(err)}`
      destination.write(`${text}\n`)
    }
  }
}

export function serverLogging (
  config: Pick<Config, 'server'>,
  options: LoggingOptions = {},
  destination = logDestination(options)
): Pick<FastifyServerOptions, 'logger' | 'logController'> {
  if (options.logger === false || destination === null) return { logger: false }
  const level = options.logger?.level || config.server.logLevel
  return {
    // Fastify's own request lines (two per request, the first with every header) are off at every level:
    // the access line is the one line per request. Through a LogController: Fastify 5 deprecates the
    // top-level disableRequestLogging option (FSTDEP023).
    logController: new LogController({ disableRequestLogging: true }),
    logger: {
      level,
      serializers: {
        // A driver's error may quote a URL setting (REDIS_URL, DATABASE_URL…): never its credentials.
        // Runs only for lines that carry an error, never on the access line's path.
        err: redactedError
      },
      stream: destination
    }
  }
}

/** pino's error serializer, without any URL's credentials in the message or the stack. */
function redactedError (err: Error) {
  const serialized = pino.stdSerializers.err(err)
  // Anything but an error (a string) comes back from pino's serializer as it was given.
  if (typeof serialized !== 'object' || serialized === null) return serialized
  // An error-like object may lack either.
  if (serialized.message) serialized.message = withoutCredentials(serialized.message)
  if (serialized.stack) serialized.stack = withoutCredentials(serialized.stack)
  return serialized
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

/** The access line's own fields. */
function accessFields (request: FastifyRequest, reply: FastifyReply) {
  return {
    method: request.method,
    url: pathOf(request.url),
    persistedId: request.method === 'GET' ? persistedIdOf(request.query) : undefined,
    ip: clientAddress(request),
    statusCode: reply.statusCode,
    ms: Math.round(reply.elapsedTime * 10) / 10
  }
}

/** pino's number for the info level, the access line's. */
const INFO = pino.levels.values.info!

/**
 * The one access line per request, except on routes that log at warn and above (the health probes:
 * a flood of probes must not flood the log). At info without tracing (production) it is
 * written to the logger's destination as pino writes a line at info (level, time, pid, hostname, reqId,
 * the fields, msg), formatted here: pino's general path (the child's bindings, a key walk with escaping
 * per value) cost about 8 µs a request, an eighth of a guarded GET, for a line whose shape never
 * changes; every value that can hold arbitrary text goes through JSON.stringify. With tracing on, the
 * request's logger carries the trace and span ids as bindings (plugins/tracing.ts): the line is then
 * logged through it, so it carries them too.
 */
export function accessLog (app: FastifyInstance, destination: pino.DestinationStream | null, traced: boolean): void {
  const level = app.log.level
  if (destination === null || ['silent', 'warn', 'error', 'fatal'].includes(level)) return
  // Through the request's logger: with tracing, for its ids; at debug and trace, for the readable text.
  if (traced || verbose(level)) {
    app.addHook('onResponse', (request, reply, done) => {
      request.log.info(accessFields(request, reply), 'request completed') // a route at warn logs nothing here
      done()
    })
    return
  }
  const base = `,"pid":${process.pid},"hostname":${JSON.stringify(hostname())},"reqId":`
  app.addHook('onResponse', (request, reply, done) => {
    // A route may log at warn and above only (Fastify's per-route logLevel): the health probes.
    if (pino.levels.values[request.log.level]! > INFO) return done()
    const { method, url, persistedId, ip, statusCode, ms } = accessFields(request, reply)
    destination.write(
      `{"level":30,"time":${Date.now()}${base}${JSON.stringify(request.id)},"method":${JSON.stringify(method)}` +
      `,"url":${JSON.stringify(url)}${persistedId === undefined ? '' : `,"persistedId":"${persistedId}"`}` +
      `,"ip":${JSON.stringify(ip)},"statusCode":${statusCode},"ms":${ms},"msg":"request completed"}\n`
    )
    done()
  })
}
