// Changes made beside the service reach its response cache within a second, however they were made:
// a partner created with `npm run partner:create` next to a running embedded service (another process
// writing the SQLite file), and an UPDATE typed into psql under two instances on PostgreSQL and Redis.
// And a second service on one SQLite file is refused: it would keep a cache of its own that the first
// one's writes never reach.
import { test, type Test } from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { REPO, eventually, gql, newUser, requireTool, startInstances, type Instance } from '../cluster/harness.ts'
import { TEST_JWT_SECRET, TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { processEnv, spawnService, startService } from '../helpers/server-process.ts'
import { CACHE_TEST_ENV, ageOf } from './instances.ts'

/** How soon a change made elsewhere must be seen by the next read (docs/guarantees.md). */
const WINDOW_MS = 1000
const USERS = '{ users(limit: 100) { id name } }'

function tempDir (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'outside-changes-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Polls `read` until `seen` holds, for at most the window; the time it took, or fails. */
async function seenWithin (t: Test, what: string, read: () => Promise<boolean>): Promise<void> {
  const started = Date.now()
  while (!(await read())) {
    if (Date.now() - started > WINDOW_MS) {
      t.fail(`${what}: not seen within ${WINDOW_MS} ms`)
      return
    }
    await sleep(25)
  }
  t.pass(`${what}: seen after ${Date.now() - started} ms`)
}

const embeddedEnv = (dir: string) => ({
  NODE_ENV: 'development',
  HOST: '127.0.0.1',
  PORT: '0',
  SQLITE_PATH: join(dir, 'service.db'),
  JWT_SECRET: TEST_JWT_SECRET,
  PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY,
  LOG_LEVEL: 'info'
})

test('a partner created with npm run partner:create beside a running embedded service is in its next users list', async (t) => {
  const dir = tempDir(t)
  const env = embeddedEnv(dir)
  const service = await startService(t, env)
  const post = async () => {
    const response = await fetch(`${service.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: USERS })
    })
    return { age: response.headers.get('age'), names: ((await response.json()).data.users as { name: string }[]).map((u) => u.name) }
  }
  await post()
  const cached = await post()
  t.not(cached.age, null, 'the list is answered from the response cache')
  t.notOk(cached.names.includes('Acme Partner'))

  const created = spawnSync(
    'npm',
    ['run', '-s', 'partner:create', '--', '--login', 'acme', '--password', 'acme-partner-s3cret', '--name', 'Acme Partner'],
    { cwd: REPO, env: processEnv(env), encoding: 'utf8' }
  )
  t.equal(created.status, 0, `partner:create: ${created.stdout}${created.stderr}`)
  await seenWithin(t, 'the new partner in the users list', async () => (await post()).names.includes('Acme Partner'))
})

test('a second service on the same SQLite file is refused at start, with what to do', async (t) => {
  const dir = tempDir(t)
  const env = embeddedEnv(dir)
  await startService(t, env)
  const second = spawnService(t, env)
  t.equal(await Promise.race([second.exited, sleep(20_000).then(() => 'still running')]), 1, 'the second one exits')
  t.match(second.stderr(), /^Could not start: another service instance is running on SQLITE_PATH=\S+service\.db .*DATABASE_URL and REDIS_URL/m)
  t.notMatch(second.stderr(), /\n\s+at /, 'one line, no stack trace')
  const elsewhere = await startService(t, { ...env, SQLITE_PATH: join(dir, 'other.db') })
  t.ok(elsewhere.url, 'another file is fine')
})

test('an UPDATE made with psql is seen by the next read on both instances (PostgreSQL + Redis)', async (t) => {
  const psql = requireTool('psql', 'apt-get install postgresql-client')
  const { instances, db } = await startInstances(t, { env: CACHE_TEST_ENV })
  const [a, b] = instances as [Instance, Instance]
  const id = await newUser(a.url, 'psql')
  const nameOn = async (instance: Instance) => {
    const response = await gql(instance.url, 'query Name($id: ID!) { user(id: $id) { name } }', { id })
    return { name: response.body.data.user.name as string, age: ageOf(response) }
  }
  await nameOn(a)
  t.not((await nameOn(a)).age, undefined, 'cached on a')
  t.not((await nameOn(b)).age, undefined, 'a hit on b too (one shared cache)')

  const updated = spawnSync(psql, [db.url, '-v', 'ON_ERROR_STOP=1', '-c',
    `SET search_path TO ${db.schema}; UPDATE users SET name = 'Changed In psql' WHERE id = '${id}'`], { encoding: 'utf8' })
  t.equal(updated.status, 0, `psql: ${updated.stdout}${updated.stderr}`)
  await Promise.all([a, b].map((instance) =>
    seenWithin(t, `the new name on ${instance.name}`, async () => (await nameOn(instance)).name === 'Changed In psql')))

  // A read right after is cached again, and the next change is seen again (the feed keeps listening).
  await eventually('the new name cached', async () => (await nameOn(a)).age !== undefined)
  spawnSync(psql, [db.url, '-c', `SET search_path TO ${db.schema}; DELETE FROM users WHERE id = '${id}'`])
  await seenWithin(t, 'the deletion on b', async () => {
    const response = await gql(b.url, 'query Name($id: ID!) { user(id: $id) { name } }', { id })
    return response.body.data.user === null
  })
})
