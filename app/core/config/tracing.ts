// OpenTelemetry tracing, from OpenTelemetry's own variable names (its SDK environment specification), so
// collectors' and platforms' usual settings work unchanged. Off (no SDK loaded, no hooks, no spans) unless an
// OTLP endpoint is set.
import { area, optional, type AreaResult } from './area.ts'

export const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio'
] as const

export const tracing = area({
  key: 'tracing',
  title: 'Tracing (OpenTelemetry)',
  about: 'OpenTelemetry\'s standard variables. Off unless an OTLP endpoint is set: then no SDK is loaded and no request does any tracing work.',
  settings: {
    OTEL_SDK_DISABLED: { type: 'boolean', default: false, doc: 'true turns tracing off even with an endpoint' },
    OTEL_EXPORTER_OTLP_ENDPOINT: { type: 'string', doc: 'a collector\'s OTLP/HTTP base URL (/v1/traces is appended)' },
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: { type: 'string', doc: 'the full traces URL, used as is (wins over the one above)' },
    OTEL_EXPORTER_OTLP_PROTOCOL: { type: 'string', enum: ['http/protobuf', 'http/json'], default: 'http/protobuf', doc: 'or http/json (gRPC is not supported); _TRACES_PROTOCOL wins' },
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: { type: 'string', enum: ['http/protobuf', 'http/json'], doc: 'wins over `OTEL_EXPORTER_OTLP_PROTOCOL` for traces' },
    OTEL_EXPORTER_OTLP_HEADERS: { type: 'string', default: '', doc: 'export request headers, k=v,k2=v2 (e.g. a vendor\'s key); _TRACES_HEADERS wins' },
    OTEL_EXPORTER_OTLP_TRACES_HEADERS: { type: 'string', doc: 'wins over `OTEL_EXPORTER_OTLP_HEADERS` for traces' },
    OTEL_SERVICE_NAME: { type: 'string', default: 'graphql-query-service', doc: 'the `service.name` of exported spans' },
    OTEL_TRACES_SAMPLER: { type: 'string', enum: TRACE_SAMPLERS, default: 'parentbased_always_on', doc: 'always_on, always_off, traceidratio, parentbased_always_off, parentbased_traceidratio' },
    OTEL_TRACES_SAMPLER_ARG: { type: 'number', minimum: 0, maximum: 1, default: 1, doc: 'the ratio of the *traceidratio samplers, 0 to 1' }
  },
  // As the OpenTelemetry specification says: the traces endpoint is used as it is, the general one gets
  // /v1/traces appended; the signal-specific protocol and headers win over the general ones.
  read: (e, { problems }) => {
    const tracesEndpoint = optional(e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
    const endpoint = optional(e.OTEL_EXPORTER_OTLP_ENDPOINT)
    if (e.OTEL_SDK_DISABLED || (!tracesEndpoint && !endpoint)) return null
    const tracesUrl = tracesEndpoint ?? `${endpoint!.replace(/\/+$/, '')}/v1/traces`
    if (!/^https?:\/\/[^\s]+$/.test(tracesUrl)) {
      problems.push(
        `${tracesEndpoint ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT'} must be an http(s) URL (OTLP over HTTP; gRPC is not supported)`
      )
    }
    return {
      /** Where spans are POSTed (OTLP over HTTP). */
      tracesUrl,
      protocol: e.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? e.OTEL_EXPORTER_OTLP_PROTOCOL,
      /** Extra export request headers (e.g. a vendor's API key), as the variable's text: k=v,k2=v2. */
      headers: optional(e.OTEL_EXPORTER_OTLP_TRACES_HEADERS) ?? e.OTEL_EXPORTER_OTLP_HEADERS,
      serviceName: e.OTEL_SERVICE_NAME,
      sampler: e.OTEL_TRACES_SAMPLER,
      /** The ratio of the *traceidratio samplers (0 to 1). */
      samplerRatio: e.OTEL_TRACES_SAMPLER_ARG
    }
  }
})

/** Tracing's settings when it is on. */
export type TracingConfig = NonNullable<AreaResult<typeof tracing>>
