// Runs the service as a real process (`node app/server.ts`, or `npm start`) for tests of what only a
// process shows: its start-up output, its exit code, how it takes signals. The environment is only
// PATH and HOME plus what the test gives, so nothing of the test runner's own environment leaks in.
import { spawn, type ChildProcessByStdio } from 'node:child_process'
import { createServer, type AddressInfo } from 'node:net'
import type { Readable } from 'node:stream'
import type { TestLike } from './app.ts'

export const REPO = new URL('../..', import.meta.url).pathname.replace(/\/$/, '')

export interface SpawnedService {
  child: ChildProcessByStdio<null, Readable, Readable>
  /** Everything written so far on stdout and stderr. */
  stdout (): string
  stderr (): string
  /** The exit code (or the signal's name). */
  exited: Promise<number | string | null>
}

export function processEnv (env: Record<string, string>): Record<string, string> {
  // Load shedding off unless a test sets it: test files share two cores, and a starved service would
  // shed the test's own requests (503) by measuring its event-loop delay.
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0',
    ...env
  }
}

/** Runs a shell script as a README reader would (bash, `set -e`, from the repository), killed after 60 s. */
export async function runScript (script: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const bash = spawn('bash', ['-c', `set -e\n${script}`], { cwd: REPO, env: processEnv({}), stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  bash.stdout.on('data', (d) => { stdout += d })
  bash.stderr.on('data', (d) => { stderr += d })
  const timer = setTimeout(() => bash.kill('SIGKILL'), 60_000)
  const code = await new Promise<number | null>((resolve) => bash.on('exit', resolve))
  clearTimeout(timer)
  return { code, stdout, stderr }
}

/** Spawns `command` (node app/server.ts by default) and collects its output; ended by the test's teardown. */
export function spawnService (
  t: TestLike,
  env: Record<string, string>,
  options: { command?: string[]; cwd?: string } = {}
): SpawnedService {
  const [file, ...args] = options.command ?? [process.execPath, `${REPO}/app/server.ts`]
  const child = spawn(file!, args, {
    cwd: options.cwd ?? REPO,
    env: processEnv(env),
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d) => {
    stdout += d
  })
  child.stderr.on('data', (d) => {
    stderr += d
  })
  const exited = new Promise<number | string | null>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal))
  )
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    // A grandchild the signal did not reach would hold the pipes, and with them this test process, open.
    child.stdout.destroy()
    child.stderr.destroy()
  })
  return { child, exited, stdout: () => stdout, stderr: () => stderr }
}

/**
 * Spawns the service and waits until it listens; `url` is the address it logged, or, when the test gives
 * PORT (a service logging at warn prints no address), the one where it answers /health/live.
 */
export async function startService (
  t: TestLike,
  env: Record<string, string>,
  options: { command?: string[]; cwd?: string } = {}
): Promise<SpawnedService & { url: string }> {
  const spawned = spawnService(t, env, options)
  const givenPort = Number(env.PORT ?? 0)
  let started = false
  const url = await new Promise<string>((resolve, reject) => {
    const listen = (address: string) => {
      started = true
      clearTimeout(timer)
      spawned.child.stdout.off('data', listening)
      resolve(address)
    }
    const timer = setTimeout(
      () => reject(new Error(`the service did not start:\n${spawned.stdout()}${spawned.stderr()}`)),
      20000
    )
    spawned.exited.then(
      (code) => {
        clearTimeout(timer)
        reject(new Error(`the service exited (${code}):\n${spawned.stdout()}${spawned.stderr()}`))
      },
      () => {}
    )
    // Removed once the address is found: searching everything written so far at every chunk is quadratic,
    // and a test that loads the service (a hundred thousand access lines) would slow its own reading of
    // the pipe until the service's unwritten lines grew its memory.
    const listening = () => {
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(spawned.stdout())
      if (match) listen(match[1]!)
    }
    spawned.child.stdout.on('data', listening)
    if (givenPort > 0) {
      const address = `http://127.0.0.1:${givenPort}`
      const probe = () => {
        if (started || spawned.child.exitCode !== null) return
        fetch(`${address}/health/live`).then((res) => (res.ok ? listen(address) : setTimeout(probe, 50)), () => setTimeout(probe, 50))
      }
      probe()
    }
  })
  return { ...spawned, url }
}

/**
 * Ports this process has handed out: the kernel may give a just-closed port 0 again, and two handed out
 * for one instance (PORT and METRICS_PORT) must differ.
 */
const handedOut = new Set<number>()

/**
 * A port free on 127.0.0.1 a moment ago, for a listener that cannot take port 0 (e.g. METRICS_PORT, where 0 means off).
 * Never one this process handed out before (one CI run started an instance whose PORT and METRICS_PORT came out equal).
 */
export async function freePort (): Promise<number> {
  for (;;) {
    const server = createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address() as AddressInfo
    await new Promise((resolve) => server.close(resolve))
    if (!handedOut.has(port)) {
      handedOut.add(port)
      return port
    }
  }
}
