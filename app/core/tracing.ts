// OpenTelemetry tracing, instrumented explicitly at the service's own boundaries: the HTTP request
// (plugins/tracing.ts), each GraphQL operation (the admission pipeline), each SOAP operation and each
// store call. Loaded only when an OTLP endpoint is configured (plugins/tracing.ts imports this module
// on demand): with tracing off nothing of the SDK is loaded, and no hook, wrapper or span exists.
//
// No auto-instrumentation (require-in-the-middle patching of http, pg, graphql...): it rewrites other
// packages' internals at load time, which is exactly the undocumented surface this project refuses to
// depend on, and its cost per request is whatever the patched libraries happen to do. Spans made here
// are the ones the README lists, through documented OpenTelemetry APIs only, at a cost we can read.
//
// The tracer provider is the app's own, not registered globally, so two apps in one process (tests)
// export to their own collectors. The one global is the context manager (AsyncLocalStorage): it is
// what lets a store call find the operation it serves without threading a span through the domain.
import { context, trace, SpanKind, SpanStatusCode, ROOT_CONTEXT, defaultTextMapGetter, type Attributes, type Context, type Span, type TextMapSetter, type Tracer } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator, parseKeyPairsIntoRecord } from '@opentelemetry/core'
import { OTLPTraceExporter as OtlpJsonExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as OtlpProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type Sampler
} from '@opentelemetry/sdk-trace-base'
import {
  ATTR_DB_OPERATION_NAME, ATTR_DB_SYSTEM_NAME, ATTR_ERROR_TYPE, ATTR_RPC_METHOD, ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION
} from '@opentelemetry/semantic-conventions'
import { readFileSync } from 'node:fs'
import type { ExecutionResult } from 'graphql'
import type { TracingConfig } from './config/tracing.ts'
import { AppError } from './errors.ts'
import type { AdmittedOperation, OperationPhases } from './operation-phases.ts'
import type { Store } from './store/types.ts'

// The GraphQL, legacy database and RPC-system attributes are still "incubating" in the semantic
// conventions package, whose guidance is to copy such names rather than import them.
const ATTR_GRAPHQL_OPERATION_NAME = 'graphql.operation.name'
const ATTR_GRAPHQL_OPERATION_TYPE = 'graphql.operation.type'
const ATTR_DB_SYSTEM = 'db.system'
const ATTR_RPC_SYSTEM = 'rpc.system'
const ATTR_RPC_SERVICE = 'rpc.service'
/** Ours, outside the conventions' namespaces: the operation's computed cost, in cost units. */
export const ATTR_OPERATION_COST = 'gqs.operation.cost'
/** Ours: the response cache's word on a query, `hit` (served from it, not executed) or `miss`. */
export const ATTR_RESPONSE_CACHE = 'gqs.response_cache'

const DB_SYSTEM = { sqlite: 'sqlite', postgres: 'postgresql' } as const

// A client chooses an operation's name (and a URL's path): without a cap, a 60 KB name is exported as
// a 60 KB span name and attribute on every span of every request that sends it. The SDK truncates
// attribute values (spanLimits.attributeValueLengthLimit); span names and status messages we cut here.
const ATTRIBUTE_VALUE_LENGTH_LIMIT = 256
const SPAN_NAME_LENGTH_LIMIT = 128

/** `text` cut to `max` characters, marked as cut. */
function capped (text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`
}

const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }

export interface Tracing {
  readonly tracer: Tracer
  /**
   * The trace context of an incoming request's headers (traceparent,
   * tracestate); the root context when absent or malformed.
   */
  extract (headers: Record<string, unknown>): Context
  /** Writes `ctx`'s trace context as traceparent (and tracestate) headers through `set`. */
  inject (ctx: Context, set: (name: string, value: string) => void): void
  /** The store whose every call (close aside) is a database client span under the active operation. */
  store (store: Store): Store
  /** A pipeline's operation calls, each operation a span: from admission to the end of its execution. */
  pipeline<Request, A extends AdmittedOperation> (pipeline: OperationPhases<Request, A>): OperationPhases<Request, A>
  /**
   * Runs a SOAP request under a span of its own; `describe` names its operation and cost once known,
   * and an answer carrying a fault (its catalogue code) marks the span failed.
   */
  soapOperation<T extends { fault?: string }> (
    service: string,
    run: (describe: (operation: string, cost: number) => void) => Promise<T>
  ): Promise<T>
  /** Exports every ended span now (tests; shutdown does it too). */
  flush (): Promise<void>
  shutdown (): Promise<void>
}

function samplerOf (config: TracingConfig): Sampler {
  const ratio = new TraceIdRatioBasedSampler(config.samplerRatio)
  switch (config.sampler) {
    case 'always_on': return new AlwaysOnSampler()
    case 'always_off': return new AlwaysOffSampler()
    case 'traceidratio': return ratio
    case 'parentbased_always_off': return new ParentBasedSampler({ root: new AlwaysOffSampler() })
    case 'parentbased_traceidratio': return new ParentBasedSampler({ root: ratio })
    default: return new ParentBasedSampler({ root: new AlwaysOnSampler() })
  }
}

/**
 * The catalogue code of an error answered to the client (AppError, or a GraphQL error list such as ValidationFailed).
 */
function codeOf (err: unknown): string | undefined {
  if (err instanceof AppError) return err.code
  const first = (err as { errors?: { extensions?: { code?: unknown } }[] })?.errors?.[0]
  const code = first?.extensions?.code
  return typeof code === 'string' ? code : undefined
}

/**
 * Marks a span failed: the catalogue code as error.type; an
 * unexpected error is recorded, its message kept out of the status.
 */
function recordFailure (span: Span, err: unknown): void {
  const code = codeOf(err)
  span.setAttribute(ATTR_ERROR_TYPE, code ?? (err as Error)?.name ?? 'Error')
  if (!code) span.recordException(err as Error)
  span.setStatus({
    code: SpanStatusCode.ERROR,
    message: code ? capped((err as Error).message, ATTRIBUTE_VALUE_LENGTH_LIMIT) : undefined
  })
}

const headerSetter: TextMapSetter<(name: string, value: string) => void> = { set: (set, key, value) => set(key, value) }

export function startTracing (config: TracingConfig): Tracing {
  // Registered once per process (it refuses a second registration); never disabled, as other apps may use it.
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  const Exporter = config.protocol === 'http/json' ? OtlpJsonExporter : OtlpProtobufExporter
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: config.serviceName, [ATTR_SERVICE_VERSION]: version }),
    sampler: samplerOf(config),
    spanLimits: { attributeValueLengthLimit: ATTRIBUTE_VALUE_LENGTH_LIMIT },
    spanProcessors: [
      new BatchSpanProcessor(new Exporter({ url: config.tracesUrl, headers: parseKeyPairsIntoRecord(config.headers) }))
    ]
  })
  const tracer = provider.getTracer('graphql-query-service', version)
  const propagator = new W3CTraceContextPropagator()

  /** Runs `run` with `span` as the active span, ending it with the outcome. */
  async function within<T> (span: Span, run: () => Promise<T>): Promise<T> {
    try {
      return await context.with(trace.setSpan(context.active(), span), run)
    } catch (err) {
      recordFailure(span, err)
      throw err
    } finally {
      span.end()
    }
  }

  function store (inner: Store): Store {
    const baseAttributes: Attributes = {
      [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM[inner.kind],
      [ATTR_DB_SYSTEM]: DB_SYSTEM[inner.kind]
    }
    const traced: Record<string, unknown> = {}
    // Every method, so calls added to the Store interface later are traced without a change here.
    for (const [name, method] of Object.entries(inner)) {
      // close and watchChanges serve no operation (watchChanges returns its watch at once, not a promise).
      if (typeof method !== 'function' || name === 'close' || name === 'watchChanges') continue
      traced[name] = (...args: unknown[]) => {
        // Only as part of a traced operation: start-up work and background pings make no root spans.
        if (!trace.getSpan(context.active())) return method.apply(inner, args)
        const span = tracer.startSpan(name, {
          kind: SpanKind.CLIENT,
          attributes: { ...baseAttributes, [ATTR_DB_OPERATION_NAME]: name }
        })
        return within(span, () => method.apply(inner, args))
      }
    }
    return { ...inner, ...traced } as Store
  }

  function pipeline<Request, A extends AdmittedOperation> (
    inner: OperationPhases<Request, A>
  ): OperationPhases<Request, A> {
    // An admitted operation's span, ended when its execution (or its subscription's start) ends.
    const spans = new WeakMap<A, Span>()
    const outcome = (span: Span, result: ExecutionResult) => {
      const first = result.errors?.[0]
      if (!first) return
      span.setAttribute(ATTR_ERROR_TYPE, String(first.extensions?.code ?? 'GraphQLError'))
      span.setStatus({ code: SpanStatusCode.ERROR, message: capped(first.message, ATTRIBUTE_VALUE_LENGTH_LIMIT) })
    }
    const run = async <T extends ExecutionResult | AsyncIterable<unknown>>(
      admission: A,
      start: () => Promise<T>
    ): Promise<T> => {
      const span = spans.get(admission)
      if (!span) return start()
      spans.delete(admission)
      return within(span, async () => {
        const result = await start()
        if (!(Symbol.asyncIterator in result)) outcome(span, result)
        return result
      })
    }
    return {
      async admit (request) {
        // Named by the conventions' fallback until the operation is known.
        const span = tracer.startSpan('GraphQL Operation')
        let admission: A
        try {
          admission = await context.with(trace.setSpan(context.active(), span), () => inner.admit(request))
        } catch (err) {
          recordFailure(span, err)
          span.end()
          throw err
        }
        const { name, type } = admission.operation
        span.updateName(capped(name ? `${type} ${name}` : type, SPAN_NAME_LENGTH_LIMIT))
        span.setAttributes({ [ATTR_GRAPHQL_OPERATION_TYPE]: type, [ATTR_OPERATION_COST]: admission.cost.requested })
        if (name) span.setAttribute(ATTR_GRAPHQL_OPERATION_NAME, name)
        spans.set(admission, span)
        return admission
      },
      execute: (admission, root, reads, as) => run(admission, () => inner.execute(admission, root, reads, as)),
      subscribe: (admission) => run(admission, () => inner.subscribe(admission)),
      cached (admission, outcome) {
        inner.cached(admission, outcome)
        const span = spans.get(admission)
        if (!span) return
        span.setAttribute(ATTR_RESPONSE_CACHE, outcome)
        // A hit is the operation's end: nothing executes after it.
        if (outcome === 'hit') {
          spans.delete(admission)
          span.end()
        }
      }
    }
  }

  return {
    tracer,
    extract: (headers) => propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter),
    inject: (ctx, set) => propagator.inject(ctx, set, headerSetter),
    store,
    pipeline,
    soapOperation (service, run) {
      const span = tracer.startSpan(service, { attributes: { [ATTR_RPC_SYSTEM]: 'soap', [ATTR_RPC_SERVICE]: service } })
      return within(span, async () => {
        const answer = await run((operation, cost) => {
          span.updateName(capped(`${service}/${operation}`, SPAN_NAME_LENGTH_LIMIT))
          span.setAttributes({ [ATTR_RPC_METHOD]: operation, [ATTR_OPERATION_COST]: cost })
        })
        if (answer.fault) {
          span.setAttribute(ATTR_ERROR_TYPE, answer.fault)
          span.setStatus({ code: SpanStatusCode.ERROR })
        }
        return answer
      })
    },
    flush: () => provider.forceFlush(),
    shutdown: () => provider.shutdown()
  }
}
