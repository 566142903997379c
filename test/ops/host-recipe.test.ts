// The host recipe (deploy/systemd/, deploy/host/nginx.conf) run as a host would run it, the way
// test/cluster runs nginx: systemd-analyze verifies the unit; two instances start exactly as the unit says
// (its ExecStart, WorkingDirectory, EnvironmentFile and Environment with the instance's number), with the
// env file's settings (its blanks filled: secrets, a PostgreSQL schema and Redis prefix of the test's
// own); a real nginx runs the main file (its ports and paths rendered, nothing else) around them with the
// shared rules of deploy/nginx/; requests go through it; a stop signal ends an instance gracefully in time.
import { test } from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync, chmodSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { randomBytes } from 'node:crypto'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { freshSchema, TEST_DATABASE_URL } from '../helpers/postgres.ts'
import { freePort, REPO, spawnService } from '../helpers/server-process.ts'
import { requireTool } from '../cluster/harness.ts'

const INSTALLED = '/opt/graphql-query-service'
const UNIT = readFileSync(join(REPO, 'deploy/systemd/graphql-query-service@.service'), 'utf8')
const ENV_FILE = readFileSync(join(REPO, 'deploy/systemd/graphql-query-service.env'), 'utf8')
const NGINX = readFileSync(join(REPO, 'deploy/host/nginx.conf'), 'utf8')

/** The [Service] section's keys (Environment may repeat: joined). */
function serviceSection (unit: string): Record<string, string> {
  const section = unit.split(/^\[Service\]$/m)[1]!.split(/^\[/m)[0]!
  const keys: Record<string, string> = {}
  for (const line of section.split('\n')) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line)
    if (match) keys[match[1]!] = keys[match[1]!] ? `${keys[match[1]!]} ${match[2]}` : match[2]!
  }
  return keys
}

/** KEY=VALUE lines, as systemd reads an EnvironmentFile (comments and blank lines skipped). */
const envFile = (text: string) => Object.fromEntries(text.split('\n').filter((l) => /^[A-Z_]+=/.test(l)).map((l) => {
  const at = l.indexOf('=')
  return [l.slice(0, at), l.slice(at + 1)]
}))

function scratch (t: { teardown (fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'host-recipe-'))
  chmodSync(dir, 0o755) // nginx's workers run unprivileged and keep temp files here
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Replaces `from` in `text`, which must occur exactly `times` times (the file changed otherwise: say so). */
function replaced (text: string, from: string | RegExp, to: string, times = 1): string {
  const pattern = typeof from === 'string' ? from : new RegExp(from.source, `${from.flags}g`)
  const count = typeof pattern === 'string' ? text.split(pattern).length - 1 : (text.match(pattern) ?? []).length
  if (count !== times) throw new Error(`expected ${times} × ${from} in the file, found ${count}`)
  return text.replaceAll(pattern, to)
}

test('systemd-analyze verify accepts the unit (installed in the checkout\'s place)', async (t) => {
  const analyze = requireTool('systemd-analyze', 'apt-get install -y systemd (.ci/system-deps.sh installs it)')
  const dir = scratch(t)
  writeFileSync(join(dir, 'env'), ENV_FILE)
  writeFileSync(join(dir, 'graphql-query-service@.service'),
    replaced(replaced(UNIT, '/etc/graphql-query-service/env', join(dir, 'env'), 2), INSTALLED, REPO, 4))
  const verify = spawnSync(analyze, ['verify', '--man=no', join(dir, 'graphql-query-service@1.service')], { encoding: 'utf8', cwd: dir })
  t.equal(verify.status, 0, verify.stderr)
  t.equal(verify.stderr, '', 'no warning: every key is known, the binary is there')
})

test('two instances as the unit runs them, behind the host\'s nginx: served through it, stopped gracefully', async (t) => {
  const nginxBin = requireTool('nginx', 'install Debian\'s nginx package (apt-get install -y nginx); .ci/run does it')
  const unit = serviceSection(UNIT)
  t.equal(unit.WorkingDirectory, INSTALLED)
  t.equal(unit.KillSignal, 'SIGTERM')
  const [binary, ...args] = unit.ExecStart!.split(' ')
  t.equal(binary, `${INSTALLED}/node_modules/.bin/node`, 'the project\'s own Node')
  t.same(args, ['app/server.ts'])

  const schema = await freshSchema(t, 'host')
  const shared = {
    ...envFile(ENV_FILE),
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    DATABASE_URL: TEST_DATABASE_URL,
    DATABASE_SCHEMA: schema,
    REDIS_PREFIX: `host${randomBytes(3).toString('hex')}:`
  }
  t.equal(envFile(ENV_FILE).JWT_SECRET, '', 'the file ships no secret')
  const instances = []
  for (const number of ['1', '2']) {
    const fromUnit = envFile(unit.Environment!.replaceAll('%i', number).split(' ').join('\n'))
    t.same(fromUnit, { PORT: `300${number}`, METRICS_PORT: `946${number}` }, `instance ${number}'s ports`)
    // This machine's ports may be taken: the test's own, in their place (the nginx file's upstream likewise).
    const ports = { PORT: String(await freePort()), METRICS_PORT: String(await freePort()) }
    const command = [binary!.replace(INSTALLED, REPO), ...args]
    const service = spawnService(t, { ...shared, ...fromUnit, ...ports }, { command, cwd: REPO })
    instances.push({
      service,
      url: `http://127.0.0.1:${ports.PORT}`,
      metrics: `http://127.0.0.1:${ports.METRICS_PORT}/metrics`,
      unitPort: fromUnit.PORT!
    })
  }
  for (const instance of instances) {
    for (let i = 0; ; i++) {
      if ((await fetch(`${instance.url}/health/ready`).catch(() => null))?.status === 200) break
      if (i > 200) throw new Error(`instance not ready: ${instance.service.stdout()}${instance.service.stderr()}`)
      await sleep(100)
    }
  }

  // The main file, rendered: its paths and ports only.
  const dir = scratch(t)
  const port = await freePort()
  let config = replaced(NGINX, INSTALLED, REPO, 3)
  config = replaced(config, /^user www-data;\n/m, '')
  config = replaced(config, 'pid /run/nginx.pid;', `pid ${dir}/nginx.pid;`)
  config = replaced(config, '/var/log/nginx/error.log', `${dir}/error.log`)
  config = replaced(config, '/var/log/nginx/graphql-access.log', `${dir}/access.log`)
  config = replaced(config, 'listen 80;', `listen 127.0.0.1:${port};`)
  for (const instance of instances) config = replaced(config, `server 127.0.0.1:${instance.unitPort} `, `server ${instance.url.slice('http://'.length)} `)
  config = replaced(config, 'http {\n', `http {\n  client_body_temp_path ${dir}/client_body;\n  proxy_temp_path ${dir}/proxy;\n` +
    `  fastcgi_temp_path ${dir}/fastcgi;\n  uwsgi_temp_path ${dir}/uwsgi;\n  scgi_temp_path ${dir}/scgi;\n`)
  writeFileSync(join(dir, 'nginx.conf'), config)
  const check = spawnSync(nginxBin, ['-t', '-q', '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf'), '-p', dir], { encoding: 'utf8' })
  t.equal(check.status, 0, check.stderr)
  const nginx = spawn(nginxBin, ['-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf'), '-p', dir, '-g', 'daemon off;'], { stdio: 'ignore' })
  t.teardown(() => { nginx.kill('SIGKILL') })
  const front = `http://127.0.0.1:${port}`
  for (let i = 0; ; i++) {
    if ((await fetch(`${front}/health/live`).catch(() => null))?.ok) break
    if (i > 100) throw new Error(`nginx did not answer: ${readFileSync(join(dir, 'error.log'), 'utf8')}`)
    await sleep(50)
  }

  // A persisted query (the env file's manifest), on both instances in turn.
  const users = `${front}/graphql?queryId=sha256:208530398fd1690d830741395fe1d351fff92fd45fa1ddc0410b336c598d30a0&variables=%7B%22limit%22%3A3%7D`
  for (let i = 0; i < 10; i++) {
    const answer = await fetch(users)
    t.equal(answer.status, 200)
    t.same((await answer.json()).data, { users: [] }, 'the schema of the test\'s own, migrated by the instances, empty')
    t.match(answer.headers.get('x-request-id'), /^[0-9a-f]{32}$/, 'nginx\'s request id, believed from the loopback peer (TRUST_PROXY)')
  }
  await sleep(400) // the access lines are written in batches
  for (const instance of instances) {
    t.ok(instance.service.stdout().includes('"msg":"request completed"'), 'each instance served some')
  }
  t.equal((await fetch(`${front}/metrics`)).status, 404, 'nginx does not publish the metrics')
  t.equal((await fetch(instances[0]!.metrics)).status, 200, 'each instance serves them on its METRICS_PORT')

  // Stopping one, as systemctl stop does: SIGTERM, and the other keeps serving.
  const stopping = Date.now()
  instances[0]!.service.child.kill('SIGTERM')
  const code = await instances[0]!.service.exited
  t.equal(code, 0, 'a graceful exit')
  t.ok(Date.now() - stopping < Number(unit.TimeoutStopSec) * 1000, `within TimeoutStopSec (${Date.now() - stopping} ms)`)
  t.equal((await fetch(users)).status, 200, 'nginx answers from the other instance')
})
