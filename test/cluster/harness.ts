// The cluster harness: real processes on this machine. App instances (`node app/server.ts`, production
// profile) on the machine's PostgreSQL (a schema of their own) and a Redis (the machine's, under a
// prefix of their own, or a private redis-server the test may stop), behind a real nginx whose config
// is rendered here around the shared rules of deploy/nginx/ (the ones docker-compose.yml deploys).
//
// Addresses: nginx connects to the instances from 127.0.0.2 (proxy_bind), and the instances trust
// X-Forwarded-For from 127.0.0.2 only (TRUST_PROXY). Clients may connect from any 127.0.0.x, so a
// test can tell client addresses apart and check that the instances saw the right one.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { createHash, randomBytes } from 'node:crypto'
import pg from 'pg'
import { Redis } from 'ioredis'
import { mintToken } from '../../cli/mint-token.ts'
import { loadConfig } from '../../app/core/config/index.ts'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import type { Role } from '../../app/core/store/types.ts'
import { freePort } from '../helpers/server-process.ts'

export const REPO = new URL('../..', import.meta.url).pathname.replace(/\/$/, '')
export const PG_URL = process.env.CLUSTER_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
export const REDIS_URL = process.env.CLUSTER_REDIS_URL ?? 'redis://127.0.0.1:6379'
export const JWT_SECRET = 'cluster-test-secret-that-is-long-enough-0123456789'
export const PARTNER_SECRET_KEY = 'cluster-partner-key-that-is-long-enough-0123456789'
/** nginx connects to the instances from this address; the instances trust X-Forwarded-For from it only. */
export const LB_ADDRESS = '127.0.0.2'
/** The SOAP partner account every cluster has (bound to user 5, SERVICE). */
export const PARTNER = { login: 'partner', password: 'partner-s3cret' }
/**
 * The public address written into the WSDL and the SOAP namespaces: the load balancer's, the same on every instance.
 */
export const SOAP_PUBLIC_URL = 'https://api.example.com'

export interface TestLike {
  teardown (fn: () => unknown): void
  comment (...message: unknown[]): void
}

const children = new Set<ChildProcess>()
// If the test process dies, its children must not outlive it (they would hold ports and connections).
process.on('exit', () => { for (const child of children) child.kill('SIGKILL') })

function track (child: ChildProcess): ChildProcess {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}

function exited (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => child.once('exit', () => resolve()))
}

export function uniqueName (prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(3).toString('hex')}`
}

export function requireTool (name: string, hint: string): string {
  // (/usr/sbin is where Debian puts nginx, and not every PATH has it.)
  const found = spawnSync(
    'sh',
    ['-c', `command -v ${name} || { test -x /usr/sbin/${name} && echo /usr/sbin/${name}; }`],
    { encoding: 'utf8' }
  )
  const path = found.stdout.trim()
  if (found.status !== 0 || path === '') throw new Error(`${name} is not installed: ${hint}`)
  return path
}

// ---------------------------------------------------------------- HTTP client

export interface HttpResponse { status: number; headers: http.IncomingHttpHeaders; text: string; json (): any }

const agents = new Map<string, http.Agent>()
function agentFor (localAddress: string): http.Agent {
  let agent = agents.get(localAddress)
  if (!agent) agents.set(localAddress, agent = new http.Agent({ keepAlive: true, maxSockets: 256, localAddress }))
  return agent
}

/** One HTTP request from a chosen local address (127.0.0.x), on a keep-alive agent of that address. */
export function request (
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string; from?: string; timeoutMs?: number } = {}
): Promise<HttpResponse> {
  const from = options.from ?? '127.0.0.1'
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: options.method ?? 'GET',
        headers: {
          ...(options.body !== undefined ? { 'content-length': String(Buffer.byteLength(options.body)) } : {}),
          ...options.headers
        },
        agent: agentFor(from)
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          resolve({ status: res.statusCode!, headers: res.headers, text, json: () => JSON.parse(text) })
        })
        res.on('error', reject)
      }
    )
    req.setTimeout(options.timeoutMs ?? 30_000, () =>
      req.destroy(new Error(`no answer from ${url} within ${options.timeoutMs ?? 30_000} ms`))
    )
    req.on('error', reject)
    req.end(options.body)
  })
}

export async function gql (
  baseUrl: string,
  query: string,
  variables?: Record<string, unknown>,
  options: { token?: string; from?: string; headers?: Record<string, string>; timeoutMs?: number } = {}
) {
  const response = await request(`${baseUrl}/graphql`, {
    method: 'POST',
    from: options.from,
    timeoutMs: options.timeoutMs,
    headers: {
      'content-type': 'application/json',
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
      ...options.headers
    },
    body: JSON.stringify({ query, variables })
  })
  let body: any
  try {
    body = response.json()
  } catch {
    body = { raw: response.text }
  }
  return { status: response.status, headers: response.headers, body }
}

export function token (sub: string, role: Role = 'USER'): string {
  return mintToken(loadConfig({ JWT_SECRET, PARTNER_SECRET_KEY, NODE_ENV: 'production' }).jwt, sub, role)
}

/**
 * A USER of the test's own, created through the API (by an administrator's token of its own, whose
 * budgets are fresh); its id. A subscriber must be a user the store knows (docs/subscriptions.md).
 */
export async function newUser (baseUrl: string, label: string): Promise<string> {
  const unique = `${label}-${randomBytes(4).toString('hex')}`
  const { body } = await gql(
    baseUrl,
    'mutation ($input: CreateUserInput!) { createUser(input: $input) { id } }',
    { input: { name: unique, email: `${unique}@cluster.example.com` } },
    { token: token(`user-maker-${unique}`, 'ADMIN') }
  )
  if (!body?.data?.createUser?.id) throw new Error(`could not create user ${unique}: ${JSON.stringify(body)}`)
  return body.data.createUser.id
}

// ---------------------------------------------------------------- PostgreSQL

export interface Database {
  url: string
  schema: string
  /** Runs SQL in the test's schema. */
  query<R extends pg.QueryResultRow = any> (text: string, values?: unknown[]): Promise<pg.QueryResult<R>>
}

/**
 * A schema of the test's own, migrated and loaded with the demo users
 * (1 ADMIN, 2-4 USER, 5 SERVICE) and PARTNER; dropped at the end.
 */
export async function createDatabase (t: TestLike): Promise<Database> {
  const schema = uniqueName('cluster')
  const admin = new pg.Client({ connectionString: PG_URL })
  try {
    await admin.connect()
  } catch (err) {
    throw new Error(`PostgreSQL is not reachable at ${PG_URL} (${(err as Error).message}): the cluster tests need it`)
  }
  const store = await openPostgresStore({ url: PG_URL, poolSize: 2, schema, applicationName: `${schema}_seed` })
  await loadDemoData(store)
  await createPartnerAccount(store, PARTNER_SECRET_KEY, { ...PARTNER, userId: '5' })
  await store.close()
  const pool = new pg.Pool({ connectionString: PG_URL, max: 2, options: `-c search_path=${schema}` })
  t.teardown(async () => {
    await pool.end()
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    await admin.end()
  })
  return { url: PG_URL, schema, query: (text, values) => pool.query(text, values) }
}

/**
 * Ends the PostgreSQL connections of one application_name (the
 * instances of one test), as an operator or a failover would.
 */
export async function terminateBackends (applicationName: string): Promise<number> {
  const client = new pg.Client({ connectionString: PG_URL })
  await client.connect()
  try {
    const { rows } = await client.query<{ ended: boolean }>(
      'SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()',
      [applicationName]
    )
    return rows.filter((r) => r.ended).length
  } finally {
    await client.end()
  }
}

// ---------------------------------------------------------------- Redis

export interface PrivateRedis {
  url: string
  port: number
  stop (): Promise<void>
  start (): Promise<void>
}

/**
 * A redis-server of the test's own (so stopping it disturbs no other test), without persistence;
 * `settings`: more of its command-line settings (e.g. a memory bound and an eviction policy).
 */
export async function startPrivateRedis (t: TestLike, settings: string[] = []): Promise<PrivateRedis> {
  const bin = requireTool('redis-server', 'install Debian\'s redis-server package')
  const port = await freePort()
  let child: ChildProcess | null = null
  const start = async () => {
    child = track(
      spawn(
        bin,
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', ...settings],
        { stdio: 'ignore' }
      )
    )
    for (let i = 0; i < 100; i++) {
      if (await pingRedis(port)) return
      await sleep(50)
    }
    throw new Error(`redis-server did not start on port ${port}`)
  }
  const stop = async () => {
    const running = child
    child = null
    if (!running) return
    running.kill('SIGKILL')
    await exited(running)
  }
  await start()
  t.teardown(stop)
  return { url: `redis://127.0.0.1:${port}`, port, start, stop }
}

/**
 * A Redis Sentinel of the test's own (redis-server in sentinel mode) watching the master at
 * `masterPort` as the group `name`, which it takes down after a second's silence; stopped at the end.
 */
export async function startRedisSentinel (t: TestLike, name: string, masterPort: number): Promise<{ port: number }> {
  const bin = requireTool('redis-server', 'install Debian\'s redis-server package')
  const dir = mkdtempSync(join(tmpdir(), 'redis-sentinel-'))
  const port = await freePort()
  // The sentinel rewrites its configuration file as it learns: one of its own, in a directory of its own.
  const conf = join(dir, 'sentinel.conf')
  writeFileSync(conf, [
    `port ${port}`, 'bind 127.0.0.1', `dir ${dir}`,
    `sentinel monitor ${name} 127.0.0.1 ${masterPort} 1`,
    `sentinel down-after-milliseconds ${name} 1000`,
    `sentinel failover-timeout ${name} 5000`, ''
  ].join('\n'))
  const child = track(spawn(bin, [conf, '--sentinel'], { stdio: 'ignore' }))
  t.teardown(async () => {
    child.kill('SIGKILL')
    await exited(child)
    rmSync(dir, { recursive: true, force: true })
  })
  for (let i = 0; i < 100; i++) {
    if (await pingRedis(port)) return { port }
    await sleep(50)
  }
  throw new Error(`redis-server --sentinel did not start on port ${port}`)
}

/**
 * A MONITOR connection to the Redis at `url`, ended with the test. ioredis can fail such a connection on
 * a line of another client's traffic ("Command queue state error": the bench smoke test runs beside these
 * tests on the machine's Redis); that error is the connection's, not the test's, so it is not thrown. A
 * line lost with it leaves what the test counts short, which fails the test rather than passing it.
 */
export async function monitorRedis (t: TestLike, url: string): Promise<Redis> {
  const monitor = await new Redis(url, { lazyConnect: true }).monitor().catch((err: Error) => {
    throw new Error(`these tests need Redis at ${url} (TEST_REDIS_URL): ${err.message}`)
  })
  monitor.on('error', () => {})
  t.teardown(() => monitor.disconnect())
  return monitor
}

export interface RedisCluster {
  /** The nodes' URLs, as REDIS_CLUSTER_NODES takes them. */
  nodes: string[]
  ports: number[]
}

/** A port whose cluster bus port (port + 10000) is free too. */
async function clusterPort (): Promise<number> {
  const { createServer } = await import('node:net')
  for (;;) {
    const port = await freePort()
    if (port + 10000 > 65535) continue
    const free = await new Promise<boolean>((resolve) => {
      const probe = createServer().once('error', () => resolve(false))
      probe.listen(port + 10000, '127.0.0.1', () => probe.close(() => resolve(true)))
    })
    if (free) return port
  }
}

/**
 * A Redis Cluster of the test's own: `masters` redis-server processes in cluster mode (Debian's
 * redis-server), no replicas, slots spread by redis-cli --cluster create; stopped at the end.
 */
export async function startRedisCluster (t: TestLike, masters = 3): Promise<RedisCluster> {
  const bin = requireTool('redis-server', 'install Debian\'s redis-server package')
  const cli = requireTool('redis-cli', 'install Debian\'s redis-tools package')
  const dir = mkdtempSync(join(tmpdir(), 'redis-cluster-'))
  const ports: number[] = []
  const nodes: ChildProcess[] = []
  t.teardown(async () => {
    for (const node of nodes) node.kill('SIGKILL')
    await Promise.all(nodes.map(exited))
    rmSync(dir, { recursive: true, force: true })
  })
  for (let i = 0; i < masters; i++) {
    const port = await clusterPort()
    ports.push(port)
    nodes.push(track(spawn(bin, [
      '--port', String(port), '--bind', '127.0.0.1', '--cluster-enabled', 'yes',
      '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--cluster-node-timeout', '2000',
      '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no'
    ], { stdio: 'ignore' })))
  }
  for (const port of ports) {
    let up = false
    for (let i = 0; i < 100 && !up; i++) {
      up = await pingRedis(port)
      if (!up) await sleep(50)
    }
    if (!up) throw new Error(`redis-server did not start on port ${port}`)
  }
  const created = spawnSync(cli, ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes'],
    { encoding: 'utf8' })
  if (created.status !== 0) throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`)
  for (let i = 0; i < 200; i++) {
    const states = ports.map((port) => spawnSync(cli, ['-p', String(port), 'cluster', 'info'], { encoding: 'utf8' }).stdout)
    if (states.every((s) => s.includes('cluster_state:ok'))) return { nodes: ports.map((p) => `redis://127.0.0.1:${p}`), ports }
    await sleep(50)
  }
  throw new Error('the Redis Cluster did not reach cluster_state:ok')
}

async function pingRedis (port: number): Promise<boolean> {
  const { Socket } = await import('node:net')
  return new Promise((resolve) => {
    const socket = new Socket()
    socket.setTimeout(500)
    socket.once('error', () => resolve(false))
    socket.once('timeout', () => { socket.destroy(); resolve(false) })
    socket.connect(port, '127.0.0.1', () => socket.write('PING\r\n'))
    socket.once('data', (data) => { socket.destroy(); resolve(String(data).startsWith('+PONG')) })
  })
}

// ---------------------------------------------------------------- App instances

export interface Instance {
  name: string
  port: number
  /** Direct URL (bypassing nginx): for probes only. */
  url: string
  /** The instance's metrics listener (METRICS_PORT), as Prometheus scrapes it. */
  metricsUrl: string
  env: Record<string, string>
  /** Every JSON log line the process wrote, across restarts. */
  logs: any[]
  /** The last 20 kB the process wrote (stdout and stderr): crash reports land here. */
  output (): string
  process: ChildProcess | null
  start (): Promise<void>
  /** SIGTERM: graceful shutdown; resolves when the process has exited. */
  stop (): Promise<{ code: number | null; signal: string | null }>
  /** SIGKILL: a crash. */
  kill (): Promise<void>
}

export async function startInstance (t: TestLike, name: string, env: Record<string, string>): Promise<Instance> {
  const port = await freePort()
  const metricsPort = await freePort()
  let output = ''
  const fullEnv: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    PORT: String(port),
    METRICS_PORT: String(metricsPort),
    LOG_LEVEL: 'info',
    JWT_SECRET,
    PARTNER_SECRET_KEY,
    TRUST_PROXY: LB_ADDRESS,
    PERSISTED_ONLY: 'false',
    SOAP_PUBLIC_URL,
    // The envelopes below are written in this namespace (the setting's default is a URN).
    SOAP_NAMESPACE_BASE: SOAP_PUBLIC_URL,
    SHUTDOWN_GRACE_MS: '15000',
    ...env
  }
  const instance: Instance = {
    name,
    port,
    url: `http://127.0.0.1:${port}`,
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    env: fullEnv,
    logs: [],
    output: () => output,
    process: null,
    async start () {
      const child = track(
        spawn(process.execPath, [join(REPO, 'app/server.ts')], {
          cwd: REPO,
          env: fullEnv,
          stdio: ['ignore', 'pipe', 'pipe']
        })
      )
      instance.process = child
      let partial = ''
      child.stdout!.on('data', (chunk: Buffer) => {
        const text = partial + chunk.toString('utf8')
        const lines = text.split('\n')
        partial = lines.pop()!
        for (const line of lines) {
          if (line === '') continue
          try { instance.logs.push(JSON.parse(line)) } catch { instance.logs.push({ msg: line }) }
        }
        output = (output + chunk.toString('utf8')).slice(-20_000)
      })
      child.stderr!.on('data', (chunk: Buffer) => { output = (output + chunk.toString('utf8')).slice(-20_000) })
      child.once('exit', (code, signal) => { output += `\n[exited: code ${code}, signal ${signal}]\n` })
      const deadline = Date.now() + 30_000
      while (Date.now() < deadline) {
        if (child.exitCode !== null) {
          throw new Error(`instance ${name} exited with ${child.exitCode} while starting:\n${output}`)
        }
        try {
          const ready = await request(`${instance.url}/health/ready`, { timeoutMs: 1000 })
          if (ready.status === 200) return
        } catch { /* not listening yet */ }
        await sleep(100)
      }
      throw new Error(`instance ${name} was not ready within 30 s:\n${output}`)
    },
    async stop () {
      const child = instance.process
      if (!child) return { code: null, signal: null }
      child.kill('SIGTERM')
      await exited(child)
      instance.process = null
      return { code: child.exitCode, signal: child.signalCode }
    },
    async kill () {
      const child = instance.process
      if (!child) return
      child.kill('SIGKILL')
      await exited(child)
      instance.process = null
    }
  }
  t.teardown(async () => { await instance.kill() })
  await instance.start()
  return instance
}

// ---------------------------------------------------------------- nginx

export interface LoadBalancer {
  /** Round robin over every instance. */
  url: string
  /** Through the same proxy rules, pinned to one instance (by index): to address one instance through nginx. */
  pinned: string[]
  dir: string
  accessLog (): string[]
  errorLog (): string
  /** The rendered main config (for the record). */
  config: string
}

/** Renders the test's nginx config around deploy/nginx/{http,locations}.conf and runs nginx in the foreground. */
export async function startLoadBalancer (t: TestLike, instances: Instance[]): Promise<LoadBalancer> {
  const bin = requireTool('nginx', 'install Debian\'s nginx package (apt-get install -y nginx); .ci/run does it')
  const dir = mkdtempSync(join(tmpdir(), 'cluster-nginx-'))
  chmodSync(dir, 0o755) // nginx workers run unprivileged and keep temp files here
  const port = await freePort()
  const pinnedPorts = await Promise.all(instances.map(() => freePort()))
  const server = (listen: number, upstream: string) => `
    server {
      listen 127.0.0.1:${listen};
      set $graphql_upstream ${upstream};
      # Which instance answered (test only): lets the tests prove that both instances served.
      add_header X-Upstream $upstream_addr always;
      include ${REPO}/deploy/nginx/locations.conf;
    }`
  const upstreamServers = (list: Instance[]) =>
    list.map((i) => `      server 127.0.0.1:${i.port} max_fails=1 fail_timeout=2s;`).join('\n')
  const config = `# Rendered by test/cluster/harness.ts; proxy rules from deploy/nginx/.
worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  include ${REPO}/deploy/nginx/http.conf;
  access_log ${dir}/access.log graphql;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  # The load balancer's own address towards the instances (they trust X-Forwarded-For from it only).
  proxy_bind ${LB_ADDRESS};

  upstream graphql_service {
${upstreamServers(instances)}
    keepalive 64;
  }
${instances.map((instance, index) => `  upstream graphql_pinned_${index} {\n${upstreamServers([instance])}\n    keepalive 16;\n  }`).join('\n')}
${server(port, 'graphql_service')}
${instances.map((_, index) => server(pinnedPorts[index]!, `graphql_pinned_${index}`)).join('\n')}
}
`
  const file = join(dir, 'nginx.conf')
  writeFileSync(file, config)
  // -e: the log nginx writes before it has read the config (its compiled-in path may not be writable).
  const check = spawnSync(bin, ['-t', '-q', '-e', join(dir, 'error.log'), '-c', file, '-p', dir], { encoding: 'utf8' })
  if (check.status !== 0) throw new Error(`nginx rejected the rendered config: ${check.stderr}\n${config}`)
  const child = track(
    spawn(bin, ['-e', join(dir, 'error.log'), '-c', file, '-p', dir], { stdio: ['ignore', 'ignore', 'pipe'] })
  )
  let stderr = ''
  child.stderr!.on('data', (c: Buffer) => { stderr += c.toString('utf8') })
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`nginx exited: ${stderr}`)
    try {
      await request(`${url}/health/live`, { timeoutMs: 1000 })
      break
    } catch {
      if (i > 100) throw new Error(`nginx did not listen on ${url}: ${stderr}`)
      await sleep(50)
    }
  }
  t.teardown(async () => {
    child.kill('SIGQUIT') // graceful: workers finish, then exit
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000)
    await exited(child)
    clearTimeout(timer)
    rmSync(dir, { recursive: true, force: true })
  })
  const read = (name: string) => { try { return readFileSync(join(dir, name), 'utf8') } catch { return '' } }
  return {
    url,
    pinned: pinnedPorts.map((p) => `http://127.0.0.1:${p}`),
    dir,
    config,
    accessLog: () => read('access.log').split('\n').filter(Boolean),
    errorLog: () => read('error.log')
  }
}

// ---------------------------------------------------------------- A whole cluster

export interface Instances {
  db: Database
  instances: Instance[]
  /** The Redis settings every instance runs with (REDIS_URL, or REDIS_CLUSTER_NODES), and REDIS_PREFIX. */
  redisEnv: Record<string, string>
  redisPrefix: string
  applicationName: string
}

/**
 * Set to 1, the instances of startInstances run on a Redis Cluster of three masters of the test's own
 * (`npm run test:redis-cluster`: the cluster suite's correctness tests on a cluster), unless a test
 * gives a Redis of its own.
 */
const ON_REDIS_CLUSTER = process.env.TEST_REDIS_CLUSTER === '1'

export interface Cluster extends Instances {
  lb: LoadBalancer
}

/**
 * Two (or `size`) instances on a fresh PostgreSQL schema and Redis (the machine's under a fresh prefix,
 * or `redisUrl`), without a load balancer: for tests that address each instance directly.
 * `env` adds settings for every instance.
 */
export async function startInstances (
  t: TestLike,
  options: { size?: number; env?: Record<string, string>; redisUrl?: string } = {}
): Promise<Instances> {
  const db = await createDatabase(t)
  const redisUrl = options.redisUrl ?? REDIS_URL
  const redisPrefix = `${db.schema}:`
  const onCluster = ON_REDIS_CLUSTER && !options.redisUrl ? await startRedisCluster(t) : null
  if (!options.redisUrl && !onCluster) await requireRedis(redisUrl)
  if (!options.redisUrl && !onCluster) {
    // The machine's Redis is shared with other tests: leave nothing under this cluster's prefix behind.
    t.teardown(async () => {
      const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 })
      await redis.connect()
      const keys: string[] = []
      for await (const batch of redis.scanStream({ match: `${redisPrefix}*`, count: 500 })) {
        keys.push(...(batch as string[]))
      }
      if (keys.length > 0) await redis.del(...keys)
      await redis.quit()
    })
  }
  const applicationName = db.schema
  const redisEnv = {
    ...(onCluster ? { REDIS_CLUSTER_NODES: onCluster.nodes.join(',') } : { REDIS_URL: redisUrl }),
    REDIS_PREFIX: redisPrefix
  }
  const env = {
    DATABASE_URL: db.url,
    DATABASE_SCHEMA: db.schema,
    DATABASE_APPLICATION_NAME: applicationName,
    ...redisEnv,
    ...options.env
  }
  const names = 'abcdefgh'
  const instances = await Promise.all(
    Array.from({ length: options.size ?? 2 }, (_, i) => startInstance(t, `app-${names[i]}`, env))
  )
  return { db, instances, redisEnv, redisPrefix, applicationName }
}

/** startInstances, behind nginx. */
export async function startCluster (
  t: TestLike,
  options: { size?: number; env?: Record<string, string>; redisUrl?: string } = {}
): Promise<Cluster> {
  const started = await startInstances(t, options)
  const lb = await startLoadBalancer(t, started.instances)
  return { ...started, lb }
}

async function requireRedis (url: string): Promise<void> {
  const port = Number(new URL(url).port || 6379)
  if (!(await pingRedis(port))) throw new Error(`Redis is not reachable at ${url}: the cluster tests need it`)
}

/** Waits until `check` returns a truthy value (polling), or fails with `what`. */
export async function eventually<T> (
  what: string,
  check: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs = 15_000,
  everyMs = 100
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  while (Date.now() < deadline) {
    try {
      const value = await check()
      if (value) return value
    } catch (err) {
      last = err
    }
    await sleep(everyMs)
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`)
}

// ---------------------------------------------------------------- A cuttable TCP link

export interface TcpLink {
  port: number
  /** Drops every open connection and refuses new ones: the far side is unreachable. */
  cut (): Promise<void>
  restore (): Promise<void>
}

/**
 * A TCP relay to 127.0.0.1:`targetPort`, so a test can take PostgreSQL away from its instances (and
 * only from them) and bring it back, without touching the machine's server that other tests use.
 */
export async function startTcpLink (t: TestLike, targetPort: number): Promise<TcpLink> {
  const { createServer: createTcpServer, connect } = await import('node:net')
  const port = await freePort()
  const sockets = new Set<import('node:net').Socket>()
  const server = createTcpServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1')
    for (const [a, b] of [[client, upstream], [upstream, client]] as const) {
      sockets.add(a)
      a.on('error', () => b.destroy())
      a.on('close', () => { sockets.delete(a); b.destroy() })
      a.pipe(b)
    }
  })
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject)
        resolve()
      })
    })
  const cut = async () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()))
    for (const socket of sockets) socket.destroy()
    await closed
  }
  await listen()
  t.teardown(async () => { if (server.listening) await cut() })
  return { port, cut, restore: listen }
}

/**
 * A SOAP 1.1 request to v1 of UserService, signed in as `account` (PARTNER unless given) with a fresh
 * PasswordDigest UsernameToken.
 */
export function soapEnvelope (
  operation: string,
  body: string,
  account: { login: string; password: string } = PARTNER
): string {
  const nonce = randomBytes(16)
  const created = new Date().toISOString()
  const digest = createHash('sha1')
    .update(nonce)
    .update(created, 'utf8')
    .update(account.password, 'utf8')
    .digest('base64')
  const wsse = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd'
  const wsu = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd'
  const profile = 'http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0'
  return '<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">' +
    `<soap:Header><wsse:Security xmlns:wsse="${wsse}" xmlns:wsu="${wsu}"><wsse:UsernameToken><wsse:Username>${account.login}</wsse:Username>` +
    `<wsse:Password Type="${profile}#PasswordDigest">${digest}</wsse:Password>` +
    `<wsse:Nonce EncodingType="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary">${nonce.toString('base64')}</wsse:Nonce>` +
    `<wsu:Created>${created}</wsu:Created></wsse:UsernameToken></wsse:Security></soap:Header>` +
    `<soap:Body><${operation} xmlns="${SOAP_PUBLIC_URL}/v1/UserService">${body}</${operation}></soap:Body></soap:Envelope>`
}
