// How every command reads its command line (the service's `npm start` and the tools in cli/): `--help`
// (or `-h`) prints the command's usage on standard output and exits 0; an unknown option, a missing
// value or an unexpected argument prints one line saying which, then the usage, on standard error, and
// exits 2. Never a stack trace: node:util's parseArgs throws a TypeError, which is caught here.
import { parseArgs, type ParseArgsConfig } from 'node:util'

/** What parseArgs returns for `config`. */
export type CommandLine<T extends ParseArgsConfig> = ReturnType<typeof parseArgs<T>>

/** Prints `problem` (one line) and the usage on standard error, and exits 2. */
export function refuseCommandLine (usage: string, problem: string): never {
  console.error(problem.replace(/\s*\n\s*/g, ' '))
  console.error(usage)
  process.exit(2)
}

/**
 * The command line parsed by `config` (strict: every option must be declared). `--help` anywhere prints
 * `usage` and exits 0, before anything else is read (no setting is needed to ask for help).
 */
export function readCommandLine<T extends ParseArgsConfig> (
  usage: string,
  config: T,
  argv: string[] = process.argv.slice(2)
): CommandLine<T> {
  const end = argv.indexOf('--')
  const options = end === -1 ? argv : argv.slice(0, end)
  if (options.includes('--help') || options.includes('-h')) {
    console.log(usage)
    process.exit(0)
  }
  try {
    return parseArgs({ ...config, args: argv, strict: true }) as CommandLine<T>
  } catch (err) {
    // parseArgs's first sentence names the option ("Unknown option '--bogus'"); the rest is advice about
    // positional arguments that start with a dash.
    return refuseCommandLine(usage, `${(err as Error).message.split('. ')[0]}`)
  }
}
