// Ctrl+C in a terminal sends SIGINT to the whole foreground process group: npm and the service at once,
// and npm then forwards it to the service again. Each of several tries must end in a graceful shutdown
// that says so (exit 0, "shutting down" then "shut down"), never in the service killed by the signal.
// The race is timing-dependent (npm's copy must land at the wrong moment), so the second test makes it
// certain: a stream of copies during the whole shutdown.
import { test } from 'tap'
import { spawn } from 'node:child_process'
import { processEnv, REPO, startService } from '../helpers/server-process.ts'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY, type TestLike } from '../helpers/app.ts'

const TRIES = 6

/** The development service on an ephemeral port, logging at info, with its store in `dir`. */
const serviceEnv = (dir: string) => ({
  PORT: '0',
  HOST: '127.0.0.1',
  LOG_LEVEL: 'info',
  SQLITE_PATH: `${dir}/service.db`,
  JWT_SECRET: TEST_JWT_SECRET,
  PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY
})

/** `npm start` in a process group of its own, as a terminal runs it; SIGINT to the group, as Ctrl+C sends it. */
async function startThenCtrlC (t: TestLike, dir: string): Promise<{ exit: number | string | null; output: string }> {
  const child = spawn('npm', ['start'], {
    cwd: REPO,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: processEnv(serviceEnv(dir))
  })
  t.teardown(() => { try { process.kill(-child.pid!, 'SIGKILL') } catch { /* already gone */ } })
  let output = ''
  child.stdout.on('data', (d) => { output += d })
  child.stderr.on('data', (d) => { output += d })
  const exited = new Promise<number | string | null>((resolve) => child.on('close', (code, signal) => resolve(code ?? signal)))
  const bounded = <T>(promise: Promise<T>, ms: number, what: string) => Promise.race([
    promise,
    new Promise<never>((_resolve, reject) => setTimeout(() => reject(new Error(`${what} within ${ms} ms:\n${output}`)), ms).unref())
  ])
  await bounded(new Promise<void>((resolve) => child.stdout.on('data', () => {
    if (output.includes('"msg":"service ready"')) resolve()
  })), 20000, 'no "service ready"')
  // An idle server, as a developer leaves it before pressing Ctrl+C.
  await new Promise((resolve) => setTimeout(resolve, 200))
  process.kill(-child.pid!, 'SIGINT')
  return { exit: await bounded(exited, 10000, 'npm start did not exit after Ctrl+C'), output }
}

test(`Ctrl+C on npm start (SIGINT to npm and the service together) shuts down gracefully, ${TRIES} tries of ${TRIES}`, async (t) => {
  const dir = t.testdir()
  for (let i = 1; i <= TRIES; i++) {
    const { exit, output } = await startThenCtrlC(t, dir)
    t.equal(exit, 0, `try ${i}: npm exits 0 (130 or SIGINT: the service was killed by the signal)\n${output}`)
    t.match(output, /"signal":"SIGINT","msg":"shutting down"/, `try ${i}: says it is shutting down`)
    t.match(output, /"msg":"shut down"/, `try ${i}: says it is done`)
    t.notMatch(output, /second SIGINT/, `try ${i}: npm's forwarded copy of the same Ctrl+C is not a second one`)
  }
})

test('copies of one stop signal arriving while the service shuts down (npm forwarding, a terminal) never cut it short', async (t) => {
  const dir = t.testdir()
  const service = await startService(t, serviceEnv(dir))
  // The first SIGINT starts the shutdown; copies follow every millisecond until the process is gone,
  // so one lands whatever the shutdown is doing at that moment (Node restoring the default action between
  // two listeners, as close-with-grace did, was such a moment).
  service.child.kill('SIGINT')
  const copies = setInterval(() => { service.child.kill('SIGINT') }, 1)
  const exit = await Promise.race([
    service.exited,
    new Promise((resolve) => setTimeout(resolve, 10000, 'still running after 10 s')),
  ])
  clearInterval(copies)
  t.equal(exit, 0, `a graceful exit, not killed by a copy nor cut short by it:\n${service.stdout()}${service.stderr()}`)
  t.match(service.stdout(), /"msg":"shut down"/, 'the shutdown finished and said so')
})
