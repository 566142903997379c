// What the shared Redis spends on a deployed row (the fleet's ceiling: instances scale out, one Redis
// does not). Around each measured round: Redis's CPU time and the commands it processed (`INFO`: every
// call, a script's own calls included), so a row's Redis CPU µs and calls per request come from the
// same rounds as its server's CPU. After the rounds, a sample of requests watched with MONITOR splits the
// commands the row sends (top level: one per script) from the calls its scripts make.
import { Redis } from 'ioredis'

export interface RedisReading {
  /** used_cpu_user + used_cpu_sys of the Redis process, µs. */
  cpuMicros: number
  /** total_commands_processed: every command, a script's own calls included. */
  commands: number
}

export interface CommandSample {
  /** Commands sent by clients (a script counts one), per request of the sample. */
  topLevelPerRequest: number
  /** Calls made by scripts, per request. */
  scriptCallsPerRequest: number
  /** The commands by name, per request (top level). */
  byName: Record<string, number>
}

export interface RedisMeter {
  read (): Promise<RedisReading>
  /** Between two readings: Redis CPU µs and commands, less the meter's own INFO. */
  spent (before: RedisReading, after: RedisReading): RedisReading
  /** Watches the commands sent while `run` sends `requests` requests. */
  sample (requests: number, run: () => Promise<void>): Promise<CommandSample>
  close (): Promise<void>
}

const field = (info: string, name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? NaN)

export async function redisMeter (url: string): Promise<RedisMeter> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 })
  await redis.ping()
  return {
    async read () {
      const info = await redis.info()
      return {
        cpuMicros: (field(info, 'used_cpu_user') + field(info, 'used_cpu_sys')) * 1e6,
        commands: field(info, 'total_commands_processed')
      }
    },
    spent (before, after) {
      // The INFO that took the second reading is counted in it.
      return { cpuMicros: after.cpuMicros - before.cpuMicros, commands: after.commands - before.commands - 1 }
    },
    async sample (requests, run) {
      const monitor = await new Redis(url, { lazyConnect: true }).monitor()
      let topLevel = 0
      let scriptCalls = 0
      const byName: Record<string, number> = {}
      // ioredis can fail a MONITOR connection on a line that arrives as it ends ("Command queue state
      // error"): that one fails the sample while it is taken, and is ignored once it is taken.
      let failed: Error | null = null
      let taken = false
      monitor.on('error', (err: Error) => { if (!taken) failed ??= err })
      monitor.on('monitor', (_time: string, args: string[], source: string) => {
        const name = String(args[0]).toLowerCase()
        if (source === 'lua') scriptCalls++
        else if (name !== 'info' && name !== 'monitor' && name !== 'ping') {
          topLevel++
          byName[name] = (byName[name] ?? 0) + 1
        }
      })
      try {
        await run()
        // MONITOR's lines arrive in order: once this ping has been answered, every earlier command is seen.
        await redis.ping()
        await new Promise((resolve) => setTimeout(resolve, 100))
      } finally {
        taken = true
        monitor.disconnect()
      }
      if (failed) throw failed
      for (const name of Object.keys(byName)) byName[name]! /= requests
      return { topLevelPerRequest: topLevel / requests, scriptCallsPerRequest: scriptCalls / requests, byName }
    },
    async close () {
      await redis.quit()
    }
  }
}
