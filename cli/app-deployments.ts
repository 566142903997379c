// npm run app -- check FILE
// npm run app -- publish --name N --version V FILE
// npm run app -- retire --name N --version V
// npm run app -- list [--json] [--stale-days N]
// App deployments for release pipelines (routes/graphql/app-deployments.ts), against the configured
// store (SQLITE_PATH or DATABASE_URL) as the other commands: `check` in a pull request (nothing is
// written), `publish` when the app version ships (live on every running instance within seconds),
// `retire` when it is no longer installed, `list` to see what is used. Exit code 0 on success, 1 when
// refused (every problem on stderr, one a line), 2 on a usage error.
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { buildSchema } from 'graphql'
import { loadConfigOrExit, type Config } from '../app/config.ts'
import { openStore } from '../app/store/index.ts'
import {
  checkManifest,
  listDeployments,
  publishManifest,
  retireDeployment,
  type ListedDeployment
} from '../routes/graphql/app-deployments.ts'
import { schemaSDL } from '../routes/graphql/schema.ts'

const USAGE = `usage: npm run app -- check FILE
       npm run app -- publish --name N --version V FILE
       npm run app -- retire --name N --version V
       npm run app -- list [--json] [--stale-days N]`

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

export async function runApp (argv: string[], config: Config, out: (line: string) => void): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      version: { type: 'string' },
      json: { type: 'boolean', default: false },
      'stale-days': { type: 'string' }
    }
  })
  const [verb, file, ...extra] = positionals
  const schema = buildSchema(schemaSDL)
  if (verb === 'check' && file && extra.length === 0) {
    const checked = checkManifest(readJson(file), schema, config.limits)
    if (checked.problems.length > 0) throw new Refused(checked.problems)
    out(`${file}: ${checked.operations.length} operations check for this service`)
    return 0
  }
  const needsName = verb === 'publish' || verb === 'retire'
  if (needsName && (!values.name || !values.version)) return usage()
  if ((verb === 'publish' && (!file || extra.length > 0)) || (verb === 'retire' && file)) return usage()
  if (verb !== 'publish' && verb !== 'retire' && verb !== 'list') return usage()
  const staleDays = values['stale-days'] === undefined ? null : Number(values['stale-days'])
  if (staleDays !== null && !(Number.isInteger(staleDays) && staleDays >= 0)) return usage()

  const store = await openStore(config)
  try {
    if (verb === 'publish') {
      const published = await publishManifest(store, {
        name: values.name!,
        version: values.version!,
        manifest: readJson(file!),
        schema,
        limits: config.limits,
        maxBytes: config.deployments.maxBytes
      })
      out(published.outcome === 'published'
        ? `published ${values.name} ${values.version}: ${published.operations} operations, live on every instance within seconds`
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

  function usage (): number {
    console.error(USAGE)
    return 2
  }
}

if (import.meta.main) {
  const config = loadConfigOrExit()
  try {
    process.exitCode = await runApp(process.argv.slice(2), config, (line) => console.log(line))
  } catch (err) {
    if (err instanceof Refused) {
      for (const problem of err.problems) console.error(problem)
      process.exitCode = 1
    } else {
      console.error((err as Error).message)
      process.exitCode = err instanceof TypeError ? 2 : 1
    }
  }
}
