// The HTTP server: where it listens, what one request and one connection may take, logs, metrics' port,
// the load balancers it trusts, and how it stops.
import { defaultMaxConnections, openFilesLimit } from '../descriptors.ts'
import { trustProxyRanges } from '../peers.ts'
import { area, list } from './area.ts'
import { store } from './store.ts'

export const server = area({
  key: 'server',
  title: 'Server: listening, connections, logs and shutdown',
  about: 'The API\'s address and port, what one request and one connection may take, the logs, the metrics port, the load balancers trusted to name clients, and how a stop drains.',
  uses: [store],
  settings: {
    HOST: { type: 'string', shownDefault: '`127.0.0.1`; `0.0.0.0` in production', doc: 'the address the API listens on' },
    PORT: { type: 'integer', minimum: 0, maximum: 65535, default: 3000, doc: 'the API port (0: any free port)' },
    LOG_LEVEL: { type: 'string', shownDefault: '`debug`; `info` in production', doc: 'pino log level; at `info` and above JSON lines (for a log collector), at `debug` and `trace` one readable text line each (for a terminal); one line per request either way, health probes excepted' },
    BODY_LIMIT_BYTES: { type: 'integer', minimum: 1024, default: 1048576, doc: 'every route\'s request body cap' },
    REQUEST_TIMEOUT_MS: { type: 'integer', minimum: 0, default: 30000, doc: 'a request (headers and body) must arrive whole within this; slower senders get 408; 0 = no limit' },
    CONNECTION_TIMEOUT_MS: { type: 'integer', minimum: 0, default: 60000, doc: 'a connection silent both ways this long is closed (clients that stop reading); 0 = no limit' },
    MAX_CONNECTIONS_PER_IP: { type: 'integer', minimum: 0, default: 100, doc: 'open connections per direct peer address; TRUST_PROXY peers are exempt (cap clients at the balancer); 0 = no cap' },
    MAX_CONNECTIONS: { type: 'integer', minimum: 0, shownDefault: 'open-files limit − 128 − `DATABASE_POOL_SIZE`', doc: 'open connections of all listeners together (metrics port: 16 of them), so sockets never take the store\'s, Redis\'s or the logs\' descriptors; 0 = no cap' },
    READINESS_CACHE_MS: { type: 'integer', minimum: 0, maximum: 60000, default: 1000, doc: 'a finished /health/ready check answers every call this long (concurrent calls share one), so a flood of probes costs one store and Redis ping per interval' },
    SHUTDOWN_GRACE_MS: { type: 'integer', minimum: 0, default: 10000, doc: 'graceful shutdown: in-flight requests get this long (keep the orchestrator\'s stop timeout longer)' },
    SHUTDOWN_IDLE_DRAIN_MS: { type: 'integer', minimum: 0, shownDefault: '0; 1000 in production', doc: 'idle keep-alive connections stay open this long on shutdown (a load balancer may be sending on one); then every connection without a response in progress is closed, one that never sent a request too, so an instance with no request in flight stops this long after SIGTERM (at once with no connection open)' },
    TRUST_PROXY: { type: 'string', default: '', doc: 'comma-separated addresses/CIDRs (or loopback, linklocal, uniquelocal) of load balancers allowed to set X-Forwarded-For and X-Request-Id; a /0 (everyone) is refused' },
    METRICS_PORT: { type: 'integer', minimum: 0, maximum: 65535, shownDefault: 'unset: the API port in development, not served in production', doc: 'Prometheus `GET /metrics` on a port of its own (same `HOST`, must differ from `PORT`); 0 = not served' }
  },
  read: (e, { production, problems, invalid, store }) => {
    if (e.METRICS_PORT !== undefined && e.METRICS_PORT !== 0 && e.METRICS_PORT === e.PORT && !invalid.has('PORT')) {
      problems.push('METRICS_PORT must differ from PORT (metrics get a port of their own)')
    }
    const trustProxy = list(e.TRUST_PROXY)
    for (const entry of trustProxy) {
      const ranges = trustProxyRanges(entry)
      if (!ranges) {
        problems.push(`TRUST_PROXY entry "${entry}" is not an address, a CIDR or one of loopback, linklocal, uniquelocal`)
      } else if (ranges.some(([, prefix]) => prefix === 0)) {
        // A /0 trusts every address (anyone could set X-Forwarded-For), and Fastify refuses it at start.
        problems.push(`TRUST_PROXY entry "${entry}" trusts every address: list the load balancers' addresses or subnets (a prefix of 1 or more)`)
      }
    }
    return {
      host: e.HOST ?? (production ? '0.0.0.0' : '127.0.0.1'),
      port: e.PORT,
      logLevel: e.LOG_LEVEL ?? (production ? 'info' : 'debug'),
      bodyLimitBytes: e.BODY_LIMIT_BYTES,
      requestTimeoutMs: e.REQUEST_TIMEOUT_MS,
      connectionTimeoutMs: e.CONNECTION_TIMEOUT_MS,
      maxConnectionsPerIp: e.MAX_CONNECTIONS_PER_IP,
      /** Split between the listeners in app/core/descriptors.ts; by default below the open-files limit. */
      maxConnections: e.MAX_CONNECTIONS ?? defaultMaxConnections(openFilesLimit(), store.databasePoolSize),
      readinessCacheMs: e.READINESS_CACHE_MS,
      shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
      shutdownIdleDrainMs: e.SHUTDOWN_IDLE_DRAIN_MS ?? (production ? 1000 : 0),
      trustProxy,
      /** null: GET /metrics on the API port (development); 0: not served (production); else their own port. */
      metricsPort: e.METRICS_PORT ?? (production ? 0 : null)
    }
  }
})
