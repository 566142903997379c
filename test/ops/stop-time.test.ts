// What an instance on PostgreSQL and Redis waits for between SIGTERM and its exit (docs/operations.md
// "Stopping an instance"): the idle keep-alive drain (SHUTDOWN_IDLE_DRAIN_MS, 1 s in production), then,
// once `shut down` is logged, only the log lines still waiting for standard output. With standard output
// read, the exit follows `shut down` at once; with a reader that does not keep up (a slow log collector),
// the process stays until its lines are taken, and `shut down`'s time is earlier than the exit by as long.
import { test } from 'tap'
import http from 'node:http'
import { once } from 'node:events'
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { freshSchema, TEST_DATABASE_URL } from '../helpers/postgres.ts'
import { freePort, startService } from '../helpers/server-process.ts'

async function deployedService (t: Parameters<typeof freshSchema>[0]) {
  const port = await freePort()
  const service = await startService(t, {
    NODE_ENV: 'production',
    HOST: '127.0.0.1',
    PORT: String(port),
    JWT_SECRET: TEST_JWT_SECRET,
    PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
    DATABASE_URL: TEST_DATABASE_URL,
    DATABASE_SCHEMA: await freshSchema(t, 'stop'),
    REDIS_URL: 'redis://127.0.0.1:6379',
    REDIS_PREFIX: `stop${randomBytes(3).toString('hex')}:`,
    RATE_LIMIT_REQUESTS: '1000000'
  })
  return { ...service, port }
}

/** `count` requests on `connections` keep-alive connections, left open afterwards (as nginx's upstream keepalive). */
async function requests (port: number, count: number, agent: http.Agent): Promise<void> {
  let sent = 0
  const one = () => new Promise<void>((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, agent, path: '/health/nope' }, (res) => { res.resume(); res.on('end', resolve) }).on('error', reject)
  })
  await Promise.all(Array.from({ length: agent.maxSockets }, async () => { while (sent++ < count) await one() }))
}

const shutDownTime = (stdout: string) => Number(/"time":(\d+),[^\n]*"msg":"shut down"/.exec(stdout)?.[1])

test('standard output read: the exit follows `shut down` at once, the idle drain being the wait', async (t) => {
  const service = await deployedService(t)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 })
  t.teardown(() => agent.destroy())
  await requests(service.port, 50, agent)
  const signalled = Date.now()
  service.child.kill('SIGTERM')
  t.equal(await service.exited, 0)
  const exitedAt = Date.now()
  const shutDown = shutDownTime(service.stdout())
  t.ok(shutDown > 0, '`shut down` logged')
  t.ok(exitedAt - shutDown < 1000, `the exit ${exitedAt - shutDown} ms after \`shut down\``)
  t.ok(exitedAt - signalled < 1000 + 2000, `SIGTERM to exit ${exitedAt - signalled} ms: the 1 s idle drain and little more`)
})

test('standard output not read: the process exits once its waiting lines are taken, every line kept', async (t) => {
  const service = await deployedService(t)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 8 })
  t.teardown(() => agent.destroy())
  // The reader stalls: the pipe fills, and the access lines of these requests wait in the process.
  service.child.stdout.pause()
  const COUNT = 3000
  await requests(service.port, COUNT, agent)
  agent.destroy()
  service.child.kill('SIGTERM')
  await sleep(2500)
  t.equal(service.child.exitCode, null, 'shut down, but still writing the lines that wait for standard output')
  const resumed = Date.now()
  service.child.stdout.resume()
  t.equal(await service.exited, 0)
  const exitedAt = Date.now()
  t.ok(exitedAt - resumed < 2000, `exited ${exitedAt - resumed} ms after its standard output was read again`)
  // What the process wrote before it exited may still be in the pipe: read it to its end.
  if (!service.child.stdout.readableEnded) await once(service.child.stdout, 'end')
  const stdout = service.stdout()
  t.ok(exitedAt - shutDownTime(stdout) >= 1000, `\`shut down\` is ${exitedAt - shutDownTime(stdout)} ms older than the exit`)
  t.equal(stdout.split('\n').filter((line) => line.includes('"msg":"request completed"')).length, COUNT, 'no line lost')
})
