// Server processes for the benchmark: each one started the way `npm start` starts the service
// (`node <script>` with the project's Node and an environment), its output sent to a log file so a
// failure can show its tail, its peak RSS read from /proc when it is stopped.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { cpus } from 'node:os'
import { join } from 'node:path'

export const REPO_ROOT = new URL('..', import.meta.url).pathname

export interface ServerProcess {
  readonly name: string
  readonly pid: number
  readonly url: string
  /** CPU time used so far (user + system), in microseconds; null where /proc is not available. */
  cpuMicros(): number | null
  /** The same, split into user and kernel (system) time; null where /proc is not available. */
  cpuSplitMicros(): { user: number; system: number } | null
  /** Peak resident set size so far (VmHWM), in bytes; null where /proc is not available. */
  peakRssBytes(): number | null
  /** Resident set size now (VmRSS), in bytes; null where /proc is not available or once stopped. */
  rssBytes(): number | null
  /** SIGTERM (graceful: close-with-grace, so --cpu-prof profiles are written), SIGKILL after 15 s. */
  stop(): Promise<void>
  logTail(lines?: number): string
}

export interface StartOptions {
  name: string
  /** Script path relative to the repository root, e.g. app/server.ts. */
  script: string
  env: Record<string, string>
  logDir: string
  nodeArgs?: string[]
  readyPath?: string
  timeoutMs?: number
}

/**
 * On a machine with two or more CPUs (and Linux's taskset), every measured server runs on the last CPU
 * and the runner (autocannon) on the others: a server, its GC threads and the load generator would
 * otherwise be moved between CPUs of unequal speed (a shared VM's CPUs are) from one round to the next,
 * and compete for the same CPU at random. Null where pinning is not possible (the processes then float).
 */
export const serverCpu: number | null = (() => {
  const count = cpus().length
  if (process.platform !== 'linux' || count < 2) return null
  try {
    execFileSync('taskset', ['-cp', `0-${count - 2}`, String(process.pid)], { stdio: 'ignore' })
    return count - 1
  } catch {
    return null
  }
})()

/** A port the kernel just handed out and released; the server is started on it right after. */
export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

function readStatusKb (pid: number, field: 'VmHWM' | 'VmRSS'): number | null {
  const path = `/proc/${pid}/status`
  if (!existsSync(path)) return null
  const match = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(readFileSync(path, 'utf8'))
  return match ? Number(match[1]) * 1024 : null
}

export const readPeakRss = (pid: number): number | null => readStatusKb(pid, 'VmHWM')
export const readRss = (pid: number): number | null => readStatusKb(pid, 'VmRSS')

const CLOCK_TICKS_PER_SEC = 100 // USER_HZ: 100 on Linux for every architecture Node supports

/** CPU time the process has used so far in user and kernel mode, in microseconds; null where /proc is not available. */
export function readCpuSplitMicros (pid: number): { user: number; system: number } | null {
  try {
    // Fields after the command name (which may hold spaces, hence the last ')'): utime is the 12th, stime the 13th.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return {
      user: (Number(fields[11]) / CLOCK_TICKS_PER_SEC) * 1e6,
      system: (Number(fields[12]) / CLOCK_TICKS_PER_SEC) * 1e6
    }
  } catch {
    return null
  }
}

/** CPU time (user + system) the process has used so far, in microseconds; null where /proc is not available. */
export function readCpuMicros (pid: number): number | null {
  const split = readCpuSplitMicros(pid)
  return split === null ? null : split.user + split.system
}

function tail (path: string, lines: number): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
  } catch {
    return ''
  }
}

/**
 * Starts the server; a port taken between freePort() and the server's listen (other tests use port 0 too) is retried.
 */
export async function startServer (options: StartOptions): Promise<ServerProcess> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(options)
    } catch (err) {
      if (attempt >= 3 || !/EADDRINUSE/.test((err as Error).message)) throw err
    }
  }
}

async function startOnce (options: StartOptions): Promise<ServerProcess> {
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const logPath = join(options.logDir, `${options.name.replace(/[^a-z0-9-]+/gi, '_')}-${port}.log`)
  const logFd = openSync(logPath, 'w')
  const command = [process.execPath, ...(options.nodeArgs ?? []), options.script]
  const child: ChildProcess = spawn(command[0]!, command.slice(1), {
    cwd: REPO_ROOT,
    // Only what we pass: nothing from the shell running the benchmark leaks into a measured process.
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      ...options.env,
      HOST: '127.0.0.1',
      PORT: String(port)
    },
    stdio: ['ignore', logFd, logFd]
  })
  closeSync(logFd)
  let exited: string | null = null
  const exitPromise = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = `exited with ${signal ?? code}`
      resolve()
    })
  })

  let peak: number | null = null
  const server: ServerProcess = {
    name: options.name,
    pid: child.pid!,
    url,
    cpuMicros: () => (exited === null ? readCpuMicros(child.pid!) : null),
    cpuSplitMicros: () => (exited === null ? readCpuSplitMicros(child.pid!) : null),
    peakRssBytes: () => {
      if (exited === null) peak = readPeakRss(child.pid!) ?? peak
      return peak
    },
    rssBytes: () => (exited === null ? readRss(child.pid!) : null),
    logTail: (lines = 20) => tail(logPath, lines),
    async stop () {
      if (exited !== null) return
      server.peakRssBytes()
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000)
      await exitPromise
      clearTimeout(timer)
    }
  }

  const deadline = Date.now() + (options.timeoutMs ?? 30_000)
  const readyUrl = url + (options.readyPath ?? '/health/ready')
  while (true) {
    if (exited !== null) throw new Error(`${options.name} ${exited} before it was ready:\n${tail(logPath, 30)}`)
    try {
      const response = await fetch(readyUrl, { signal: AbortSignal.timeout(1000) })
      await response.arrayBuffer()
      if (response.ok) {
        // Pinned once ready, every thread (-a): starting up (loading and compiling modules) may use any CPU,
        // so the servers of a group, started at once, are ready sooner; nothing is measured before this.
        if (serverCpu !== null) execFileSync('taskset', ['-a', '-cp', String(serverCpu), String(child.pid)], { stdio: 'ignore' })
        return server
      }
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await server.stop()
      throw new Error(
        `${options.name} was not ready at ${readyUrl} within ${options.timeoutMs ?? 30_000} ms:\n${tail(logPath, 30)}`
      )
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
