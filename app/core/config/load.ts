// Reading areas of the configuration from the environment: the one way the service and every command load
// settings. A caller names the areas it needs (the service all of them, `npm run token` the signing key
// only, `npm run app` the store and the limits), and gets those areas, each read and checked as the service
// reads it, or a ConfigError naming every problem of them at once. Nothing outside the named areas (and the
// ones they use) is read, so a command never needs a secret of the service it does not use.
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parseEnv } from 'node:util'
import envSchema from 'env-schema'
import { schemaEntry, type AnyArea, type AreaResult, type Profile, type Reading, type Setting } from './area.ts'
import { profile as profileArea, profileOf } from './profile.ts'
import { withoutCredentials } from './urls.ts'

/** Every problem of an unusable configuration, one line each ("Configuration: ..."), found in one pass. */
export class ConfigError extends Error {
  readonly problems: string[]
  constructor (problems: string[]) {
    super(problems.map((problem) => `Configuration: ${problem}`).join('\n'))
    this.name = 'ConfigError'
    this.problems = problems
  }
}

/**
 * The project root's `.env` (beside package.json, as the README says), never the working directory's:
 * a `.env` planted wherever the service happens to be started could carry a JWT_SECRET.
 */
const PROJECT_ENV_FILE = fileURLToPath(new URL('../../../.env', import.meta.url))

export type Environment = Record<string, string | undefined>

/**
 * The process environment, over the settings of the project root's `.env` file when there is one
 * (the format of .env.example): a variable set in the environment wins over the file.
 */
export function environment (path = PROJECT_ENV_FILE): Environment {
  return existsSync(path) ? { ...parseEnv(readFileSync(path, 'utf8')), ...process.env } : process.env
}

/** What loadSettings returns for `Areas`: the profile, and each area's result under its key. */
export type Loaded<Areas extends readonly AnyArea[]> =
  { readonly profile: Profile } & { readonly [A in Areas[number] as A['key']]: AreaResult<A> }

/** `areas` with the areas they use, each once, the profile's first: the order of the schema and its messages. */
function withUses (areas: readonly AnyArea[]): AnyArea[] {
  const all: AnyArea[] = [profileArea]
  const add = (area: AnyArea) => {
    if (all.includes(area)) return
    all.push(area)
    area.uses.forEach(add)
  }
  areas.forEach(add)
  return all
}

/** The env-schema of some areas, built once per list of areas (Ajv compiles a schema object once). */
const schemas = new Map<string, { type: 'object', properties: Record<string, object> }>()

function schemaOf (areas: readonly AnyArea[]) {
  const id = areas.map((area) => area.key).join(',')
  let schema = schemas.get(id)
  if (!schema) {
    const properties: Record<string, object> = {}
    const declared = new Map<string, unknown>()
    for (const area of areas) {
      for (const [name, setting] of Object.entries<Setting>(area.settings)) {
        // Two areas may share a declaration (the token's signing key is the service's), never redeclare it.
        if (declared.has(name) && declared.get(name) !== setting) throw new Error(`${name} is declared twice (${area.key})`)
        declared.set(name, setting)
        properties[name] = schemaEntry(setting)
      }
    }
    schemas.set(id, schema = { type: 'object', properties })
  }
  return schema
}

/** The settings env-schema refused, each with Ajv's message (its error carries Ajv's errors), or none. */
function schemaErrors (err: unknown): { setting: string, message: string }[] {
  const errors = err instanceof Error && 'errors' in err ? err.errors : undefined
  if (!Array.isArray(errors)) return []
  return errors.map((error: { instancePath?: unknown, message?: unknown }) => ({
    setting: String(error.instancePath).slice(1),
    message: String(error.message)
  }))
}

/**
 * The variables of `schema` read from `env`: validated, coerced and defaulted by env-schema. Every type
 * error is added to `problems` (Ajv's allErrors, in the schema's order), and the variables it names are
 * read as unset (so the checks after it still run), `invalid` naming them.
 */
function readEnv (
  schema: ReturnType<typeof schemaOf>, env: Environment, problems: string[]
): { values: Record<string, unknown>, invalid: Set<string> } {
  // env: false: only `data` is read (env-schema would otherwise merge process.env under it).
  const read = (data: Environment) => envSchema<Record<string, unknown>>({ schema, data, dotenv: false, env: false })
  try {
    return { values: read(env), invalid: new Set() }
  } catch (err) {
    const errors = schemaErrors(err)
    if (errors.length === 0) throw err
    for (const { setting, message } of errors) problems.push(`${setting} ${message}`)
    const invalid = new Set(errors.map(({ setting }) => setting))
    return { values: read(Object.fromEntries(Object.entries(env).filter(([name]) => !invalid.has(name)))), invalid }
  }
}

/**
 * Reads `areas` (and the areas they use) from `env`, the process environment and `.env` by default; in
 * either profile. Throws a ConfigError naming every invalid variable and every inconsistent combination of
 * them: type errors first, in the order the areas are named, then each area's own checks.
 */
export function loadSettings<const Areas extends readonly AnyArea[]> (
  areas: Areas, env: Environment = environment()
): Loaded<Areas> {
  const all = withUses(areas)
  const problems: string[] = []
  const { values, invalid } = readEnv(schemaOf(all), env, problems)
  const profile = profileOf(values.NODE_ENV)
  const results = new Map<AnyArea, unknown>()
  // Each area after the ones it uses, with their results under their keys.
  const resultOf = (area: AnyArea): unknown => {
    if (results.has(area)) return results.get(area)
    const reading: Reading & Record<string, unknown> = { profile, production: profile === 'production', problems, invalid }
    for (const used of area.uses) reading[used.key] = resultOf(used)
    const result = area.read(values, reading)
    results.set(area, result)
    return result
  }
  const loaded = Object.fromEntries(all.map((area) => [area.key, resultOf(area)]))
  if (problems.length > 0) throw new ConfigError(problems)
  return loaded as Loaded<Areas>
}

/**
 * For the service and the commands: loadSettings, or every problem on stderr (one line each, URLs without
 * credentials) and exit code 1, before anything starts.
 */
export function loadSettingsOrExit<const Areas extends readonly AnyArea[]> (areas: Areas): Loaded<Areas> {
  try {
    return loadSettings(areas)
  } catch (err) {
    console.error(withoutCredentials(err instanceof Error ? err.message : String(err)))
    process.exit(1)
  }
}
