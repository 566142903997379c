// `npm run persisted:build -- <folder> [--out persisted/manifest.json]`: registers the operations a
// client ships. Every *.graphql / *.gql file under the folder holds one operation (plus the fragments
// it uses); each is parsed, validated against app/graphql/schema.graphql with the service's
// validation rules, printed in canonical form and written with its sha256 into a manifest in
// Apollo's persisted-query manifest format (which the service also loads as Apollo's tooling writes
// it). Clients send `queryId: "sha256:<id>"`. A file with several operations (graphql-jit compiles
// by text, so one text must mean one operation), an invalid one or a duplicate name fails the build.
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { buildSchema, print } from 'graphql'
import { readCommandLine, refuseCommandLine } from '../app/core/command-line.ts'
import { loadSettings } from '../app/core/config/index.ts'
import { OPERATION_LIMIT_AREAS, operationLimits } from '../app/graphql/operation-limits.ts'
import { makePlan, type DocumentPlan } from '../app/graphql/plan.ts'
import { sha256Hex } from '../app/graphql/persisted.ts'
import type { ApolloManifest } from '../app/graphql/persisted-manifest.ts'

export const SCHEMA_FILE = new URL('../app/graphql/schema.graphql', import.meta.url)

export function buildManifest (folder: string, schemaSDL = readFileSync(SCHEMA_FILE, 'utf8')): ApolloManifest {
  const schema = buildSchema(schemaSDL)
  // The limits the service validates with (MAX_DEPTH etc. from the environment), so a document the
  // service would refuse at start is refused here first; no secret of the service is needed.
  const limits = operationLimits(loadSettings(OPERATION_LIMIT_AREAS))

  const files = (readdirSync(folder, { recursive: true }) as string[])
    .filter((f) => /\.(graphql|gql)$/.test(f))
    .sort()
  if (files.length === 0) throw new Error(`No .graphql files under ${folder}`)

  const problems: string[] = []
  const operations: ApolloManifest['operations'] = []
  const fileByName = new Map<string, string>()
  for (const file of files) {
    const where = relative(process.cwd(), join(folder, file))
    // The service's own plan: parse, validation and its limits, so what it refuses fails the build here.
    let plan: DocumentPlan
    try {
      plan = makePlan(schema, readFileSync(join(folder, file), 'utf8'), limits)
    } catch (err) {
      const nested = (err as { errors?: readonly Error[] }).errors
      problems.push(...(nested ?? [err as Error]).map((e) => `${where}: ${e.message}`))
      continue
    }
    if (plan.operations.length !== 1) {
      problems.push(
        `${where}: ${plan.operations.length === 0 ? 'it contains no operation' : `it contains ${plan.operations.length} operations; register one operation per document`}`
      )
      continue
    }
    const single = plan.operations[0]!
    if (!single.name) { problems.push(`${where}: the operation needs a name (clients and logs refer to it)`); continue }
    const seen = fileByName.get(single.name)
    if (seen) { problems.push(`${where}: operation name ${single.name} is already used by ${seen}`); continue }
    fileByName.set(single.name, where)
    const body = print(single.document)
    operations.push({ id: sha256Hex(body), name: single.name, type: single.type, body })
  }
  if (problems.length > 0) throw new Error(`Persisted queries not built:\n  ${problems.join('\n  ')}`)
  operations.sort((a, b) => a.name!.localeCompare(b.name!))
  return { format: 'apollo-persisted-query-manifest', version: 1, operations }
}

const USAGE = `usage: npm run persisted:build -- <folder of .graphql operation files> [--out persisted/manifest.json]
Registers the operations a client ships: every *.graphql / *.gql file under the folder holds one named
operation; each is validated against the schema with the service's limits and written with its sha256 into
an Apollo persisted-query manifest (default persisted/manifest.json). Then publish it to the running service
as an app deployment: npm run app -- publish --name <app> --version <version> <manifest>.`

function main (args: string[]): void {
  const { values, positionals } = readCommandLine(USAGE, {
    allowPositionals: true,
    options: { out: { type: 'string', default: 'persisted/manifest.json' } }
  }, args)
  const out = values.out
  const [folder, ...extra] = positionals
  if (!folder) refuseCommandLine(USAGE, 'the folder of operation files is missing')
  if (extra.length > 0) refuseCommandLine(USAGE, `one folder only: ${extra.join(' ')} is one too many`)
  if (!existsSync(folder) || !statSync(folder).isDirectory()) refuseCommandLine(USAGE, `${folder} is not a folder`)
  try {
    const manifest = buildManifest(resolve(folder))
    mkdirSync(dirname(resolve(out)), { recursive: true })
    writeFileSync(out, `${JSON.stringify(manifest, null, 2)}\n`)
    console.log(`Wrote ${manifest.operations.length} operations to ${out}:`)
    for (const op of manifest.operations) console.log(`  ${op.type} ${op.name}  queryId sha256:${op.id}`)
    console.log(`Publish them as an app deployment: npm run app -- publish --name <app> --version <version> ${out}`)
  } catch (err) {
    console.error((err as Error).message)
    process.exit(1)
  }
}

if (import.meta.main) main(process.argv.slice(2))
