// The import rule of docs/architecture.md, read from the source: the core imports nothing above it, the
// engines only the core, only the adapters and the composition root speak Fastify, the commands never
// reach into an adapter, and no module imports one that imports it back.
import { test } from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, posix } from 'node:path'
import { REPO } from './helpers/server-process.ts'

type Layer = 'core' | 'graphql engine' | 'soap engine' | 'plugins' | 'routes' | 'root' | 'cli'

/** The layer a repository path belongs to (null: outside the service, e.g. a package). */
function layerOf (file: string): Layer | null {
  if (file === 'app/app.ts' || file === 'app/server.ts') return 'root'
  if (file.startsWith('app/core/')) return 'core'
  if (file.startsWith('app/graphql/')) return 'graphql engine'
  if (file.startsWith('app/soap/')) return 'soap engine'
  if (file.startsWith('plugins/')) return 'plugins'
  if (file.startsWith('routes/')) return 'routes'
  if (file.startsWith('cli/')) return 'cli'
  return null
}

/** What each layer may import, besides itself (no service code imports cli/: tests do). */
const MAY_IMPORT: Record<Layer, Layer[]> = {
  core: [],
  'graphql engine': ['core'],
  'soap engine': ['core'],
  plugins: ['core', 'graphql engine', 'soap engine'],
  routes: ['core', 'graphql engine', 'soap engine', 'plugins'],
  root: ['core', 'graphql engine', 'soap engine', 'plugins', 'routes'],
  cli: ['core', 'graphql engine', 'soap engine'],
}

/** Packages that are Fastify or plug into it: only the adapters and the root import them. */
const FASTIFY_PACKAGE = /^(fastify|fastify-plugin|@fastify\/[\w-]+|mercurius(-[\w-]+)?)$/
const SPEAKS_FASTIFY: Layer[] = ['plugins', 'routes', 'root']

function sources (dir: string): string[] {
  return readdirSync(join(REPO, dir), { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sources(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : [])
}

/** Every specifier a file imports (static, re-exported, type-only or dynamic). */
function specifiers (source: string): string[] {
  const found: string[] = []
  for (const match of source.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?\bfrom\s+'([^']+)'|\bimport\s*\(\s*'([^']+)'\s*\)|(?:^|\n)import\s+'([^']+)'/g)) {
    found.push(match[1] ?? match[2] ?? match[3])
  }
  return found
}

const files = ['app', 'plugins', 'routes', 'cli'].flatMap(sources)
const imports = new Map<string, { local: string[], packages: string[] }>()
for (const file of files) {
  const local: string[] = []
  const packages: string[] = []
  for (const specifier of specifiers(readFileSync(join(REPO, file), 'utf8'))) {
    if (specifier.startsWith('.')) local.push(posix.normalize(posix.join(dirname(file), specifier)))
    else if (!specifier.startsWith('node:')) packages.push(specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0])
  }
  imports.set(file, { local, packages })
}

test('the sources were read (the rule below is not vacuous)', async (t) => {
  const counts = new Map<Layer, number>()
  for (const file of files) counts.set(layerOf(file)!, (counts.get(layerOf(file)!) ?? 0) + 1)
  for (const layer of Object.keys(MAY_IMPORT) as Layer[]) t.ok((counts.get(layer) ?? 0) > 0, `${layer}: ${counts.get(layer)} files`)
  t.ok([...imports.values()].reduce((sum, { local }) => sum + local.length, 0) > 300, 'hundreds of local imports read')
})

test('each layer imports only the layers below it', async (t) => {
  const wrong: string[] = []
  for (const [file, { local }] of imports) {
    const from = layerOf(file)!
    for (const target of local) {
      const to = layerOf(target)
      if (to === null) continue // package.json and the like
      if (to !== from && !MAY_IMPORT[from].includes(to)) wrong.push(`${file} (${from}) imports ${target} (${to})`)
    }
  }
  t.same(wrong, [], 'no import points up or sideways')
})

test('only the adapters and the composition root import Fastify, its plugins and Mercurius', async (t) => {
  const wrong: string[] = []
  let seen = 0
  for (const [file, { packages }] of imports) {
    for (const name of packages.filter((name) => FASTIFY_PACKAGE.test(name))) {
      seen++
      if (!SPEAKS_FASTIFY.includes(layerOf(file)!)) wrong.push(`${file} imports ${name}`)
    }
  }
  t.ok(seen > 10, `Fastify imports found (${seen})`)
  t.same(wrong, [], 'the core, the engines and the commands are Fastify-free')
})

test('no module imports one that imports it back', async (t) => {
  const state = new Map<string, 'open' | 'done'>()
  const cycles: string[] = []
  const visit = (file: string, path: string[]): void => {
    if (state.get(file) === 'done') return
    if (state.get(file) === 'open') { cycles.push([...path.slice(path.indexOf(file)), file].join(' → ')); return }
    state.set(file, 'open')
    for (const target of imports.get(file)?.local ?? []) if (imports.has(target)) visit(target, [...path, file])
    state.set(file, 'done')
  }
  for (const file of files) visit(file, [])
  t.same(cycles, [], 'no import cycle')
})
