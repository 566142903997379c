// Who may publish and retire app deployments. The release job (`npm run app`, run as a process in the
// production profile) needs the store's location and the limits it checks manifests against, and no
// secret of the service (JWT_SECRET, PARTNER_SECRET_KEY), on the embedded file and on PostgreSQL. Over
// HTTP, an ADMIN token speaks only while the store still says its user is an administrator: a demoted
// administrator's token is refused with FORBIDDEN, a deleted one's with UNAUTHENTICATED, before it
// expires, and nothing changes. (Manifests' refusals and bounds: app-deployments.test.ts.)
import { test, type Test } from 'tap'
import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { gql, listenTestApp } from '../helpers/app.ts'
import { freshSchema, TEST_DATABASE_URL } from '../helpers/postgres.ts'
import { REPO } from '../helpers/server-process.ts'

const apollo = (operations: { id: string; body: string }[]) =>
  ({ format: 'apollo-persisted-query-manifest', version: 1, operations })
const entry = (body: string) => ({ id: sha256Hex(body), body })
const USERS = 'query Users { users { id } }'
/** Depth 3: refused when MAX_DEPTH is 2. */
const AUTHORS = 'query Authors { messages(roomId: "general") { author { id } } }'

/**
 * `npm run app -- <args>` as the release job runs it: its own process, NODE_ENV=production, and an
 * environment of PATH, HOME and `env` only (no JWT_SECRET, no PARTNER_SECRET_KEY).
 */
function releaseJob (args: string[], env: Record<string, string>) {
  const result = spawnSync(process.execPath, ['cli/app-deployments.ts', ...args], {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', NODE_ENV: 'production', ...env },
    encoding: 'utf8',
    timeout: 30_000
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

/** publish, list and retire through the command against the store `env` names, with no secret set. */
async function publishListRetire (t: Test, env: Record<string, string>) {
  const manifest = join(t.testdir(), 'manifest.json')
  writeFileSync(manifest, JSON.stringify(apollo([entry(USERS)])))

  const published = releaseJob(['publish', '--name', 'web', '--version', '1.0.0', manifest], env)
  t.equal(published.status, 0, `publish exits 0: ${published.stderr}`)
  t.equal(published.stdout, 'published web 1.0.0: 1 operations, checked against this checkout\'s schema and limits ' +
    '(no running instance has said what it runs); live on every instance within seconds\n')
  t.equal(published.stderr, '', 'nothing on standard error (no setting is missing)')

  const listed = releaseJob(['list'], env)
  t.equal(listed.status, 0, listed.stderr)
  t.equal(listed.stdout, 'web  1.0.0  active  1 operations  0 requests  never used\n')

  const retired = releaseJob(['retire', '--name', 'web', '--version', '1.0.0'], env)
  t.equal(retired.status, 0, retired.stderr)
  t.match(retired.stdout, /^retired web 1\.0\.0: /)
  const json = releaseJob(['list', '--json'], env)
  t.equal(json.status, 0, json.stderr)
  t.match(JSON.parse(json.stdout), [{ name: 'web', version: '1.0.0', state: 'retired', operations: 1 }])
}

test('npm run app in production needs no secret of the service: the embedded file', async (t) => {
  const env = { SQLITE_PATH: join(t.testdir(), 'service.db') }
  await publishListRetire(t, env)

  // The limits it checks against are the service's settings, read and validated as the service reads them.
  const deep = join(t.testdir(), 'deep.json')
  writeFileSync(deep, JSON.stringify(apollo([entry(AUTHORS)])))
  t.equal(releaseJob(['check', deep], env).status, 0, 'depth 3 passes the default MAX_DEPTH')
  const refused = releaseJob(['check', deep], { ...env, MAX_DEPTH: '2' })
  t.equal(refused.status, 1)
  t.match(refused.stderr, /^query Authors \(sha256:[0-9a-f]{12}…\): .*depth/)
  const invalid = releaseJob(['list'], { ...env, DEPLOYMENTS_MAX_BYTES: 'lots' })
  t.equal(invalid.status, 1, 'an invalid setting it reads is refused')
  t.equal(invalid.stderr, 'Configuration: DEPLOYMENTS_MAX_BYTES must be integer\n')
})

test('npm run app in production needs no secret of the service: PostgreSQL', async (t) => {
  const schema = await freshSchema(t, 'app_job')
  await publishListRetire(t, { DATABASE_URL: TEST_DATABASE_URL, DATABASE_SCHEMA: schema })
})

test('over HTTP, an ADMIN token of a user the store has demoted or deleted is refused, and nothing changes', async (t) => {
  const { url, token } = await listenTestApp(t)
  const root = token('1', 'ADMIN')
  /** A new user made an administrator by the demo data's administrator (user 1); returns its id. */
  const administrator = async (name: string) => {
    const created = await gql(url, 'mutation ($input: CreateUserInput!) { createUser(input: $input) { id } }',
      { input: { name, email: `${name}@example.com` } }, { authorization: `Bearer ${root}` })
    const id = created.body.data.createUser.id as string
    await setRole(id, 'ADMIN')
    return id
  }
  const setRole = async (id: string, role: string) => {
    const mutation = 'mutation ($id: ID!, $role: Role) { updateUser(id: $id, input: { role: $role }) { id } }'
    const updated = await gql(url, mutation, { id, role }, { authorization: `Bearer ${root}` })
    t.same([updated.body.data, updated.body.errors], [{ updateUser: { id } }, undefined], `user ${id} is now ${role}`)
  }
  const admin = (bearer: string, method: string, path: string, body?: unknown) =>
    fetch(`${url}/admin/app-deployments${path}`, {
      method,
      headers: { authorization: `Bearer ${bearer}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
  const refusal = async (response: Response) =>
    ({ status: response.status, code: (await response.json()).errors?.[0]?.extensions?.code })
  const listed = async () =>
    ((await (await admin(root, 'GET', '')).json()).deployments as { name: string, version: string, state: string }[])
      .map((d) => `${d.name} ${d.version} ${d.state}`)

  const demotedId = await administrator('demoted')
  const demoted = token(demotedId, 'ADMIN')
  t.equal((await admin(demoted, 'PUT', '/web/1', apollo([entry(USERS)]))).status, 201, 'an administrator publishes')

  await setRole(demotedId, 'USER')
  const forbidden = { status: 403, code: 'FORBIDDEN' }
  t.same(await refusal(await admin(demoted, 'PUT', '/web/2', apollo([entry(AUTHORS)]))), forbidden,
    'the same token no longer publishes')
  t.same(await refusal(await admin(demoted, 'POST', '/web/1/retire')), forbidden, 'nor retires')
  t.same(await refusal(await admin(demoted, 'POST', '/check', apollo([entry(USERS)]))), forbidden, 'nor checks')
  t.same(await refusal(await admin(demoted, 'GET', '')), forbidden, 'nor lists')
  t.same(await listed(), ['web 1 active'], 'nothing changed (listed with another administrator\'s token)')

  const deletedId = await administrator('deleted')
  const deleted = token(deletedId, 'ADMIN')
  t.equal((await admin(deleted, 'GET', '')).status, 200, 'an administrator lists')
  const gone = await gql(url, 'mutation ($id: ID!) { deleteUser(id: $id) }', { id: deletedId }, { authorization: `Bearer ${root}` })
  t.equal(gone.body.data?.deleteUser, true)
  const unauthenticated = { status: 401, code: 'UNAUTHENTICATED' }
  t.same(await refusal(await admin(deleted, 'PUT', '/web/2', apollo([entry(AUTHORS)]))), unauthenticated,
    'a deleted user\'s token no longer publishes')
  t.same(await refusal(await admin(deleted, 'POST', '/web/1/retire')), unauthenticated, 'nor retires')
  t.same(await listed(), ['web 1 active'], 'nothing changed')

  await setRole(demotedId, 'ADMIN')
  t.equal((await admin(demoted, 'POST', '/web/1/retire')).status, 200, 'promoted again, the same token retires')
  t.same(await listed(), ['web 1 retired'])
})
