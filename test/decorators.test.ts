// The app's shared state is a short list of Fastify decorators, each typed where it is set: a newcomer
// finds what `app.x` is in the one file that makes it. Read from the source, as Fastify has no list of them.
import { test } from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { REPO } from './helpers/server-process.ts'

/** Every .ts file under `dir` (relative to the repository), recursively. */
function sources (dir: string): string[] {
  return readdirSync(join(REPO, dir), { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sources(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : [])
}

test('at most 12 app decorators, each declared on FastifyInstance in the file that sets it', async (t) => {
  const setBy = new Map<string, string>()
  for (const file of ['app', 'plugins', 'routes'].flatMap(sources)) {
    const source = readFileSync(join(REPO, file), 'utf8')
    const declared = /declare module 'fastify' \{[\s\S]*?\n\}/.exec(source)?.[0] ?? ''
    const instance = /interface FastifyInstance \{([\s\S]*?)\n {2}\}/.exec(declared)?.[1] ?? ''
    for (const [, name] of source.matchAll(/\.decorate\('(\w+)'/g)) {
      t.ok(new RegExp(`^\\s+${name}\\b`, 'm').test(instance), `${file} declares app.${name} on FastifyInstance`)
      t.equal(setBy.get(name) ?? file, file, `app.${name} is set in one file`)
      setBy.set(name, file)
    }
  }
  t.ok(setBy.size >= 8, `the decorators were found (${[...setBy.keys()].join(', ')})`)
  t.ok(setBy.size <= 12, `at most 12 decorators, found ${setBy.size}: ${[...setBy.keys()].join(', ')}`)
})
