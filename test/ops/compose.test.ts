// The deployment files agree with the tested topology: docker-compose.yml (nginx in front of two app
// replicas, PostgreSQL and Redis with health checks), deploy/nginx.conf (the rules the cluster test
// runs), the Dockerfile (multi-stage, non-root, health check) and the configuration the app reads.
// No container engine runs here: the files are parsed and checked, and nginx checks its config.
import { test } from 'tap'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { parse } from 'yaml'
import { SETTING_NAMES } from '../../app/core/config/index.ts'

const REPO = new URL('../..', import.meta.url).pathname.replace(/\/$/, '')
const read = (path: string) => readFileSync(join(REPO, path), 'utf8')

interface Service {
  build?: string
  image?: string
  environment?: Record<string, string>
  depends_on?: Record<string, { condition: string }>
  healthcheck?: { test: string[] | string }
  ports?: string[]
  volumes?: string[]
  networks?: string[] | Record<string, { ipv4_address?: string } | null>
  stop_grace_period?: string
}

const compose = parse(read('docker-compose.yml')) as {
  services: Record<string, Service>
  networks: Record<string, any>
  volumes?: Record<string, unknown>
}
const nginxConf = read('deploy/nginx.conf')
/** Every setting the service reads (app/core/config/). */
const settings = new Set(SETTING_NAMES)
const appServices = Object.entries(compose.services).filter(([, s]) => s.build !== undefined)

test('docker-compose.yml: nginx, two app replicas, PostgreSQL and Redis', async (t) => {
  t.same(Object.keys(compose.services).sort(), ['app-1', 'app-2', 'nginx', 'postgres', 'redis'])
  t.equal(appServices.length, 2, 'two replicas of the app, built from this repository')
  for (const [name, service] of appServices) {
    t.equal(service.build, '.', `${name} is built from the Dockerfile`)
    const env = service.environment!
    for (const key of Object.keys(env)) t.ok(settings.has(key), `${name}: ${key} is a setting the service reads`)
    t.equal(env.NODE_ENV, 'production')
    t.match(env.DATABASE_URL, /^postgres:\/\/[^@]+@postgres:5432\//, 'PostgreSQL is the postgres service')
    t.equal(env.REDIS_URL, 'redis://redis:6379', 'Redis is the redis service')
    t.match(env.JWT_SECRET, /^\$\{JWT_SECRET:\?/, 'the JWT secret must be supplied, never defaulted')
    t.match(env.PARTNER_SECRET_KEY, /^\$\{PARTNER_SECRET_KEY:\?/)
    t.same(
      service.depends_on,
      { postgres: { condition: 'service_healthy' }, redis: { condition: 'service_healthy' } },
      `${name} starts once its stores are healthy`
    )
    t.match(JSON.stringify(service.healthcheck?.test), /\/health\/ready/, `${name} is healthy when ready`)
    t.ok(
      Number.parseInt(service.stop_grace_period ?? '10') * 1000 > Number(env.SHUTDOWN_GRACE_MS ?? 10000),
      'the container is given longer than the graceful shutdown'
    )
    t.match(env.METRICS_PORT, /^[1-9]\d*$/, `${name} serves metrics on a port of their own (production serves none on the API port)`)
    t.not(env.METRICS_PORT, env.PORT)
    t.notOk(
      service.ports,
      `${name} publishes no port: clients go through nginx, Prometheus scrapes the backend network`
    )
  }
  t.same(appServices[0]![1], appServices[1]![1], 'the replicas are identical')

  for (const name of ['postgres', 'redis']) t.ok(compose.services[name]!.healthcheck, `${name} has a health check`)
  t.match(JSON.stringify(compose.services.postgres!.healthcheck!.test), /pg_isready/)
  t.match(JSON.stringify(compose.services.redis!.healthcheck!.test), /redis-cli.*ping/)
})

test('docker-compose.yml and deploy/nginx.conf: the load balancer of the cluster test', async (t) => {
  const nginx = compose.services.nginx!
  t.same(
    nginx.depends_on,
    Object.fromEntries(appServices.map(([name]) => [name, { condition: 'service_healthy' }])),
    'nginx starts once both replicas are healthy'
  )

  // The upstream servers are the app services, on the port they listen on.
  const upstream = [...nginxConf.matchAll(/^\s*server ([\w.-]+):(\d+)/gm)].map((m) => `${m[1]}:${m[2]}`)
  t.same(upstream, appServices.map(([name, s]) => `${name}:${s.environment!.PORT}`), 'upstream = the app replicas')

  // What nginx.conf includes is what compose mounts: the shared rules the cluster test includes too.
  const includes = [...nginxConf.matchAll(/^\s*include ([^;]+);/gm)].map((m) => m[1]!)
  t.same(includes.sort(), ['/etc/nginx/graphql/http.conf', '/etc/nginx/graphql/locations.conf'])
  t.ok(nginx.volumes!.includes('./deploy/nginx.conf:/etc/nginx/nginx.conf:ro'))
  t.ok(nginx.volumes!.includes('./deploy/nginx:/etc/nginx/graphql:ro'))
  const harness = readFileSync(join(REPO, 'test/cluster/harness.ts'), 'utf8')
  t.match(harness, /include \$\{REPO\}\/deploy\/nginx\/http\.conf;/, 'the cluster test includes the same http rules')
  t.match(harness, /include \$\{REPO\}\/deploy\/nginx\/locations\.conf;/, 'and the same locations')

  // The published port is the one nginx listens on.
  const listen = /^\s*listen (\d+);/m.exec(nginxConf)?.[1]
  t.same(nginx.ports, [`${listen}:${listen}`])

  // Client addresses: the replicas trust X-Forwarded-For from nginx's fixed address only.
  const lbAddress = (nginx.networks as Record<string, { ipv4_address: string }>).backend!.ipv4_address
  for (const [name, service] of appServices) {
    t.equal(service.environment!.TRUST_PROXY, lbAddress, `${name} trusts the load balancer only`)
  }
  const subnet = compose.networks.backend.ipam.config[0].subnet as string
  t.ok(lbAddress.startsWith(subnet.split('.').slice(0, 3).join('.') + '.'), `${lbAddress} is in ${subnet}`)

  // Body cap: nginx's equals the app's default.
  const cap = /client_max_body_size (\d+)m;/.exec(read('deploy/nginx/http.conf'))?.[1]
  t.equal(Number(cap) * 1024 * 1024, 1048576, 'nginx caps bodies at BODY_LIMIT_BYTES\'s default')
})

test('nginx accepts deploy/nginx.conf (with the service names pointed at this machine)', async (t) => {
  const found = spawnSync('sh', ['-c', 'command -v nginx || { test -x /usr/sbin/nginx && echo /usr/sbin/nginx; }'], {
    encoding: 'utf8'
  })
  if (found.status !== 0) throw new Error('nginx is not installed: apt-get install -y nginx (.ci/run installs it)')
  const dir = mkdtempSync(join(tmpdir(), 'nginx-check-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const rendered = nginxConf
    .replaceAll('/etc/nginx/graphql/', `${REPO}/deploy/nginx/`)
    .replace(/server app-\d+:3000/g, 'server 127.0.0.1:3000')
    // (The container logs to its stdio; a test run has no terminal to open.)
    .replace('/dev/stderr', `${dir}/error.log`).replace('/dev/stdout', `${dir}/access.log`)
  writeFileSync(join(dir, 'nginx.conf'), rendered)
  const check = spawnSync(
    found.stdout.trim(),
    ['-t', '-e', join(dir, 'startup.log'), '-c', join(dir, 'nginx.conf'), '-p', dir, '-g', `pid ${dir}/nginx.pid;`],
    { encoding: 'utf8' }
  )
  t.equal(check.status, 0, check.stderr)
})

const composeFound = spawnSync('sh', ['-c', 'command -v docker-compose'], { encoding: 'utf8' })
// CI installs Debian's docker-compose (.ci/system-deps.sh) and must run this; elsewhere it is reported as
// skipped (visible in the summary) when docker-compose is not installed.
const composeMissing = composeFound.status !== 0 && !process.env.CI
test('docker-compose config -q (Debian\'s docker-compose)', { skip: composeMissing && 'docker-compose is not installed; the structural checks above cover the file' }, async (t) => {
  const found = composeFound
  t.equal(found.status, 0, 'docker-compose is installed (.ci/system-deps.sh installs it)')
  const env = { ...process.env, JWT_SECRET: 'x'.repeat(32), PARTNER_SECRET_KEY: 'y'.repeat(32) }
  const check = spawnSync(found.stdout.trim(), ['-f', join(REPO, 'docker-compose.yml'), 'config', '-q'], {
    encoding: 'utf8',
    env
  })
  t.equal(check.status, 0, check.stderr)
  const missing = spawnSync(found.stdout.trim(), ['-f', join(REPO, 'docker-compose.yml'), 'config', '-q'], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH }
  })
  t.not(missing.status, 0, 'refuses to run without the secrets')
  t.match(missing.stderr, /set JWT_SECRET/)
})

/** Local files the service loads, starting from app/server.ts (imports and files read next to modules). */
function runtimeFiles (): Set<string> {
  const seen = new Set<string>()
  const queue = ['app/server.ts']
  while (queue.length > 0) {
    const file = queue.pop()!
    if (seen.has(file)) continue
    seen.add(file)
    if (!file.endsWith('.ts')) continue
    const source = read(file)
    const references = [
      ...source.matchAll(/(?:from|import)\s*\(?\s*'(\.\.?\/[^']+)'/g),
      ...source.matchAll(/new URL\('(\.\.?\/[^']+)', import\.meta\.url\)/g)
    ].map((m) => m[1]!)
    for (const ref of references) {
      const target = relative(REPO, join(REPO, dirname(file), ref))
      if (existsSync(join(REPO, target)) && !target.endsWith('/')) queue.push(target)
    }
  }
  return seen
}

test('Dockerfile: multi-stage, production dependencies only, non-root, health check, everything the service loads', async (t) => {
  const dockerfile = read('Dockerfile')
  const stages = dockerfile.split(/^FROM /m).slice(1)
  t.ok(stages.length >= 2, 'multi-stage')
  t.match(stages[0], /npm ci --omit=dev/, 'dependencies from the lockfile, without dev dependencies')
  const runtime = stages.at(-1)!
  t.match(runtime, /^USER node$/m, 'the runtime runs as the unprivileged node user')
  t.match(runtime, /HEALTHCHECK[\s\S]*\/health\/ready/, 'health check on readiness')
  t.match(runtime, /^CMD \["node", "app\/server\.ts"\]$/m)
  t.match(dockerfile, /^ARG NODE_IMAGE=node:24/m, 'Node 24, as package.json pins')

  const copied = [...runtime.matchAll(/^COPY (?:--\S+ )*(\S+) /gm)].map((m) => m[1]!)
  const ignored = read('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'))
  const topLevel = new Set([...runtimeFiles()].map((f) => f.split('/')[0]!))
  t.ok(
    topLevel.has('app') && topLevel.has('plugins') && topLevel.has('routes'),
    `the service loads from ${[...topLevel].join(', ')}`
  )
  for (const dir of topLevel) {
    t.ok(copied.includes(dir), `${dir}/ is copied into the image`)
    t.notOk(ignored.includes(dir), `${dir}/ is not excluded by .dockerignore`)
  }
  const manifest = /PERSISTED_MANIFEST=(\S+)/.exec(runtime)?.[1]
  t.ok(
    manifest && copied.includes(manifest.split('/')[0]!) && existsSync(join(REPO, manifest)),
    'the persisted-query manifest is in the image'
  )
  for (const excluded of ['node_modules', '.git', 'test', '.env']) {
    t.ok(ignored.includes(excluded), `.dockerignore excludes ${excluded}`)
  }
})
