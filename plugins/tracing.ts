// OpenTelemetry tracing at the HTTP boundary, when an OTLP endpoint is configured (app/core/config/tracing.ts,
// the standard OTEL_* variables). Off (the default), this plugin decorates `tracing: null` and adds
// nothing else: no hook, no route wrapper, no SDK module loaded; the store, the pipeline and the SOAP
// handler are then the plain ones, so a request does no tracing work at all.
//
// On, every HTTP request (WebSocket upgrades aside: each of their operations gets a span of its own)
// is a server span, child of the caller's `traceparent`/`tracestate` when it sent valid ones. The
// answer carries `traceparent` (with `tracestate`) naming that server span: the W3C header, written
// by the same propagator, so a client or proxy can find the server side of its request. (The
// `traceresponse` header of the Trace Context Level 2 drafts is not adopted by OpenTelemetry's SDKs,
// and `Server-Timing` is a browser timing channel.) Each route handler runs with the request's span
// active, so the operation spans (GraphQL, SOAP) and their store spans nest under it; the request's
// log lines carry `trace_id` and `span_id`.
import fp from 'fastify-plugin'
import type { Context, Span } from '@opentelemetry/api'
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteHandlerMethod } from 'fastify'
import type { Tracing } from '../app/core/tracing.ts'
import { withoutCredentials } from '../app/core/config/index.ts'
import { clientAddress } from '../app/core/peers.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /** null when tracing is off. */
    tracing: Tracing | null
  }
  interface FastifyRequest {
    /** Only when tracing is on: the request's server span, and the context it is active in. */
    traceSpan: Span | null
    traceContext: Context | null
  }
}

export default fp(async function tracing (app: FastifyInstance) {
  const settings = app.config.tracing
  if (!settings) {
    app.decorate('tracing', null)
    return
  }
  const [{ startTracing }, { context, trace, SpanKind, SpanStatusCode }, semconv] = await Promise.all([
    import('../app/core/tracing.ts'),
    import('@opentelemetry/api'),
    import('@opentelemetry/semantic-conventions')
  ])
  const tracing = startTracing(settings)
  app.decorate('tracing', tracing)
  app.decorateRequest('traceSpan', null)
  app.decorateRequest('traceContext', null)
  // Spans still buffered are exported before the process goes.
  app.addHook('onClose', () => tracing.shutdown())

  const endServerSpan = (request: FastifyRequest, reply: FastifyReply) => {
    const span = request.traceSpan
    if (!span) return
    request.traceSpan = null
    const status = reply.raw.statusCode
    span.setAttribute(semconv.ATTR_HTTP_RESPONSE_STATUS_CODE, status)
    if (!reply.raw.writableFinished) span.setAttribute(semconv.ATTR_ERROR_TYPE, 'aborted')
    if (status >= 500 || !reply.raw.writableFinished) span.setStatus({ code: SpanStatusCode.ERROR })
    span.end()
  }

  app.addHook('onRequest', function startServerSpan (request, reply, done) {
    if (request.headers.upgrade !== undefined) return done()
    const parent = tracing.extract(request.headers)
    const route = request.routeOptions.url
    const span = tracing.tracer.startSpan(route ? `${request.method} ${route}` : request.method, {
      kind: SpanKind.SERVER,
      attributes: {
        [semconv.ATTR_HTTP_REQUEST_METHOD]: request.method,
        [semconv.ATTR_URL_PATH]: request.url.split('?', 1)[0],
        [semconv.ATTR_URL_SCHEME]: request.protocol,
        [semconv.ATTR_CLIENT_ADDRESS]: clientAddress(request),
        ...(route ? { [semconv.ATTR_HTTP_ROUTE]: route } : {})
      }
    }, parent)
    const active = trace.setSpan(parent, span)
    request.traceSpan = span
    request.traceContext = active
    tracing.inject(active, (name, value) => reply.header(name, value))
    const { traceId, spanId } = span.spanContext()
    request.log = reply.log = request.log.child({ trace_id: traceId, span_id: spanId })
    // 'close' comes for every response: sent in full, hijacked (event streams) or cut off by the client.
    reply.raw.once('close', () => endServerSpan(request, reply))
    done()
  })

  // Every route declared from here on runs its handler inside its request's context.
  app.addHook('onRoute', (route) => {
    const handler = route.handler as RouteHandlerMethod
    route.handler = function inRequestTrace (this: FastifyInstance, request, reply) {
      const active = request.traceContext
      return active ? context.with(active, handler, this, request, reply) : handler.call(this, request, reply)
    } as typeof route.handler
  })
  app.log.info(
    {
      tracesUrl: withoutCredentials(settings.tracesUrl),
      protocol: settings.protocol,
      serviceName: settings.serviceName
    },
    'tracing on (OTLP)'
  )
}, { name: 'tracing', dependencies: ['config'] })
