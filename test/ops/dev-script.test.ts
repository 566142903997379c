// `npm run dev` runs the watcher with `exec`, like `npm start`: a SIGTERM sent to npm (what a terminal,
// a process manager or a container runtime sends) reaches the watcher, which stops the server. Without
// `exec`, npm's shell took the signal and the watcher and its server kept running, orphaned.
import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { startService } from '../helpers/server-process.ts'

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** The parent of a process, from /proc (Linux). */
const parentOf = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ')[1])

test('a SIGTERM to `npm run dev` stops the watcher and the server', async (t) => {
  const dir = t.testdir()
  // LOG_LEVEL info: JSON lines (which carry the pid) rather than development's readable text.
  const service = await startService(t, { PORT: '0', SQLITE_PATH: `${dir}/dev.db`, LOG_LEVEL: 'info' }, { command: ['npm', 'run', 'dev'] })
  const listening = service.stdout().split('\n').find((line) => line.includes('Server listening at'))!
  const server = (JSON.parse(listening) as { pid: number }).pid
  const watcher = parentOf(server)
  t.equal(parentOf(watcher), service.child.pid, 'npm runs the watcher itself (exec: no shell between them)')

  service.child.kill('SIGTERM')
  await service.exited
  // Bounded waits, not timings: each process has up to 20 s to be gone.
  for (const [name, pid] of [['server', server], ['watcher', watcher]] as const) {
    for (let i = 0; i < 200 && alive(pid); i++) await new Promise((resolve) => setTimeout(resolve, 100))
    t.notOk(alive(pid), `the ${name} is gone`)
    if (alive(pid)) process.kill(pid, 'SIGKILL')
  }
})
