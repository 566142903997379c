// The one place where every setting, limit and mode is read from the environment, typed and defaulted.
// Two profiles: production (NODE_ENV=production: safe defaults, secrets required) and development
// (anything else: introspection, query UI and ad-hoc queries open, a fixed development JWT secret).
// Each variable is declared once, in `schema`: env-schema (Ajv) validates, coerces and defaults it there, and
// the `Env` type is derived from that same `as const` schema, so the values come out typed with no casts.
// Kept over hand-written readers because Ajv's coercion, defaults and messages stay exactly what they were.
// Commands that only open the store and check operations read a part of it (loadCommandConfig: the store's
// location and the limits, the same entries of the same schema), so they need no secret of the service.
import { X509Certificate, createPrivateKey } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parseEnv } from 'node:util'
import envSchema from 'env-schema'
import { trustProxyRanges } from './peers.ts'
import { defaultMaxConnections, openFilesLimit } from './descriptors.ts'
import type { RedisAddress } from './redis-address.ts'
import { DEFAULT_MAX_BYTES, DEFAULT_TTL_MS, type ResponseCacheSettings } from './cache/create.ts'

export type Profile = 'production' | 'development'

export interface Config {
  profile: Profile
  host: string
  port: number
  logLevel: string
  bodyLimitBytes: number
  /**
   * Longest a client may take to send a whole request, headers
   * and body (slow senders get 408 and are closed); 0 = no limit.
   */
  requestTimeoutMs: number
  /** A connection with no traffic either way for this long is closed (clients that stop reading); 0 = no limit. */
  connectionTimeoutMs: number
  /** Open connections per direct peer address, counted on the sockets (TRUST_PROXY peers exempt); 0 = no cap. */
  maxConnectionsPerIp: number
  /**
   * Open connections of all listeners together (split in
   * app/core/descriptors.ts), below the open-files limit by default; 0 = no cap.
   */
  maxConnections: number
  /**
   * How long a finished readiness check answers /health/ready
   * (concurrent calls share one check); 0 = every call checks.
   */
  readinessCacheMs: number
  /** Seconds a graceful shutdown may take before the process exits anyway. */
  shutdownGraceMs: number
  /** On shutdown, idle keep-alive connections stay open this long (a request arriving on one is served), then close. */
  shutdownIdleDrainMs: number

  databaseUrl: string | null
  databasePoolSize: number
  /** PostgreSQL schema to use (created if missing); null keeps the connection's search_path. */
  databaseSchema: string | null
  /** application_name of the service's PostgreSQL connections (pg_stat_activity), so operators can find or end them. */
  databaseApplicationName: string
  sqlitePath: string
  demoData: boolean
  /** The Redis of shared state (budgets, APQ, nonces, events; and cached answers unless they have their own). */
  redis: RedisAddress | null
  /** Prefix for every Redis key and channel, so several deployments (or test files) can share a server. */
  redisPrefix: string

  jwt: {
    algorithms: string[]
    secret: string | null
    publicKey: string | null
    privateKey: string | null
    issuer: string | null
    audience: string | null
    clockToleranceSec: number
    /** Longest lifetime a token may claim (`exp - iat`, or `exp - now` without `iat`), seconds. */
    maxLifetimeSec: number
  }

  limits: {
    maxDepth: number
    /** Longest document text accepted (characters), checked before anything is parsed. */
    maxQueryLength: number
    /** Most tokens a document may have (graphql-js stops parsing past it). */
    maxQueryTokens: number
    /** Estimated bytes of parsed, validated and compiled documents kept for reuse (ad-hoc and APQ texts). */
    planCacheBytes: number
    /** Cost of each mutation field on top of its selection. */
    mutationCost: number
    /** Most mutation fields (aliases included) in one operation. */
    maxMutationsPerOperation: number
    /** Most aliases in one operation, through its fragments. */
    maxAliases: number
    /** Most directives on one field, and in one operation. */
    maxDirectivesPerField: number
    maxDirectives: number
    /** Most validation errors in one answer (each validation rule reports its first only). */
    maxValidationErrors: number
    /** Largest answer (bytes of JSON) an operation may produce; larger ones are refused with RESPONSE_TOO_LARGE. */
    maxResponseBytes: number
    budgets: { anonymous: number; USER: number; ADMIN: number; SERVICE: number }
    timeoutMs: number
    maxStringLength: number
    maxListLength: number
    maxPageSize: number
    maxBatchSize: number
    /** Largest `target` Subscription.count accepts. */
    maxCountTarget: number
    rateWindowMs: number
    rateRequests: number
    rateCostUnits: number
    /**
     * How instances share the budgets through Redis: `leases` (each takes a share of a caller's window
     * ahead, spent with no round trip) or `per-request` (a round trip for every request). Unused without Redis.
     */
    rateCounting: 'leases' | 'per-request'
  }

  trustProxy: string[]
  /** Load shedding (@fastify/under-pressure): 503 + Retry-After past a threshold; 0 turns a check off. */
  pressure: {
    maxEventLoopDelayMs: number
    maxEventLoopUtilization: number
    maxHeapUsedBytes: number
    maxRssBytes: number
    sampleIntervalMs: number
    retryAfterSec: number
  }
  corsOrigins: string[]
  /**
   * Prometheus metrics: null = GET /metrics on the API port (development
   * default), 0 = not served (production default), else their own port.
   */
  metricsPort: number | null
  introspection: boolean
  queryUi: boolean
  persistedOnly: boolean
  persistedManifest: string | null
  /** App deployments (app/graphql/app-deployments.ts). */
  deployments: {
    /** The active operations' texts an instance holds in memory, at most: a publish past it is refused. */
    maxBytes: number
    /** How often an instance writes the requests it counted per deployment to the store. */
    usageFlushMs: number
  }
  apqMaxEntries: number
  /** Estimated bytes of registered APQ texts kept in this process (Redis bounds its registry by APQ_MAX_ENTRIES). */
  apqMaxBytes: number
  /** APQ texts longer than this run but are not registered (bounds the registry's memory). */
  apqMaxDocumentBytes: number
  cacheMaxAgeSec: number
  /** How many persisted GET responses' ETags are remembered for If-None-Match (304 without executing). */
  cacheMaxEntries: number
  /** Estimated bytes of those ETags' entries (their keys hold the URL). */
  cacheMaxBytes: number
  /** The shared response cache of query answers (app/core/cache/): on or off, its TTL and its in-process byte bound. */
  responseCache: ResponseCacheSettings

  /**
   * The secret page cursors' signing key is derived from:
   * CURSOR_SECRET, else PARTNER_SECRET_KEY (under a label of its own).
   */
  cursorSecret: string

  soap: {
    /** The public base URL written as the WSDL's endpoint address; null: the address the request came to. */
    publicUrl: string | null
    /** Base of the contract's namespaces (one per version: <base>/v1/UserService); never the listening address. */
    namespaceBase: string
    maxAgeSec: number
    /** Seals partners' passwords at rest (PasswordDigest needs them in plain on the server). */
    partnerSecretKey: string
    /** Most elements in one SOAP message, and most attributes (namespace declarations included) on one element. */
    maxElements: number
    maxAttributes: number
    /** Accept RSA-SHA1 signatures and SHA-1 digests from signing partners (legacy toolkits only). */
    allowSha1: boolean
    /** SOAP_SIGNING_KEY and SOAP_SIGNING_CERT, read at start: replies to signed requests are signed; null: unsigned. */
    signing: SoapSigning | null
  }
  ws: {
    allowedOrigins: string[]
    initTimeoutMs: number
    maxConnectionsPerClient: number
    maxSubscriptionsPerConnection: number
    maxMessageBytes: number
    /** Interval of protocol keep-alive messages on idle WebSocket connections; 0 turns them off. */
    keepAliveMs: number
    /**
     * Frames (pings included) and bytes one connection may send per second on average (bursts up to a
     * second's worth); over either, it is closed (1008).
     */
    maxMessagesPerSecond: number
    maxReceivedBytesPerSecond: number
    /** Active subscriptions of one caller (user, or IP when anonymous) across its connections and carriers. */
    maxSubscriptionsPerCaller: number
    /** Unsent bytes past which a subscriber (WebSocket or event stream) is closed: it stopped reading. */
    maxBufferedBytesPerSubscriber: number
    /** Longest life of a WebSocket connection or an event stream (less up to a tenth at random); 0: no limit. */
    maxLifetimeMs: number
  }
  /** OpenTelemetry tracing, from the standard OTEL_* variables; null: off (no SDK loaded, no hooks, no spans). */
  tracing: TracingConfig | null
}

export type OtlpProtocol = 'http/protobuf' | 'http/json'
export const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio'
] as const

export interface TracingConfig {
  /**
   * Where spans are POSTed (OTLP over HTTP): OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
   * or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces.
   */
  tracesUrl: string
  protocol: OtlpProtocol
  /** Extra export request headers (e.g. a vendor's API key), as the OTEL_EXPORTER_OTLP_HEADERS text: k=v,k2=v2. */
  headers: string
  serviceName: string
  sampler: typeof TRACE_SAMPLERS[number]
  /** The ratio of the *traceidratio samplers (0 to 1). */
  samplerRatio: number
}

export const DEV_JWT_SECRET = 'development-only-secret-change-me-0123456789abcdef'
const DEV_PARTNER_SECRET_KEY = 'development-only-partner-key-change-me-0123456789'

// The contract's namespace must not change with the deployment (stubs generated against one
// environment must work against every other): a fixed URI. A URN, so it is never mistaken for an address.
const DEFAULT_SOAP_NAMESPACE_BASE = 'urn:graphql-query-service:soap'

// Every variable, with its type; profile-dependent defaults are applied in loadConfig.
const schema = {
  type: 'object',
  properties: {
    NODE_ENV: { type: 'string', default: 'development' },
    HOST: { type: 'string' },
    PORT: { type: 'integer', minimum: 0, maximum: 65535, default: 3000 },
    LOG_LEVEL: { type: 'string' },
    BODY_LIMIT_BYTES: { type: 'integer', minimum: 1024, default: 1048576 },
    REQUEST_TIMEOUT_MS: { type: 'integer', minimum: 0, default: 30000 },
    CONNECTION_TIMEOUT_MS: { type: 'integer', minimum: 0, default: 60000 },
    MAX_CONNECTIONS_PER_IP: { type: 'integer', minimum: 0, default: 100 },
    MAX_CONNECTIONS: { type: 'integer', minimum: 0 },
    READINESS_CACHE_MS: { type: 'integer', minimum: 0, maximum: 60000, default: 1000 },
    SHUTDOWN_GRACE_MS: { type: 'integer', minimum: 0, default: 10000 },
    SHUTDOWN_IDLE_DRAIN_MS: { type: 'integer', minimum: 0 },
    DATABASE_URL: { type: 'string' },
    DATABASE_POOL_SIZE: { type: 'integer', minimum: 1, default: 10 },
    DATABASE_SCHEMA: { type: 'string' },
    DATABASE_APPLICATION_NAME: { type: 'string', default: 'graphql-query-service' },
    SQLITE_PATH: { type: 'string', default: 'data/service.db' },
    DEMO_DATA: { type: 'boolean' },
    REDIS_URL: { type: 'string' },
    REDIS_CLUSTER_NODES: { type: 'string' },
    REDIS_SENTINELS: { type: 'string' },
    REDIS_PREFIX: { type: 'string', default: 'gqs:' },
    JWT_ALGORITHMS: { type: 'string' },
    JWT_SECRET: { type: 'string' },
    JWT_PUBLIC_KEY: { type: 'string' },
    JWT_PRIVATE_KEY: { type: 'string' },
    JWT_ISSUER: { type: 'string' },
    JWT_AUDIENCE: { type: 'string' },
    JWT_CLOCK_TOLERANCE_SEC: { type: 'integer', minimum: 0, maximum: 300, default: 5 },
    JWT_MAX_LIFETIME_SEC: { type: 'integer', minimum: 60, maximum: 2592000, default: 86400 },
    MAX_DEPTH: { type: 'integer', minimum: 1, default: 10 },
    MAX_QUERY_LENGTH: { type: 'integer', minimum: 100, default: 65536 },
    MAX_QUERY_TOKENS: { type: 'integer', minimum: 100, default: 10000 },
    PLAN_CACHE_BYTES: { type: 'integer', minimum: 0, default: 67108864 },
    MAX_RESPONSE_BYTES: { type: 'integer', minimum: 1024, default: 8388608 },
    MUTATION_COST: { type: 'integer', minimum: 1, default: 10 },
    MAX_MUTATIONS_PER_OPERATION: { type: 'integer', minimum: 1, default: 10 },
    MAX_ALIASES: { type: 'integer', minimum: 0, default: 15 },
    MAX_DIRECTIVES_PER_FIELD: { type: 'integer', minimum: 0, default: 4 },
    MAX_DIRECTIVES: { type: 'integer', minimum: 0, default: 50 },
    MAX_VALIDATION_ERRORS: { type: 'integer', minimum: 1, default: 10 },
    COST_BUDGET_ANONYMOUS: { type: 'integer', minimum: 1, default: 1000 },
    COST_BUDGET_USER: { type: 'integer', minimum: 1, default: 10000 },
    COST_BUDGET_ADMIN: { type: 'integer', minimum: 1, default: 100000 },
    COST_BUDGET_SERVICE: { type: 'integer', minimum: 1, default: 100000 },
    QUERY_TIMEOUT_MS: { type: 'integer', minimum: 1, default: 10000 },
    MAX_STRING_LENGTH: { type: 'integer', minimum: 1, default: 1000 },
    MAX_LIST_LENGTH: { type: 'integer', minimum: 1, default: 100 },
    MAX_PAGE_SIZE: { type: 'integer', minimum: 1, default: 100 },
    MAX_BATCH_SIZE: { type: 'integer', minimum: 0, default: 0 },
    MAX_COUNT_TARGET: { type: 'integer', minimum: 0, default: 100 },
    RATE_LIMIT_WINDOW_MS: { type: 'integer', minimum: 1000, default: 60000 },
    RATE_LIMIT_REQUESTS: { type: 'integer', minimum: 1, default: 100 },
    RATE_LIMIT_COST: { type: 'integer', minimum: 1, default: 100000 },
    RATE_LIMIT_COUNTING: { type: 'string', enum: ['leases', 'per-request'], default: 'leases' },
    TRUST_PROXY: { type: 'string', default: '' },
    PRESSURE_MAX_EVENT_LOOP_DELAY_MS: { type: 'integer', minimum: 0, default: 200 },
    PRESSURE_MAX_EVENT_LOOP_UTILIZATION: { type: 'number', minimum: 0, maximum: 1, default: 0 },
    PRESSURE_MAX_HEAP_USED_BYTES: { type: 'integer', minimum: 0, default: 0 },
    PRESSURE_MAX_RSS_BYTES: { type: 'integer', minimum: 0, default: 0 },
    PRESSURE_SAMPLE_INTERVAL_MS: { type: 'integer', minimum: 10, default: 500 },
    PRESSURE_RETRY_AFTER_SEC: { type: 'integer', minimum: 1, default: 5 },
    CORS_ORIGINS: { type: 'string', default: '' },
    METRICS_PORT: { type: 'integer', minimum: 0, maximum: 65535 },
    INTROSPECTION: { type: 'boolean' },
    QUERY_UI: { type: 'boolean' },
    PERSISTED_ONLY: { type: 'boolean' },
    PERSISTED_MANIFEST: { type: 'string' },
    DEPLOYMENTS_MAX_BYTES: { type: 'integer', minimum: 0, default: 268435456 },
    DEPLOYMENT_USAGE_FLUSH_MS: { type: 'integer', minimum: 100, maximum: 600000, default: 1000 },
    APQ_MAX_ENTRIES: { type: 'integer', minimum: 0, default: 10000 },
    APQ_MAX_BYTES: { type: 'integer', minimum: 0, default: 33554432 },
    APQ_MAX_DOCUMENT_BYTES: { type: 'integer', minimum: 0, default: 16384 },
    CACHE_MAX_AGE_SEC: { type: 'integer', minimum: 0, default: 60 },
    CACHE_MAX_ENTRIES: { type: 'integer', minimum: 0, default: 10000 },
    CACHE_MAX_BYTES: { type: 'integer', minimum: 0, default: 16777216 },
    RESPONSE_CACHE: { type: 'boolean' },
    RESPONSE_CACHE_TTL_MS: { type: 'integer', minimum: 1000, maximum: 86400000, default: DEFAULT_TTL_MS },
    RESPONSE_CACHE_MAX_BYTES: { type: 'integer', minimum: 0, default: DEFAULT_MAX_BYTES },
    RESPONSE_CACHE_REDIS_URL: { type: 'string' },
    RESPONSE_CACHE_REDIS_CLUSTER_NODES: { type: 'string' },
    SOAP_PUBLIC_URL: { type: 'string' },
    SOAP_NAMESPACE_BASE: { type: 'string', default: DEFAULT_SOAP_NAMESPACE_BASE },
    SOAP_MAX_ELEMENTS: { type: 'integer', minimum: 10, default: 1000 },
    SOAP_MAX_ATTRIBUTES: { type: 'integer', minimum: 4, default: 32 },
    WSSE_MAX_AGE_SEC: { type: 'integer', minimum: 1, default: 300 },
    WSSE_ALLOW_SHA1: { type: 'boolean', default: false },
    SOAP_SIGNING_KEY: { type: 'string' },
    SOAP_SIGNING_CERT: { type: 'string' },
    PARTNER_SECRET_KEY: { type: 'string' },
    CURSOR_SECRET: { type: 'string' },
    WS_ALLOWED_ORIGINS: { type: 'string', default: '' },
    WS_INIT_TIMEOUT_MS: { type: 'integer', minimum: 1, default: 3000 },
    WS_MAX_CONNECTIONS_PER_CLIENT: { type: 'integer', minimum: 1, default: 50 },
    WS_MAX_SUBSCRIPTIONS_PER_CONNECTION: { type: 'integer', minimum: 1, default: 20 },
    WS_MAX_MESSAGE_BYTES: { type: 'integer', minimum: 256, default: 65536 },
    WS_KEEP_ALIVE_MS: { type: 'integer', minimum: 0, default: 15000 },
    WS_MAX_MESSAGES_PER_SECOND: { type: 'integer', minimum: 1, default: 100 },
    WS_MAX_RECEIVED_BYTES_PER_SECOND: { type: 'integer', minimum: 1024, default: 1048576 },
    SUBSCRIPTIONS_MAX_PER_CALLER: { type: 'integer', minimum: 1, default: 100 },
    SUBSCRIBER_MAX_BUFFERED_BYTES: { type: 'integer', minimum: 65536, default: 4194304 },
    SUBSCRIBER_MAX_LIFETIME_MS: { type: 'integer', minimum: 0, default: 3600000 },
    // OpenTelemetry's own variable names (its SDK environment specification), so collectors' and
    // platforms' usual settings work unchanged.
    OTEL_SDK_DISABLED: { type: 'boolean', default: false },
    OTEL_EXPORTER_OTLP_ENDPOINT: { type: 'string' },
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: { type: 'string' },
    OTEL_EXPORTER_OTLP_PROTOCOL: { type: 'string', enum: ['http/protobuf', 'http/json'], default: 'http/protobuf' },
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: { type: 'string', enum: ['http/protobuf', 'http/json'] },
    OTEL_EXPORTER_OTLP_HEADERS: { type: 'string', default: '' },
    OTEL_EXPORTER_OTLP_TRACES_HEADERS: { type: 'string' },
    OTEL_SERVICE_NAME: { type: 'string', default: 'graphql-query-service' },
    OTEL_TRACES_SAMPLER: { type: 'string', enum: TRACE_SAMPLERS, default: 'parentbased_always_on' },
    OTEL_TRACES_SAMPLER_ARG: { type: 'number', minimum: 0, maximum: 1, default: 1 }
  }
} as const

/** A schema entry's value after env-schema: a number, a boolean, a member of its enum, else text. */
type Value<Entry> = Entry extends { type: 'integer' | 'number' } ? number
  : Entry extends { enum: readonly (infer Member)[] } ? Member
    : Entry extends { type: 'boolean' } ? boolean : string
type Properties = typeof schema.properties
/** The variables as env-schema returns them: typed, defaulted, undefined when unset without a default. */
type Env = {
  [Name in keyof Properties]: Properties[Name] extends { default: unknown }
    ? Value<Properties[Name]>
    : Value<Properties[Name]> | undefined
}

function list (value: string | undefined): string[] {
  return (value ?? '').split(',').map((s) => s.trim()).filter(Boolean)
}

function optional (value: string | undefined): string | null {
  return value !== undefined && value !== '' ? value : null
}

/** The settings env-schema refused, each with Ajv's message (its error carries Ajv's errors), or none. */
function schemaErrors (err: unknown): { setting: string, message: string }[] {
  const errors = err instanceof Error && 'errors' in err ? err.errors : undefined
  if (!Array.isArray(errors)) return []
  return errors.map((error: { instancePath?: unknown, message?: unknown }) => ({
    setting: String(error.instancePath).slice(1),
    message: String(error.message)
  }))
}

/**
 * The variables of `variables` (the schema or a part of it) read from `env`: validated, coerced and
 * defaulted by env-schema. Every type error is added to `problems` (Ajv's allErrors), and the variables it
 * names are read as unset (so the checks after it still run), `invalid` naming them.
 */
function readEnv<E> (
  variables: { type: 'object', properties: object },
  env: Record<string, string | undefined>,
  problems: string[]
): { e: E, invalid: Set<string> } {
  // env: false: only `data` is read (env-schema would otherwise merge process.env under it).
  const read = (data: Record<string, string | undefined>) =>
    envSchema<E>({ schema: variables, data, dotenv: false, env: false })
  try {
    return { e: read(env), invalid: new Set() }
  } catch (err) {
    const errors = schemaErrors(err)
    if (errors.length === 0) throw err
    for (const { setting, message } of errors) problems.push(`${setting} ${message}`)
    const invalid = new Set(errors.map(({ setting }) => setting))
    return { e: read(Object.fromEntries(Object.entries(env).filter(([name]) => !invalid.has(name)))), invalid }
  }
}

/** Every problem of an unusable configuration, one line each ("Configuration: ..."), found in one pass. */
export class ConfigError extends Error {
  readonly problems: string[]
  constructor (problems: string[]) {
    super(problems.map((problem) => `Configuration: ${problem}`).join('\n'))
    this.name = 'ConfigError'
    this.problems = problems
  }
}

/**
 * The project root's `.env` (beside package.json, as the README says), never the working directory's:
 * a `.env` planted wherever the service happens to be started could carry a JWT_SECRET.
 */
const PROJECT_ENV_FILE = fileURLToPath(new URL('../../.env', import.meta.url))
/** The example operations' manifest the development profile serves: found from any working directory. */
const EXAMPLE_MANIFEST = fileURLToPath(new URL('../../persisted/manifest.json', import.meta.url))

/**
 * The process environment, over the settings of the project root's `.env` file when there is one
 * (the format of .env.example): a variable set in the environment wins over the file.
 */
export function environment (path = PROJECT_ENV_FILE): Record<string, string | undefined> {
  return existsSync(path) ? { ...parseEnv(readFileSync(path, 'utf8')), ...process.env } : process.env
}

/**
 * A URL's credentials anywhere in a message: scheme://, then the user info up to the authority's last
 * `@` (a password may hold an unencoded `@` or `/`). A message may end up anywhere (a terminal, a log
 * collector, a ticket), so every start-up error and every logged error shows URL settings this way.
 */
const URL_CREDENTIALS = /\b([a-z][a-z0-9+.-]*:\/\/)(?:[^\s@"'<>]*@)+/gi

/** `text` with the user and password of every URL in it replaced by `***` (redis://***@host:6379). */
export function withoutCredentials (text: string): string {
  return text.replace(URL_CREDENTIALS, '$1***@')
}

/**
 * Why `value` is not a URL with one of `schemes` and a host (a PostgreSQL URL may name a socket
 * directory as ?host= instead), or null when it is one. The value is never quoted: it may hold a password.
 */
function urlProblem (name: string, value: string | null, schemes: string[], example: string): string | null {
  if (value === null) return null
  let url: URL
  try { url = new URL(value) } catch { return `${name} is not a URL (expected ${example})` }
  if (!schemes.includes(url.protocol)) return `${name} must start with ${schemes.map((s) => `${s}//`).join(' or ')} (expected ${example})`
  if (!url.hostname && !url.searchParams.has('host')) return `${name} names no host (expected ${example})`
  return null
}

/** The URLs of a comma-separated list. */
const urlList = (value: string | undefined) => (value ?? '').split(',').map((node) => node.trim()).filter(Boolean)

/**
 * A Redis's address from its settings: one server's URL, or a cluster's comma-separated node URLs; with
 * sentinels, the URL names the master group the sentinels know.
 */
function redisAddress (
  url: string | undefined, clusterNodes: string | undefined, sentinels?: string
): RedisAddress | null {
  const nodes = urlList(clusterNodes)
  if (nodes.length > 0) return { urls: nodes, cluster: true }
  const one = optional(url)
  if (one === null) return null
  const watchers = urlList(sentinels)
  return watchers.length > 0 ? { urls: [one], cluster: false, sentinels: watchers } : { urls: [one], cluster: false }
}

/** What is wrong with a Redis's settings: each URL, and settings that exclude each other set together. */
function redisProblems (
  urlSetting: string, url: string | undefined, nodesSetting: string, nodes: string | undefined,
  sentinels?: { setting: string, value: string | undefined }
): Array<string | null> {
  const example = 'redis://:password@host:6379'
  const nodeUrls = urlList(nodes)
  const sentinelUrls = urlList(sentinels?.value)
  return [
    optional(url) !== null && nodeUrls.length > 0 ? `set ${urlSetting} (one server) or ${nodesSetting} (a Redis Cluster), not both` : null,
    sentinels && sentinelUrls.length > 0 && nodeUrls.length > 0 ? `${sentinels.setting} watches one master: it does not go with ${nodesSetting}` : null,
    sentinels && sentinelUrls.length > 0 && optional(url) === null
      ? `${sentinels.setting} needs ${urlSetting} naming the master group (redis://:password@mymaster/0)`
      : null,
    urlProblem(urlSetting, optional(url), ['redis:', 'rediss:'], example),
    ...nodeUrls.map((node) => urlProblem(nodesSetting, node, ['redis:', 'rediss:'], `${example},redis://host2:6379`)),
    ...sentinelUrls.map((node) => urlProblem(sentinels!.setting, node, ['redis:', 'rediss:'], 'redis://sentinel-1:26379,redis://sentinel-2:26379'))
  ]
}

/** An origin as browsers send it (lower-case host, default port dropped), or null when `entry` is not one. */
function origin (entry: string): string | null {
  let url: URL
  try { url = new URL(entry) } catch { return null }
  const bare =
    ['http:', 'https:'].includes(url.protocol) &&
    !url.username &&
    !url.password &&
    url.pathname === '/' &&
    !url.search &&
    !url.hash
  return bare ? url.origin : null
}

/** What signing a token needs (the token command): the key, its algorithm and the claims' settings. */
export type SigningConfig = Pick<Config['jwt'], 'algorithms' | 'secret' | 'privateKey' | 'issuer' | 'audience'>

/**
 * The token command's configuration: only the key it signs with (JWT_PRIVATE_KEY, else JWT_SECRET; the
 * development key in the development profile), JWT_ALGORITHMS, JWT_ISSUER and JWT_AUDIENCE. Nothing
 * else of the service's configuration is read or required: minting a token in production needs no
 * PARTNER_SECRET_KEY. Throws a ConfigError when there is no usable key.
 */
export function loadSigningConfig (env: Record<string, string | undefined> = environment()): SigningConfig {
  const prod = env.NODE_ENV === 'production'
  const privateKey = optional(env.JWT_PRIVATE_KEY)
  const secret = optional(env.JWT_SECRET) ?? (prod || privateKey ? null : DEV_JWT_SECRET)
  if (!privateKey && !secret) throw new ConfigError(['set JWT_PRIVATE_KEY (RS256/ES256) or JWT_SECRET (HS256) to sign tokens in production'])
  if (!privateKey && secret && secret.length < 32) throw new ConfigError(['JWT_SECRET must be at least 32 characters'])
  const algorithms = list(env.JWT_ALGORITHMS)
  return {
    // A private key signs asymmetrically: RS256 unless JWT_ALGORITHMS names another.
    algorithms: algorithms.length > 0 ? algorithms : [privateKey ? 'RS256' : 'HS256'],
    secret,
    privateKey,
    issuer: optional(env.JWT_ISSUER),
    audience: optional(env.JWT_AUDIENCE)
  }
}

/**
 * The variables a command reads to open the store and check operations, and nothing else: where the
 * store is (DATABASE_URL, else SQLITE_PATH) and the limits operations are checked against. No secret
 * of the service among them.
 */
const COMMAND_SETTINGS = [
  'DATABASE_URL', 'DATABASE_POOL_SIZE', 'DATABASE_SCHEMA', 'DATABASE_APPLICATION_NAME', 'SQLITE_PATH',
  'MAX_DEPTH', 'MAX_QUERY_LENGTH', 'MAX_QUERY_TOKENS', 'PLAN_CACHE_BYTES', 'MAX_RESPONSE_BYTES', 'MUTATION_COST',
  'MAX_MUTATIONS_PER_OPERATION', 'MAX_ALIASES', 'MAX_DIRECTIVES_PER_FIELD', 'MAX_DIRECTIVES', 'MAX_VALIDATION_ERRORS',
  'COST_BUDGET_ANONYMOUS', 'COST_BUDGET_USER', 'COST_BUDGET_ADMIN', 'COST_BUDGET_SERVICE', 'QUERY_TIMEOUT_MS',
  'MAX_STRING_LENGTH', 'MAX_LIST_LENGTH', 'MAX_PAGE_SIZE', 'MAX_BATCH_SIZE', 'MAX_COUNT_TARGET',
  'RATE_LIMIT_WINDOW_MS', 'RATE_LIMIT_REQUESTS', 'RATE_LIMIT_COST', 'RATE_LIMIT_COUNTING',
  'DEPLOYMENTS_MAX_BYTES'
] as const satisfies readonly (keyof Properties)[]
type CommandSetting = typeof COMMAND_SETTINGS[number]

/** COMMAND_SETTINGS' entries of the schema: the same types, bounds and defaults as the service's. */
const commandSchema = {
  type: 'object',
  properties: Object.fromEntries(COMMAND_SETTINGS.map((name) => [name, schema.properties[name]]))
} as const

/**
 * What the commands that open the store and check operations against the service's limits read
 * (npm run app, schema:check, persisted:build): a part of Config, built by the code that builds it there.
 */
export type CommandConfig =
  Pick<Config, 'databaseUrl' | 'databasePoolSize' | 'databaseSchema' | 'databaseApplicationName' | 'sqlitePath' | 'limits'> &
  { deployments: Pick<Config['deployments'], 'maxBytes'> }

/** The store's settings and the limits from COMMAND_SETTINGS' variables; a malformed DATABASE_URL is a problem. */
function commandConfig (e: Pick<Env, CommandSetting>, problems: string[]): CommandConfig {
  const databaseUrl = optional(e.DATABASE_URL)
  // A malformed URL would otherwise fail later in a driver's words (getaddrinfo ENOTFOUND base).
  const problem = urlProblem('DATABASE_URL', databaseUrl, ['postgres:', 'postgresql:'], 'postgres://user:password@host:5432/database')
  if (problem) problems.push(problem)
  return {
    databaseUrl,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    databaseSchema: optional(e.DATABASE_SCHEMA),
    databaseApplicationName: e.DATABASE_APPLICATION_NAME,
    sqlitePath: e.SQLITE_PATH,
    limits: {
      maxDepth: e.MAX_DEPTH,
      maxQueryLength: e.MAX_QUERY_LENGTH,
      maxQueryTokens: e.MAX_QUERY_TOKENS,
      planCacheBytes: e.PLAN_CACHE_BYTES,
      maxResponseBytes: e.MAX_RESPONSE_BYTES,
      mutationCost: e.MUTATION_COST,
      maxMutationsPerOperation: e.MAX_MUTATIONS_PER_OPERATION,
      maxAliases: e.MAX_ALIASES,
      maxDirectivesPerField: e.MAX_DIRECTIVES_PER_FIELD,
      maxDirectives: e.MAX_DIRECTIVES,
      maxValidationErrors: e.MAX_VALIDATION_ERRORS,
      budgets: {
        anonymous: e.COST_BUDGET_ANONYMOUS,
        USER: e.COST_BUDGET_USER,
        ADMIN: e.COST_BUDGET_ADMIN,
        SERVICE: e.COST_BUDGET_SERVICE
      },
      timeoutMs: e.QUERY_TIMEOUT_MS,
      maxStringLength: e.MAX_STRING_LENGTH,
      maxListLength: e.MAX_LIST_LENGTH,
      maxPageSize: e.MAX_PAGE_SIZE,
      maxBatchSize: e.MAX_BATCH_SIZE,
      maxCountTarget: e.MAX_COUNT_TARGET,
      rateWindowMs: e.RATE_LIMIT_WINDOW_MS,
      rateRequests: e.RATE_LIMIT_REQUESTS,
      rateCostUnits: e.RATE_LIMIT_COST,
      rateCounting: e.RATE_LIMIT_COUNTING
    },
    deployments: { maxBytes: e.DEPLOYMENTS_MAX_BYTES }
  }
}

/**
 * A command's configuration (npm run app, schema:check, persisted:build): COMMAND_SETTINGS only, read
 * and validated as loadConfig reads them, with the same defaults; in either profile. Nothing else is read
 * or required: a release job needs no JWT_SECRET or PARTNER_SECRET_KEY. Throws a ConfigError naming every
 * invalid setting.
 */
export function loadCommandConfig (env: Record<string, string | undefined> = environment()): CommandConfig {
  const problems: string[] = []
  const { e } = readEnv<Pick<Env, CommandSetting>>(commandSchema, env, problems)
  const config = commandConfig(e, problems)
  if (problems.length > 0) throw new ConfigError(problems)
  return config
}

/** `load`'s configuration, or every problem on stderr (one line each, URLs without credentials) and exit code 1. */
function orExit<T> (load: () => T): T {
  try {
    return load()
  } catch (err) {
    console.error(withoutCredentials(err instanceof Error ? err.message : String(err)))
    process.exit(1)
  }
}

/** For the service and its commands: the configuration, or every problem on stderr (one line each) and exit code 1. */
export function loadConfigOrExit (): Config {
  return orExit(() => loadConfig())
}

/** For the commands that read COMMAND_SETTINGS only: their configuration, or every problem on stderr and exit 1. */
export function loadCommandConfigOrExit (): CommandConfig {
  return orExit(() => loadCommandConfig())
}

/**
 * Reads the configuration from `env` (the process environment and `.env` by default); throws a
 * ConfigError naming every missing or invalid setting when it is unusable.
 */
export function loadConfig (env: Record<string, string | undefined> = environment()): Config {
  const problems: string[] = []
  const { e, invalid } = readEnv<Env>(schema, env, problems)
  const profile: Profile = e.NODE_ENV === 'production' ? 'production' : 'development'
  const prod = profile === 'production'
  const pick = <T>(value: T | undefined, dev: T, production: T): T => value ?? (prod ? production : dev)

  const publicKey = optional(e.JWT_PUBLIC_KEY)
  const secret = optional(e.JWT_SECRET) ?? (prod || publicKey ? null : DEV_JWT_SECRET)
  if (!secret && !publicKey) problems.push('set JWT_SECRET (HS256) or JWT_PUBLIC_KEY (RS256/ES256) in production')
  if (secret && secret.length < 32) problems.push('JWT_SECRET must be at least 32 characters')
  const algorithms = list(e.JWT_ALGORITHMS)
  const partnerSecretKey = optional(e.PARTNER_SECRET_KEY) ?? (prod ? null : DEV_PARTNER_SECRET_KEY)
  if (!partnerSecretKey || partnerSecretKey.length < 32) {
    problems.push('set PARTNER_SECRET_KEY (at least 32 characters) in production; it seals partner passwords')
  }
  // Cursors need a key every instance shares; PARTNER_SECRET_KEY already is one (required in production),
  // and the key is derived under a label of its own, so no new secret is required. CURSOR_SECRET
  // separates them: rotating it invalidates open cursors only, never partner passwords.
  const cursorSecret = optional(e.CURSOR_SECRET)
  if (cursorSecret !== null && cursorSecret.length < 32) problems.push('CURSOR_SECRET must be at least 32 characters')
  // The interface: "The interactive query UI is disabled in
  // production as well." A contradicting setting refuses to start.
  if (prod && e.QUERY_UI === true) {
    problems.push('QUERY_UI cannot be turned on in production (the query UI is for development only)')
  }
  // CORS_ORIGINS is an allowlist of exact origins: a near miss (a path, `*`) fails the start instead of never matching.
  const corsOrigins = list(e.CORS_ORIGINS).map((entry) => {
    const allowed = origin(entry)
    if (!allowed) problems.push(`CORS_ORIGINS entry "${entry}" is not an origin (expected scheme://host[:port], e.g. https://app.example.com)`)
    return allowed ?? entry
  })
  // The store's settings and the limits (DATABASE_URL's form checked there): the part commands read alone.
  const command = commandConfig(e, problems)
  for (const problem of [
    ...redisProblems('REDIS_URL', e.REDIS_URL, 'REDIS_CLUSTER_NODES', e.REDIS_CLUSTER_NODES,
      { setting: 'REDIS_SENTINELS', value: e.REDIS_SENTINELS }),
    ...redisProblems('RESPONSE_CACHE_REDIS_URL', e.RESPONSE_CACHE_REDIS_URL,
      'RESPONSE_CACHE_REDIS_CLUSTER_NODES', e.RESPONSE_CACHE_REDIS_CLUSTER_NODES)
  ]) if (problem) problems.push(problem)
  if (e.METRICS_PORT !== undefined && e.METRICS_PORT !== 0 && e.METRICS_PORT === e.PORT && !invalid.has('PORT')) {
    problems.push('METRICS_PORT must differ from PORT (metrics get a port of their own)')
  }
  for (const entry of list(e.TRUST_PROXY)) {
    const ranges = trustProxyRanges(entry)
    if (!ranges) problems.push(`TRUST_PROXY entry "${entry}" is not an address, a CIDR or one of loopback, linklocal, uniquelocal`)
    // A /0 trusts every address (anyone could set X-Forwarded-For), and Fastify refuses it at start.
    else if (ranges.some(([, prefix]) => prefix === 0)) problems.push(`TRUST_PROXY entry "${entry}" trusts every address: list the load balancers' addresses or subnets (a prefix of 1 or more)`)
  }
  const tracing = tracingConfig(e, problems)
  const responseCache = responseCacheConfig(e, problems)
  const soapSigning = soapSigningConfig(e, problems)
  const namespaceBase = e.SOAP_NAMESPACE_BASE.replace(/\/+$/, '')
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:[^\s"<>&']+$/.test(namespaceBase)) {
    problems.push('SOAP_NAMESPACE_BASE must be an absolute URI (e.g. urn:example:users or https://example.com/soap)')
  }
  const publicUrl = optional(e.SOAP_PUBLIC_URL)?.replace(/\/+$/, '') ?? null
  if (publicUrl !== null && !/^https?:\/\/[^\s"<>&']+$/.test(publicUrl)) {
    problems.push('SOAP_PUBLIC_URL must be an http(s) URL')
  }
  if (problems.length > 0 || !partnerSecretKey) throw new ConfigError(problems)
  const port = e.PORT

  return {
    profile,
    host: e.HOST ?? (prod ? '0.0.0.0' : '127.0.0.1'),
    port,
    logLevel: e.LOG_LEVEL ?? (prod ? 'info' : 'debug'),
    bodyLimitBytes: e.BODY_LIMIT_BYTES,
    requestTimeoutMs: e.REQUEST_TIMEOUT_MS,
    connectionTimeoutMs: e.CONNECTION_TIMEOUT_MS,
    maxConnectionsPerIp: e.MAX_CONNECTIONS_PER_IP,
    maxConnections:
      e.MAX_CONNECTIONS ??
      defaultMaxConnections(openFilesLimit(), e.DATABASE_POOL_SIZE),
    readinessCacheMs: e.READINESS_CACHE_MS,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    shutdownIdleDrainMs: pick(e.SHUTDOWN_IDLE_DRAIN_MS, 0, 1000),
    ...command,
    demoData: pick(e.DEMO_DATA, true, false),
    redis: redisAddress(e.REDIS_URL, e.REDIS_CLUSTER_NODES, e.REDIS_SENTINELS),
    redisPrefix: e.REDIS_PREFIX,
    jwt: {
      algorithms: algorithms.length > 0 ? algorithms : [publicKey ? 'RS256' : 'HS256'],
      secret,
      publicKey,
      privateKey: optional(e.JWT_PRIVATE_KEY),
      issuer: optional(e.JWT_ISSUER),
      audience: optional(e.JWT_AUDIENCE),
      clockToleranceSec: e.JWT_CLOCK_TOLERANCE_SEC,
      maxLifetimeSec: e.JWT_MAX_LIFETIME_SEC
    },
    trustProxy: list(e.TRUST_PROXY),
    pressure: {
      maxEventLoopDelayMs: e.PRESSURE_MAX_EVENT_LOOP_DELAY_MS,
      maxEventLoopUtilization: e.PRESSURE_MAX_EVENT_LOOP_UTILIZATION,
      maxHeapUsedBytes: e.PRESSURE_MAX_HEAP_USED_BYTES,
      maxRssBytes: e.PRESSURE_MAX_RSS_BYTES,
      sampleIntervalMs: e.PRESSURE_SAMPLE_INTERVAL_MS,
      retryAfterSec: e.PRESSURE_RETRY_AFTER_SEC
    },
    corsOrigins: [...new Set(corsOrigins)],
    metricsPort: e.METRICS_PORT ?? (prod ? 0 : null),
    introspection: pick(e.INTROSPECTION, true, false),
    queryUi: pick(e.QUERY_UI, true, false),
    persistedOnly: pick(e.PERSISTED_ONLY, false, true),
    // The development profile serves the example operations from its first start (with its demo data),
    // published as the app deployment `manifest`; PERSISTED_MANIFEST= (empty) turns that off.
    persistedManifest: e.PERSISTED_MANIFEST !== undefined
      ? optional(e.PERSISTED_MANIFEST)
      : !prod && pick(e.DEMO_DATA, true, false) ? EXAMPLE_MANIFEST : null,
    deployments: { ...command.deployments, usageFlushMs: e.DEPLOYMENT_USAGE_FLUSH_MS },
    apqMaxEntries: e.APQ_MAX_ENTRIES,
    apqMaxBytes: e.APQ_MAX_BYTES,
    apqMaxDocumentBytes: e.APQ_MAX_DOCUMENT_BYTES,
    cacheMaxAgeSec: e.CACHE_MAX_AGE_SEC,
    cacheMaxEntries: e.CACHE_MAX_ENTRIES,
    cacheMaxBytes: e.CACHE_MAX_BYTES,
    responseCache,
    cursorSecret: cursorSecret ?? partnerSecretKey,
    soap: {
      publicUrl,
      namespaceBase,
      maxAgeSec: e.WSSE_MAX_AGE_SEC,
      partnerSecretKey,
      maxElements: e.SOAP_MAX_ELEMENTS,
      maxAttributes: e.SOAP_MAX_ATTRIBUTES,
      allowSha1: e.WSSE_ALLOW_SHA1,
      signing: soapSigning
    },
    ws: {
      // One allowlist for browsers: an origin CORS_ORIGINS admits may open WebSockets too;
      // WS_ALLOWED_ORIGINS adds origins for WebSockets only (as sent, e.g. a native shell's capacitor://localhost).
      allowedOrigins: [...new Set([...corsOrigins, ...list(e.WS_ALLOWED_ORIGINS)])],
      initTimeoutMs: e.WS_INIT_TIMEOUT_MS,
      maxConnectionsPerClient: e.WS_MAX_CONNECTIONS_PER_CLIENT,
      maxSubscriptionsPerConnection: e.WS_MAX_SUBSCRIPTIONS_PER_CONNECTION,
      maxMessageBytes: e.WS_MAX_MESSAGE_BYTES,
      keepAliveMs: e.WS_KEEP_ALIVE_MS,
      maxMessagesPerSecond: e.WS_MAX_MESSAGES_PER_SECOND,
      maxReceivedBytesPerSecond: e.WS_MAX_RECEIVED_BYTES_PER_SECOND,
      maxSubscriptionsPerCaller: e.SUBSCRIPTIONS_MAX_PER_CALLER,
      maxBufferedBytesPerSubscriber: e.SUBSCRIBER_MAX_BUFFERED_BYTES,
      maxLifetimeMs: e.SUBSCRIBER_MAX_LIFETIME_MS
    },
    tracing
  }
}

/**
 * Tracing is on when an OTLP endpoint is configured (and OTEL_SDK_DISABLED is not true). As the
 * OpenTelemetry specification says: the traces endpoint is used as it is, the general one gets
 * /v1/traces appended; the signal-specific protocol and headers win over the general ones.
 */
/** The service's RSA key and certificate for signed SOAP replies (PEM text, read from the configured files). */
export interface SoapSigning {
  keyPem: string
  certificatePem: string
}

/**
 * SOAP_SIGNING_KEY and SOAP_SIGNING_CERT (PEM file paths): both or neither. Read and checked at start
 * (an RSA private key, the certificate of that key, valid now), so a mistake stops the start with one
 * line instead of failing the first signed reply.
 */
function soapSigningConfig (e: Env, problems: string[]): SoapSigning | null {
  const keyPath = optional(e.SOAP_SIGNING_KEY)
  const certificatePath = optional(e.SOAP_SIGNING_CERT)
  if (keyPath === null && certificatePath === null) return null
  if (keyPath === null || certificatePath === null) {
    problems.push('set both SOAP_SIGNING_KEY and SOAP_SIGNING_CERT (PEM files) to sign SOAP replies, or neither')
    return null
  }
  const read = (setting: string, path: string) => {
    try {
      return readFileSync(path, 'utf8')
    } catch (err) {
      problems.push(`${setting} cannot be read (${err instanceof Error && 'code' in err ? String(err.code) : 'error'}: ${path})`)
      return null
    }
  }
  const keyPem = read('SOAP_SIGNING_KEY', keyPath)
  const certificatePem = read('SOAP_SIGNING_CERT', certificatePath)
  if (keyPem === null || certificatePem === null) return null
  let key: ReturnType<typeof createPrivateKey>
  let certificate: X509Certificate
  try {
    key = createPrivateKey(keyPem)
  } catch {
    problems.push(`SOAP_SIGNING_KEY is not an unencrypted PEM private key (${keyPath})`)
    return null
  }
  try {
    certificate = new X509Certificate(certificatePem)
  } catch {
    problems.push(`SOAP_SIGNING_CERT is not a PEM certificate (${certificatePath})`)
    return null
  }
  if (key.asymmetricKeyType !== 'rsa') problems.push('SOAP_SIGNING_KEY must be an RSA key (replies are signed with RSA-SHA256)')
  else if (!certificate.checkPrivateKey(key)) problems.push('SOAP_SIGNING_CERT is not the certificate of SOAP_SIGNING_KEY')
  else if (Date.parse(certificate.validTo) < Date.now()) problems.push(`SOAP_SIGNING_CERT expired on ${certificate.validTo}`)
  else return { keyPem, certificatePem }
  return null
}

function tracingConfig (e: Env, problems: string[]): TracingConfig | null {
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
    tracesUrl,
    protocol: e.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? e.OTEL_EXPORTER_OTLP_PROTOCOL,
    headers: optional(e.OTEL_EXPORTER_OTLP_TRACES_HEADERS) ?? e.OTEL_EXPORTER_OTLP_HEADERS,
    serviceName: e.OTEL_SERVICE_NAME,
    sampler: e.OTEL_TRACES_SAMPLER,
    samplerRatio: e.OTEL_TRACES_SAMPLER_ARG
  }
}

/**
 * The response cache's settings. Answers are kept in Redis when REDIS_URL is set (shared by every
 * instance), else in this process. Instances that share PostgreSQL without Redis would each keep answers
 * that another instance's writes never invalidate, so there the cache is off unless asked for, and asking
 * for it is refused: with no shared store, "no read returns what an acknowledged write replaced" cannot hold.
 */
function responseCacheConfig (e: Env, problems: string[]): ResponseCacheSettings {
  const stateRedis = redisAddress(e.REDIS_URL, e.REDIS_CLUSTER_NODES, e.REDIS_SENTINELS)
  const ownRedis = redisAddress(e.RESPONSE_CACHE_REDIS_URL, e.RESPONSE_CACHE_REDIS_CLUSTER_NODES)
  const sharedDatabaseWithoutRedis = optional(e.DATABASE_URL) !== null && stateRedis === null
  if (e.RESPONSE_CACHE === true && sharedDatabaseWithoutRedis) {
    problems.push('RESPONSE_CACHE needs REDIS_URL (or REDIS_CLUSTER_NODES) when DATABASE_URL is set: instances sharing PostgreSQL must share their cache (or set RESPONSE_CACHE=false)')
  }
  if (ownRedis !== null && stateRedis === null) {
    problems.push('RESPONSE_CACHE_REDIS_URL (or _CLUSTER_NODES) needs REDIS_URL (or REDIS_CLUSTER_NODES): it holds cached answers only, apart from the shared state')
  }
  return {
    enabled: e.RESPONSE_CACHE ?? !sharedDatabaseWithoutRedis,
    ttlMs: e.RESPONSE_CACHE_TTL_MS,
    maxBytes: e.RESPONSE_CACHE_MAX_BYTES,
    redis: ownRedis
  }
}
