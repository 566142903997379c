// The operators' commands for partner accounts and the schema, against real stores: `npm run partner --
// list|remove` beside `partner:create`, and `npm run migrate` with its dry run (SQLite file and PostgreSQL).
import { test } from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { MIGRATIONS as POSTGRES_MIGRATIONS } from '../../app/core/store/postgres.ts'
import { MIGRATIONS as SQLITE_MIGRATIONS } from '../../app/core/store/sqlite.ts'
import { REMOVAL_SEEN_WITHIN_SEC } from '../../cli/partner.ts'
import { CREDENTIAL_CACHE_MS } from '../../app/soap/ws-security.ts'
import { TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { freshSchema, TEST_DATABASE_URL } from '../helpers/postgres.ts'
import { REPO } from '../helpers/server-process.ts'

function command (file: string, args: string[], env: Record<string, string>) {
  const result = spawnSync(process.execPath, [file, ...args], {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', PARTNER_SECRET_KEY: TEST_PARTNER_SECRET_KEY, ...env },
    encoding: 'utf8',
    timeout: 30_000
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

function scratch (t: { teardown (fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'operators-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

test('npm run partner -- list | remove: the accounts partner:create made, and ending one', async (t) => {
  const env = { SQLITE_PATH: join(scratch(t), 'store.db') }
  t.equal(command('cli/partner.ts', ['list'], env).stdout.trim(), 'no partner accounts')
  t.equal(command('cli/create-partner.ts', ['--login', 'acme', '--password', 'a-long-partner-password'], env).status, 0)
  t.equal(command('cli/create-partner.ts', ['--login', 'textonly', '--password', 'another-password', '--text-only'], env).status, 0)

  const listed = command('cli/partner.ts', ['list'], env)
  t.equal(listed.status, 0, listed.stderr)
  const lines = listed.stdout.trim().split('\n')
  t.equal(lines.length, 2, 'one line a partner')
  t.match(lines[0], /^acme {2}user \S+ "acme" \(SERVICE\) {2}PasswordText, PasswordDigest {2}no certificate$/)
  t.match(lines[1], /^textonly {2}user \S+ "textonly" \(SERVICE\) {2}PasswordText {2}no certificate$/)
  const json = JSON.parse(command('cli/partner.ts', ['list', '--json'], env).stdout) as { login: string }[]
  t.same(json.map((p) => p.login), ['acme', 'textonly'], '--json lists the same accounts')

  const removed = command('cli/partner.ts', ['remove', '--login', 'acme'], env)
  t.equal(removed.status, 0, removed.stderr)
  t.match(removed.stdout, /^removed partner "acme": running instances refuse it within 30 s; its user stays/)
  t.equal(REMOVAL_SEEN_WITHIN_SEC * 1000, CREDENTIAL_CACHE_MS, 'the time it says is the SOAP room\'s credentials cache')
  t.match(command('cli/partner.ts', ['list'], env).stdout, /^textonly /, 'gone from the list')
  t.notMatch(command('cli/partner.ts', ['list'], env).stdout, /acme/)

  const again = command('cli/partner.ts', ['remove', '--login', 'acme'], env)
  t.equal(again.status, 1, 'a login nobody has is refused')
  t.equal(again.stderr.trim(), 'no partner account has the login "acme" (npm run partner -- list)')
  const noLogin = command('cli/partner.ts', ['remove'], env)
  t.equal(noLogin.status, 2)
  t.equal(noLogin.stderr.split('\n')[0], 'remove needs --login')
})

test('npm run migrate on an embedded file: the dry run changes nothing, then it applies every migration once', async (t) => {
  const file = join(scratch(t), 'store.db')
  const env = { SQLITE_PATH: file }
  const dry = command('cli/migrate.ts', ['--dry-run'], env)
  t.equal(dry.status, 0, dry.stderr)
  t.equal(dry.stdout.split('\n')[0], `SQLite ${file} does not exist yet; would apply ${SQLITE_MIGRATIONS.length} migration(s) (dry run, nothing changed):`)
  t.match(dry.stdout, /^ {2}1: CREATE TABLE users \($/m, 'each migration in one line')
  t.notOk(existsSync(file), 'no file was made')

  const applied = command('cli/migrate.ts', [], env)
  t.equal(applied.status, 0, applied.stderr)
  t.match(applied.stdout, new RegExp(`applied ${SQLITE_MIGRATIONS.length} migration\\(s\\), now at version ${SQLITE_MIGRATIONS.length}:`))
  t.equal(command('cli/migrate.ts', ['--dry-run'], env).stdout.trim(),
    `SQLite ${file} is at version ${SQLITE_MIGRATIONS.length} of ${SQLITE_MIGRATIONS.length}: nothing to apply`)
})

test('npm run migrate on PostgreSQL: the dry run reads the version only, the run migrates the schema', async (t) => {
  const schema = await freshSchema(t, 'migrate')
  const env = { DATABASE_URL: TEST_DATABASE_URL, DATABASE_SCHEMA: schema }
  const last = POSTGRES_MIGRATIONS.length
  const dry = command('cli/migrate.ts', ['--dry-run'], env)
  t.equal(dry.status, 0, dry.stderr)
  t.match(dry.stdout, new RegExp(`^PostgreSQL postgres://\\S+ \\(schema ${schema}\\) is at version 0 of ${last}; would apply ${last} migration\\(s\\) \\(dry run, nothing changed\\):`))
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL })
  await client.connect()
  t.teardown(() => client.end())
  const exists = async () => (await client.query('SELECT to_regclass($1) AS t', [`${schema}.users`])).rows[0].t !== null
  t.notOk(await exists(), 'the dry run created nothing')

  const applied = command('cli/migrate.ts', [], env)
  t.equal(applied.status, 0, applied.stderr)
  t.match(applied.stdout, new RegExp(`applied ${last} migration\\(s\\), now at version ${last}:`))
  t.ok(await exists(), 'the tables are there')
  t.match(command('cli/migrate.ts', ['--dry-run'], env).stdout, new RegExp(`is at version ${last} of ${last}: nothing to apply`))

  const unreachable = command('cli/migrate.ts', [], { DATABASE_URL: 'postgres://gqs:secret@127.0.0.1:1/gqs' })
  t.equal(unreachable.status, 1)
  t.equal(unreachable.stderr.trim(), 'migrate: connect ECONNREFUSED 127.0.0.1:1', 'one line, no password')
})
