// OpenTelemetry tracing, end to end: a listening service exports by OTLP over HTTP to a receiver in
// this test (a plain HTTP server on port 0 that records what it is sent), and real clients (fetch,
// node-soap) send W3C trace context. Without an endpoint, tracing is absent from the app's structure.
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { test } from 'tap'
import soap from 'soap'
import { buildApp } from '../../app/app.ts'
import { loadConfig } from '../../app/core/config/index.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { gql, listenTestApp, testConfig, type TestLike } from '../helpers/app.ts'
import { listenSoapApp } from '../soap/helpers.ts'
import { collect, sseClient, wsClient } from '../subscriptions/clients.ts'

interface ExportedSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes: Record<string, unknown>
  status?: { code?: number }
  service: unknown
}

const SERVER = 2
const CLIENT = 3
const INTERNAL = 1

interface AnyValue { stringValue?: string; intValue?: number | string; boolValue?: boolean; doubleValue?: number }
const valueOf = (v: AnyValue) =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue))
const attributes = (list: { key: string; value: AnyValue }[] = []) =>
  Object.fromEntries(list.map((a) => [a.key, valueOf(a.value)]))

/** An OTLP/HTTP receiver: records every export request, and the spans of the JSON ones. */
async function otlpReceiver (t: TestLike) {
  const spans: ExportedSpan[] = []
  const requests: { path: string; contentType: string; bytes: number }[] = []
  const server = createServer((request: IncomingMessage, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const body = Buffer.concat(chunks)
      const contentType = request.headers['content-type'] ?? ''
      requests.push({ path: request.url ?? '', contentType, bytes: body.length })
      if (contentType.startsWith('application/json')) {
        const payload = JSON.parse(body.toString('utf8')) as {
          resourceSpans: {
            resource: { attributes: [] }
            scopeSpans: { spans: (ExportedSpan & { attributes: [] })[] }[]
          }[]
        }
        for (const resourceSpans of payload.resourceSpans) {
          const service = attributes(resourceSpans.resource.attributes)['service.name']
          for (const scope of resourceSpans.scopeSpans) {
            for (const span of scope.spans) spans.push({ ...span, attributes: attributes(span.attributes), service })
          }
        }
      }
      response.writeHead(200, { 'content-type': contentType || 'application/json' })
      response.end(contentType.startsWith('application/json') ? '{}' : '')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, requests }
}

/** Flushes the app's exporter until `found` returns something (the server span ends when its response closes). */
async function exported<T> (
  app: { tracing: { flush(): Promise<void> } | null },
  found: () => T | undefined
): Promise<T> {
  for (;;) {
    await app.tracing!.flush()
    const value = found()
    if (value !== undefined) return value
    await new Promise((resolve) => setImmediate(resolve))
  }
}

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736'
const PARENT_ID = '00f067aa0ba902b7'
const TRACEPARENT = `00-${TRACE_ID}-${PARENT_ID}-01`

test('a GraphQL request with a traceparent: server span under it, operation span with name, type and cost, store spans under that', async (t) => {
  const receiver = await otlpReceiver(t)
  const { app, url } = await listenTestApp(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_SERVICE_NAME: 'tracing-test'
  })
  const { status, headers, body } = await gql(url, 'query Users { users(limit: 2) { id name } }', undefined, {
    traceparent: TRACEPARENT,
    tracestate: 'vendor=abc'
  })
  t.equal(status, 200)
  t.equal(body.data.users.length, 2)

  // The answer names the server span, in the caller's trace, with the caller's tracestate.
  const answered = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(headers.get('traceparent') ?? '')
  t.ok(answered, 'the response carries a traceparent')
  t.equal(answered![1], TRACE_ID)
  t.not(answered![2], PARENT_ID)
  t.equal(headers.get('tracestate'), 'vendor=abc')

  const server = await exported(app, () => receiver.spans.find((s) => s.kind === SERVER && s.traceId === TRACE_ID))
  t.equal(server.parentSpanId, PARENT_ID, 'the server span is a child of the caller\'s span')
  t.equal(server.spanId, answered![2])
  t.equal(server.name, 'POST /graphql')
  t.match(server.attributes, {
    'http.request.method': 'POST',
    'http.route': '/graphql',
    'http.response.status_code': 200,
    'url.path': '/graphql'
  })
  t.equal(server.service, 'tracing-test', 'OTEL_SERVICE_NAME names the resource')
  t.ok(receiver.requests.every((r) => r.path === '/v1/traces'), 'OTEL_EXPORTER_OTLP_ENDPOINT gets /v1/traces appended')

  const operation = receiver.spans.find((s) => s.parentSpanId === server.spanId)
  t.ok(operation, 'the GraphQL operation span is a child of the server span')
  t.equal(operation!.name, 'query Users')
  t.equal(operation!.kind, INTERNAL)
  t.match(operation!.attributes, {
    'graphql.operation.name': 'Users',
    'graphql.operation.type': 'query',
    'gqs.operation.cost': body.extensions.cost.requested
  })

  const store = receiver.spans.filter((s) => s.parentSpanId === operation!.spanId)
  t.ok(store.length >= 1, 'the store calls are children of the operation span')
  t.ok(store.every((s) => s.kind === CLIENT && s.traceId === TRACE_ID))
  t.match(store.find((s) => s.name === 'listUsers')?.attributes, {
    'db.system': 'sqlite',
    'db.system.name': 'sqlite',
    'db.operation.name': 'listUsers'
  })
})

test('the response cache\'s word is on the operation span: a miss executes (store spans under it), a hit ends there', async (t) => {
  const receiver = await otlpReceiver(t)
  const { app, url } = await listenTestApp(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'
  })
  const operationOf = async (traceId: string) => {
    const server = await exported(app, () => receiver.spans.find((s) => s.kind === SERVER && s.traceId === traceId))
    return exported(app, () => receiver.spans.find((s) => s.parentSpanId === server.spanId))
  }
  const traceOf = (headers: Headers) => /^00-([0-9a-f]{32})-/.exec(headers.get('traceparent') ?? '')![1]!
  const first = await gql(url, 'query Cached { users(limit: 2) { id name } }')
  t.equal(first.headers.get('age'), null)
  const miss = await operationOf(traceOf(first.headers))
  t.equal(miss.attributes['gqs.response_cache'], 'miss')
  t.ok(receiver.spans.some((s) => s.parentSpanId === miss.spanId && s.kind === CLIENT), 'executed: store spans under it')

  const second = await gql(url, 'query Cached { users(limit: 2) { id name } }')
  t.equal(second.headers.get('age'), '0')
  const hit = await operationOf(traceOf(second.headers))
  t.equal(hit.name, 'query Cached')
  t.equal(hit.attributes['gqs.response_cache'], 'hit')
  t.equal(hit.attributes['gqs.operation.cost'], second.body.extensions.cost.requested, 'charged as if executed')
  t.notOk(receiver.spans.some((s) => s.parentSpanId === hit.spanId), 'nothing executed under a hit')
})

test('a refused operation is a failed span with its code; without a traceparent the request starts a trace', async (t) => {
  const receiver = await otlpReceiver(t)
  const { app, url } = await listenTestApp(t, {
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json'
  })
  const { headers, body } = await gql(url, 'query Nope { nope }')
  t.equal(body.errors[0].extensions.code, 'GRAPHQL_VALIDATION_FAILED')
  const traceId = /^00-([0-9a-f]{32})-/.exec(headers.get('traceparent') ?? '')?.[1]
  t.ok(traceId)
  const server = await exported(app, () => receiver.spans.find((s) => s.kind === SERVER && s.traceId === traceId))
  t.notOk(server.parentSpanId, 'a root span')
  const operation = receiver.spans.find((s) => s.parentSpanId === server.spanId)
  t.equal(operation?.name, 'GraphQL Operation', 'named by the conventions\' fallback: no operation was admitted')
  t.equal(operation?.status?.code, 2, 'status ERROR')
  t.equal(operation?.attributes['error.type'], 'GRAPHQL_VALIDATION_FAILED')
})

test('a SOAP call by node-soap: server span under its traceparent, SOAP operation span, store spans under it', async (t) => {
  const receiver = await otlpReceiver(t)
  const soapApp = await listenSoapApp(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'
  })
  const client = await soap.createClientAsync(`${soapApp.url}/v1/UserService?wsdl`, {}, `${soapApp.url}/v1/UserService`)
  client.setSecurity(new soap.WSSecurity('partner', 's3cret', { passwordType: 'PasswordText' }))
  client.addHttpHeader('traceparent', TRACEPARENT)
  const [result] = await client.GetUserAsync({ id: '2' })
  t.equal(result.user.name, 'Ada Lovelace')
  t.match(
    client.lastResponseHeaders?.traceparent,
    new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-01$`),
    'the SOAP answer carries the trace context'
  )

  const server = await exported(soapApp.app, () =>
    receiver.spans.find((s) => s.kind === SERVER && s.traceId === TRACE_ID && s.name === 'POST /v1/UserService')
  )
  t.equal(server.parentSpanId, PARENT_ID)
  const operation = receiver.spans.find((s) => s.parentSpanId === server.spanId)
  t.equal(operation?.name, 'v1.UserService/GetUser')
  t.match(operation?.attributes, { 'rpc.system': 'soap', 'rpc.service': 'v1.UserService', 'rpc.method': 'GetUser' })
  t.type(operation?.attributes['gqs.operation.cost'], 'number')
  const storeCalls = receiver.spans.filter((s) => s.parentSpanId === operation?.spanId).map((s) => s.name)
  t.ok(storeCalls.includes('findCredentials'), 'the WS-Security lookup is under the SOAP operation')
  t.ok(storeCalls.includes('usersByIds'), 'the read is under the SOAP operation')

  // A fault marks the SOAP span failed with its code.
  client.setSecurity(new soap.WSSecurity('partner', 'wrong', { passwordType: 'PasswordText' }))
  await t.rejects(client.GetUserAsync({ id: '2' }))
  const failed = await exported(soapApp.app, () =>
    receiver.spans.find((s) => s.attributes['rpc.system'] === 'soap' && s.status?.code === 2)
  )
  t.equal(failed.attributes['error.type'], 'UNAUTHENTICATED')
})

test('operations over WebSocket and server-sent events are spans too, with their store calls under them', async (t) => {
  const receiver = await otlpReceiver(t)
  const { app, url } = await listenTestApp(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'
  })
  const ws = wsClient(url)
  t.teardown(() => ws.dispose())
  const overWs = await collect(ws, 'query OverWs { users(limit: 1) { id } }').done
  t.equal(overWs.values.length, 1)
  const sse = sseClient(url)
  t.teardown(() => sse.dispose())
  const overSse = await collect(sse, 'query OverSse { users(limit: 1) { id } }').done
  t.equal(overSse.values.length, 1)

  const wsOperation = await exported(app, () => receiver.spans.find((s) => s.name === 'query OverWs'))
  t.notOk(wsOperation.parentSpanId, 'a WebSocket operation is a trace of its own (the upgrade is no request span)')
  t.ok(receiver.spans.some((s) => s.parentSpanId === wsOperation.spanId && s.name === 'listUsers'))
  const sseOperation = await exported(app, () => receiver.spans.find((s) => s.name === 'query OverSse'))
  const sseServer = await exported(app, () => receiver.spans.find((s) => s.spanId === sseOperation.parentSpanId))
  t.equal(
    sseServer.name,
    'POST /graphql',
    "an event stream's operation is under its request's span, which ends with the stream"
  )
  t.ok(receiver.spans.some((s) => s.parentSpanId === sseOperation.spanId && s.name === 'listUsers'))
})

test('OTLP protobuf by default, to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given', async (t) => {
  const receiver = await otlpReceiver(t)
  const { app, url } = await listenTestApp(t, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/custom/traces` })
  await gql(url, '{ users(limit: 1) { id } }')
  await exported(app, () => receiver.requests.find((r) => r.bytes > 0))
  t.ok(receiver.requests.length > 0)
  for (const request of receiver.requests) {
    t.equal(request.path, '/custom/traces')
    t.equal(request.contentType, 'application/x-protobuf')
  }
})

test('log lines of a traced request carry its trace and span ids', async (t) => {
  const receiver = await otlpReceiver(t)
  const lines: Record<string, unknown>[] = []
  const stream = new Writable({ write (chunk, _encoding, done) { lines.push(JSON.parse(String(chunk))); done() } })
  const store = openSqliteStore(':memory:')
  await loadDemoData(store)
  const app = await buildApp(
    testConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }),
    { store, logger: { stream, level: 'info' } }
  )
  t.teardown(async () => { await app.close(); await store.close() })
  const url = await app.listen({ host: '127.0.0.1', port: 0 })
  const { headers } = await gql(url, '{ users(limit: 1) { id } }', undefined, { traceparent: TRACEPARENT })
  const spanId = /^00-[0-9a-f]{32}-([0-9a-f]{16})-01$/.exec(headers.get('traceparent') ?? '')?.[1]
  const access = await exported(app, () => lines.find((l) => l.msg === 'request completed'))
  t.equal(access.trace_id, TRACE_ID)
  t.equal(access.span_id, spanId)
})

test('without an OTLP endpoint there is no tracing: no SDK, no hook, no wrapper, no header', async (t) => {
  const offSettings: Record<string, string>[] = [{}, { OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }]
  for (const env of offSettings) {
    const store = openSqliteStore(':memory:')
    await loadDemoData(store)
    const { app, url } = await listenTestApp(t, env, { store })
    t.teardown(() => store.close())
    t.equal(app.config.tracing, null)
    t.equal(app.tracing, null, 'the plugin reports tracing off')
    t.equal(app.store, store, 'the store is not wrapped')
    t.notMatch(app.printRoutes({ includeHooks: true }), /startServerSpan/, 'no tracing hook is registered')
    const { headers } = await gql(url, '{ users(limit: 1) { id } }', undefined, { traceparent: TRACEPARENT })
    t.equal(headers.get('traceparent'), null)
  }
  // With an endpoint, the same listing shows the hook: the assertion above would see it.
  const { app } = await listenTestApp(t, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9/' })
  t.match(app.printRoutes({ includeHooks: true }), /startServerSpan/)
})

test('tracing settings: an endpoint must be OTLP over HTTP', async (t) => {
  const base = { JWT_SECRET: 'x'.repeat(32), PARTNER_SECRET_KEY: 'y'.repeat(32) }
  t.throws(() => loadConfig({ ...base, OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4317' }), /OTEL_EXPORTER_OTLP_ENDPOINT must be an http\(s\) URL/)
  t.throws(() => loadConfig({ ...base, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }), /OTEL_EXPORTER_OTLP_PROTOCOL/)
  t.match(loadConfig({ ...base, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/', OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' }).tracing,
    { tracesUrl: 'http://c:4318/v1/traces', protocol: 'http/protobuf', serviceName: 'graphql-query-service', sampler: 'parentbased_traceidratio', samplerRatio: 0.25 })
})

test('a client-chosen 60 KB operation name is exported capped: span names at 128 characters, attribute values at 256', async (t) => {
  const receiver = await otlpReceiver(t)
  const { app, url } = await listenTestApp(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'
  })
  const name = `Q${'x'.repeat(60_000)}`
  const { body, headers } = await gql(url, `query ${name} { users(limit: 1) { id } }`)
  t.equal(body.data.users.length, 1)
  const traceId = /^00-([0-9a-f]{32})-/.exec(headers.get('traceparent') ?? '')?.[1]
  const operation = await exported(app, () => receiver.spans.find((s) => s.traceId === traceId && s.kind === INTERNAL))
  t.ok(operation.name.length <= 128, `span name of ${operation.name.length} characters`)
  t.match(operation.name, /^query Qxxx/)
  const attribute = String(operation.attributes['graphql.operation.name'])
  t.ok(attribute.length <= 256, `attribute of ${attribute.length} characters`)
  t.ok(
    receiver.spans.every(
      (s) => s.name.length <= 128 && Object.values(s.attributes).every((v) => String(v).length <= 256)
    ),
    'every span within the limits'
  )
})

test('parent-based sampling: a traceparent with the sampled flag off is not traced; OTEL_TRACES_SAMPLER=always_on traces it anyway', async (t) => {
  const unsampled = `00-${TRACE_ID}-${PARENT_ID}-00`
  const receiver = await otlpReceiver(t)
  const { app, url } = await listenTestApp(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'
  })
  await gql(url, '{ users(limit: 1) { id } }', undefined, { traceparent: unsampled })
  const { headers } = await gql(url, '{ users(limit: 1) { id } }')
  const sampledTrace = /^00-([0-9a-f]{32})-/.exec(headers.get('traceparent') ?? '')?.[1]
  await exported(app, () => receiver.spans.find((s) => s.traceId === sampledTrace && s.kind === SERVER))
  t.notOk(
    receiver.spans.some((s) => s.traceId === TRACE_ID),
    "the unsampled caller's request made no span (the default parentbased_always_on)"
  )

  const forced = await otlpReceiver(t)
  const always = await listenTestApp(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: forced.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_TRACES_SAMPLER: 'always_on'
  })
  await gql(always.url, '{ users(limit: 1) { id } }', undefined, { traceparent: unsampled })
  const server = await exported(always.app, () => forced.spans.find((s) => s.traceId === TRACE_ID && s.kind === SERVER))
  t.equal(server.parentSpanId, PARENT_ID, 'always_on: traced, still in the caller\'s trace')
})
