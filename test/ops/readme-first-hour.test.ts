// The README's first hour, as a new user follows it: the development server on a new embedded store,
// then the README's examples in the order they are written (a query, a query with a token, a persisted
// GET), run by bash as written. Only the port and the store's path differ: the development server the
// README starts is on 3000, and the test must neither collide with one nor write into the repository.
import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { REPO, runScript, startService } from '../helpers/server-process.ts'

/** The ```sh blocks from "The development server" up to the response cache: the first examples. */
function firstExamples (): string[] {
  const readme = readFileSync(`${REPO}/README.md`, 'utf8')
  const start = readme.indexOf('## The development server')
  const end = readme.indexOf('**The response cache.**')
  if (start < 0 || end < start) throw new Error('README: no "The development server" section followed by "The response cache"')
  return [...readme.slice(start, end).matchAll(/```sh\n([^]*?)```/g)].map((m) => m[1]!)
}

/** Runs one block with bash; its stdout (the test fails on a non-zero exit). */
/** A README block run by bash, its calls to port 3000 sent to `port`. */
const run = (block: string, port: string) => runScript(block.replaceAll(':3000', `:${port}`))

test('the README\'s first examples work in order on a first development start, with no restart', async (t) => {
  const dir = t.testdir()
  const service = await startService(t, { PORT: '0', SQLITE_PATH: `${dir}/service.db` })
  const port = new URL(service.url).port
  const [query, withToken, persistedGet, ...rest] = firstExamples()
  t.equal(rest.length, 0, 'three examples before the response cache')
  t.notMatch(persistedGet!, /npm start|PERSISTED_MANIFEST/, 'the persisted GET needs no restart with other settings')

  const users = await run(query!, port)
  t.equal(users.code, 0, users.stderr)
  t.same(JSON.parse(users.stdout).data.users.map((u: { name: string }) => u.name).slice(0, 2), ['Admin', 'Ada Lovelace'])

  const ada = await run(withToken!, port)
  t.equal(ada.code, 0, ada.stderr)
  t.same(JSON.parse(ada.stdout).data.user, { name: 'Ada Lovelace', email: 'ada@example.com' })

  const persisted = await run(persistedGet!, port)
  t.equal(persisted.code, 0, persisted.stderr)
  const answer = JSON.parse(persisted.stdout)
  t.notOk(answer.errors, 'the example operation is served from the first start')
  t.match(answer.data.user, { id: '2', name: 'Ada Lovelace' })
})
