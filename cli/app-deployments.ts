// npm run app -- check FILE
// npm run app -- publish --name N --version V FILE
// npm run app -- retire --name N --version V
// npm run app -- list [--json] [--stale-days N]
// App deployments for release pipelines (app/graphql/app-deployments.ts), against the configured
// store (SQLITE_PATH or DATABASE_URL) as the other commands: `check` in a pull request (nothing is
// written), `publish` when the app version ships (live on every running instance within seconds),
// `retire` when it is no longer installed, `list` to see what is used. Exit code 0 on success, 1 when
// refused (every problem on stderr, one a line), 2 on a usage error.
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { buildSchema } from 'graphql'
import { readCommandLine } from '../app/core/command-line.ts'
import {
  deployments as deploymentSettings, loadSettingsOrExit, store as storeSettings, type Loaded
} from '../app/core/config/index.ts'
import { openStore } from '../app/core/store/index.ts'
import {
  checkManifest,
  listDeployments,
  publishManifest,
  retireDeployment,
  runningTargets,
  type ListedDeployment
} from '../app/graphql/app-deployments.ts'
import { OPERATION_LIMIT_AREAS, operationLimits } from '../app/graphql/operation-limits.ts'
import { schemaSDL } from '../app/graphql/schema.ts'

/**
 * What the release job reads, and nothing else: where the store is, the limits manifests are checked
 * against, and the deployments' bound. No secret of the service (JWT_SECRET, PARTNER_SECRET_KEY).
 */
export const APP_COMMAND_AREAS = [storeSettings, deploymentSettings, ...OPERATION_LIMIT_AREAS] as const
export type AppCommandConfig = Loaded<typeof APP_COMMAND_AREAS>

const USAGE = `usage: npm run app -- check FILE
       npm run app -- publish --name N --version V FILE
       npm run app -- retire --name N --version V
       npm run app -- list [--json] [--stale-days N]
App deployments (a mobile app version's persisted operations) in the configured store (DATABASE_URL, else
SQLITE_PATH): check a manifest against this service (nothing written), publish it under an app name and
version (live on every instance within seconds), retire a version nobody runs, list them with their use
(--stale-days N marks those unused for N days). Exit 1 when refused, 2 on a usage error.
docs/deployment.md#app-deployments.`

function readJson (file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, 'utf8'))
  } catch (err) {
    throw new Refused([`${file}: ${(err as Error).message}`])
  }
}

class Refused extends Error {
  readonly problems: string[]
  constructor (problems: string[]) {
    super(problems.join('\n'))
    this.problems = problems
  }
}

/** One deployment a line: name, version, state, operations, requests, last use (and `stale` when asked). */
export function listingLines (deployments: ListedDeployment[]): string[] {
  if (deployments.length === 0) return ['no app deployments']
  return deployments.map((d) => [
    d.name, d.version, d.state, `${d.operations} operations`, `${d.requests} requests`,
    d.lastUsedAt ? `last used ${d.lastUsedAt}` : 'never used', ...(d.stale ? ['stale'] : [])
  ].join('  '))
}

const OPTIONS = {
  name: { type: 'string' },
  version: { type: 'string' },
  json: { type: 'boolean', default: false },
  'stale-days': { type: 'string' }
} as const

export async function runApp (argv: string[], config: AppCommandConfig, out: (line: string) => void): Promise<number> {
  let parsed
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, options: OPTIONS })
  } catch (err) {
    // parseArgs's first sentence names the option ("Unknown option '--bogus'").
    return usage((err as Error).message.split('. ')[0]!)
  }
  const { values, positionals } = parsed
  const [verb, file, ...extra] = positionals
  const schema = buildSchema(schemaSDL)
  const limits = operationLimits(config)
  if (verb === 'check' && file && extra.length === 0) {
    const checked = await checkManifest(readJson(file), schema, limits)
    if (checked.problems.length > 0) throw new Refused(checked.problems)
    out(`${file}: ${checked.operations.length} operations check for this service`)
    return 0
  }
  if (verb !== 'publish' && verb !== 'retire' && verb !== 'list') {
    return usage(verb === 'check' ? 'check takes one FILE' : verb ? `unknown command: ${verb}` : 'a command is missing')
  }
  if ((verb === 'publish' || verb === 'retire') && (!values.name || !values.version)) {
    return usage(`${verb} needs --name and --version`)
  }
  if (verb === 'publish' && (!file || extra.length > 0)) return usage('publish takes one FILE')
  if (verb !== 'publish' && file) return usage(`${verb} takes no FILE`)
  const staleDays = values['stale-days'] === undefined ? null : Number(values['stale-days'])
  if (staleDays !== null && !(Number.isInteger(staleDays) && staleDays >= 0)) return usage('--stale-days takes a whole number of days')

  const store = await openStore(config)
  try {
    if (verb === 'publish') {
      // Checked against what the running instances run (their schema and limits, as they said in the
      // store), not this checkout's: the checkout's only when no instance has said.
      const running = await runningTargets(store)
      const published = await publishManifest(store, {
        name: values.name!,
        version: values.version!,
        manifest: readJson(file!),
        schema,
        limits,
        maxBytes: config.deployments.maxBytes,
        ...(running.length > 0 ? { targets: running } : {})
      })
      const checkedBy = running.length > 0
        ? `checked by ${running.map((target) => target.label).join(' and ')}`
        : 'checked against this checkout\'s schema and limits (no running instance has said what it runs)'
      out(published.outcome === 'published'
        ? `published ${values.name} ${values.version}: ${published.operations} operations, ${checkedBy}; live on every instance within seconds`
        : `${values.name} ${values.version} is published already with these operations: nothing changed`)
    } else if (verb === 'retire') {
      await retireDeployment(store, values.name!, values.version!)
      out(`retired ${values.name} ${values.version}: its operations are refused on every instance within seconds (unless another active deployment holds them)`)
    } else {
      const deployments = await listDeployments(store, staleDays)
      if (values.json) {
        out(JSON.stringify(deployments.map(({ name, version, state, operations, requests, lastUsedAt, stale }) =>
          ({ name, version, state, operations, requests, lastUsedAt, ...(stale === null ? {} : { stale }) })), null, 2))
      } else {
        for (const line of listingLines(deployments)) out(line)
      }
    }
    return 0
  } catch (err) {
    const problems = (err as { details?: { problems?: string[] } }).details?.problems
    throw new Refused(problems ?? [(err as Error).message])
  } finally {
    await store.close()
  }

  function usage (problem: string): number {
    console.error(problem)
    console.error(USAGE)
    return 2
  }
}

if (import.meta.main) {
  // Help needs no settings: answered before the configuration is read. Then only APP_COMMAND_AREAS:
  // a release job holds no secret of the service.
  readCommandLine(USAGE, { allowPositionals: true, options: OPTIONS })
  const config = loadSettingsOrExit(APP_COMMAND_AREAS)
  try {
    process.exitCode = await runApp(process.argv.slice(2), config, (line) => console.log(line))
  } catch (err) {
    if (err instanceof Refused) {
      for (const problem of err.problems) console.error(problem)
      process.exitCode = 1
    } else {
      console.error((err as Error).message)
      process.exitCode = 1
    }
  }
}
