// App deployments at scale and under faults, on two instances sharing PostgreSQL and Redis: a release
// job's own settings do not decide what is published (the running instances' profile does); publishes at
// once on both instances never pass the weight bound together, and no instance serves part of a
// deployment; a retirement hidden behind failing reloads is honoured once they are retried, and past the
// stale window the operations are refused (and /health/ready fails) rather than served retired; usage
// counts admitted requests once; a SIGKILL loses at most the last flush interval of counts; an instance
// with a small heap serves what fits and stays up. (One instance, embedded: test/persisted/deployment-faults.test.ts.)
import { test } from 'tap'
import { writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { buildSchema } from 'graphql'
import { loadSettings } from '../../app/core/config/index.ts'
import { OPERATION_LIMIT_AREAS, operationLimits } from '../../app/graphql/operation-limits.ts'
import { checkManifest } from '../../app/graphql/app-deployments.ts'
import { sha256Hex } from '../../app/graphql/persisted.ts'
import { schemaSDL } from '../../app/graphql/schema.ts'
import { APP_COMMAND_AREAS, runApp } from '../../cli/app-deployments.ts'
import { PG_URL, eventually, request, startInstance, startInstances, token, type Instance } from './harness.ts'

const manifestOf = (...texts: string[]) => ({
  format: 'apollo-persisted-query-manifest',
  version: 1,
  operations: texts.map((body) => ({ id: sha256Hex(body), body }))
})
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const codeOf = (body: any): string | undefined => body?.errors?.[0]?.extensions?.code

async function persisted (instance: Instance, text: string, headers: Record<string, string> = {}) {
  const response = await request(`${instance.url}/graphql?queryId=sha256:${sha256Hex(text)}`, {
    headers: { authorization: `Bearer ${token('2')}`, ...headers }
  })
  return { status: response.status, body: response.json() }
}

test('app deployments under faults on two instances', async (t) => {
  // Room for about one small deployment of two operations on top of what is active: set below from their weight.
  const PAIR = (tag: string) => [
    `query ${tag}A { users(limit: 2) { id name email } }`,
    `query ${tag}B { user(id: "1") { id name } }`
  ]
  const limits = operationLimits(loadSettings(OPERATION_LIMIT_AREAS, {}))
  const schema = buildSchema(schemaSDL)
  const weightOf = async (texts: string[]) =>
    (await checkManifest(manifestOf(...texts), schema, limits)).operations.reduce((sum, op) => sum + op.weight, 0)
  const pairWeight = await weightOf(PAIR('R0'))
  const bound = Math.ceil(pairWeight * 1.5)
  const { db, instances } = await startInstances(t, {
    env: { PERSISTED_ONLY: 'true', DEPLOYMENT_USAGE_FLUSH_MS: '200', DEPLOYMENTS_MAX_BYTES: String(bound), RATE_LIMIT_REQUESTS: '1000000' }
  })
  const [a, b] = instances as [Instance, Instance]
  const dir = tmpdir()
  const file = (label: string, json: unknown) => {
    const path = join(dir, `deployment-faults-${db.schema}-${label}.json`)
    writeFileSync(path, JSON.stringify(json))
    return path
  }
  /** `npm run app -- ...` with the release job's own environment. */
  const app = async (env: Record<string, string>, ...argv: string[]) => {
    const out: string[] = []
    const config = loadSettings(APP_COMMAND_AREAS, { DATABASE_URL: db.url, DATABASE_SCHEMA: db.schema, ...env })
    try {
      return { code: await runApp(argv, config, (line) => out.push(line)), out, problems: [] as string[] }
    } catch (err) {
      return { code: 1, out, problems: (err as { problems?: string[] }).problems ?? [(err as Error).message] }
    }
  }
  const admin = token('1', 'ADMIN')
  const adminRequest = (instance: Instance, method: string, path: string, body?: unknown) =>
    request(`${instance.url}/admin/app-deployments${path}`, {
      method,
      headers: { authorization: `Bearer ${admin}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
  const retireAll = async () => {
    await db.query("UPDATE app_deployments SET state = 'retired', retired_at = now() WHERE state = 'active'")
  }

  await t.test('a release job with other limits (or another checkout) is held to what the instances run', async (t) => {
    const aliases = Array.from({ length: 20 }, (_, i) => `a${i}: user(id: "1") { id }`).join(' ')
    const refused = await app({ MAX_ALIASES: '50', DEPLOYMENTS_MAX_BYTES: String(1e9) }, 'publish', '--name', 'ios', '--version', '1',
      file('aliases', manifestOf(`query Many { ${aliases} }`)))
    t.equal(refused.code, 1, 'refused, exit 1')
    t.match(refused.problems, [/^refused by the 2 running instance\(s\) of profile [0-9a-f]{12}: query Many .*alias/i])
    const heavy = await app({ DEPLOYMENTS_MAX_BYTES: String(1e9) }, 'publish', '--name', 'ios', '--version', '2',
      file('heavy', manifestOf(...PAIR('H1'), ...PAIR('H2'))))
    t.match(heavy.problems, [/over DEPLOYMENTS_MAX_BYTES \(\d+\)/], 'the instances\' bound, not the job\'s')
    t.equal((await db.query('SELECT count(*)::int AS n FROM app_deployments')).rows[0].n, 0, 'nothing published')
  })

  await t.test('100 rounds of publishes at once on both instances: one passes the bound, no deployment is served in part', async (t) => {
    let partial = 0
    let bothPassed = 0
    for (let round = 1; round <= 100; round++) {
      const [onA, onB] = [PAIR(`R${round}a`), PAIR(`R${round}b`)]
      const answers = await Promise.all([
        adminRequest(a, 'PUT', `/race/${round}a`, manifestOf(...onA)),
        adminRequest(b, 'PUT', `/race/${round}b`, manifestOf(...onB))
      ])
      const passed = answers.filter((answer) => answer.status === 201).length
      if (passed !== 1) {
        bothPassed++
        t.fail(`round ${round}: ${answers.map((answer) => `${answer.status} ${answer.text.slice(0, 120)}`).join(' | ')}`)
      }
      const winner = answers[0]!.status === 201 ? onA : onB
      for (const instance of [a, b]) {
        const served = await eventually(`${instance.name} serves round ${round}'s winner`, async () => {
          const answered = await Promise.all(winner.map((text) => persisted(instance, text)))
          return answered.every((answer) => answer.body.data) ? answered : null
        }, 5_000, 20)
        if (served.length !== 2) partial++
        for (const text of [...onA, ...onB].filter((text) => !winner.includes(text))) {
          if (codeOf((await persisted(instance, text)).body) !== 'PERSISTED_QUERY_NOT_FOUND') partial++
        }
      }
      await retireAll()
    }
    t.equal(bothPassed, 0, 'every round, exactly one of the two publishes passed the bound')
    t.equal(partial, 0, 'no instance served a deployment in part, nor the one refused')
  })

  await t.test('a retirement behind failing reloads: served within the window, refused past it, honoured once a retry succeeds', async (t) => {
    const [kept] = PAIR('Kept')
    t.equal((await adminRequest(a, 'PUT', '/kept/1', manifestOf(kept!))).status, 201)
    for (const instance of [a, b]) {
      await eventually(`${instance.name} serves it`, async () => (await persisted(instance, kept!)).body.data, 5_000, 50)
    }
    // Retired, and in the same transaction the table goes away: every reload the change sets off fails,
    // and putting the table back (DDL) tells nobody. Only a retry reads the retirement.
    const client = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${db.schema}` })
    await client.connect()
    t.teardown(() => client.end())
    await client.query('BEGIN')
    await client.query("UPDATE app_deployments SET state = 'retired', retired_at = now() WHERE name = 'kept'")
    await client.query('ALTER TABLE app_deployments RENAME TO app_deployments_away')
    await client.query('COMMIT')
    await sleep(1500)
    for (const instance of [a, b]) t.ok((await persisted(instance, kept!)).body.data, `${instance.name}: within the window, still served`)
    await sleep(5000)
    for (const instance of [a, b]) {
      const refused = await persisted(instance, kept!)
      t.equal(codeOf(refused.body), 'SERVICE_UNAVAILABLE', `${instance.name}: past the window, refused rather than served retired`)
      const ready = await eventually(`${instance.name} is not ready`, async () => {
        const response = await request(`${instance.url}/health/ready`)
        return response.status === 503 ? response.json() : null
      }, 3_000, 100)
      t.match(ready.checks['app deployments'], /^failing: app deployments not reloaded/)
    }
    await client.query('ALTER TABLE app_deployments_away RENAME TO app_deployments')
    for (const instance of [a, b]) {
      const answer = await eventually(`${instance.name} reads the retirement`, async () => {
        const answered = await persisted(instance, kept!)
        return codeOf(answered.body) === 'PERSISTED_QUERY_NOT_FOUND' ? answered : null
      }, 8_000, 100)
      t.match(answer.body.errors[0].message, /was retired with kept 1/)
      await eventually(`${instance.name} is ready again`, async () => (await request(`${instance.url}/health/ready`)).status === 200, 3_000, 100)
    }
  })

  await t.test('usage: admitted requests only, once each; without headers for the newest holder', async (t) => {
    await retireAll()
    // `probe` tells when the instances serve the deployments (its requests count too, apart).
    const [shared, probe] = PAIR('Shared')
    for (const version of ['1', '2']) t.equal((await adminRequest(a, 'PUT', `/usage/${version}`, manifestOf(shared!, probe!))).status, 201)
    for (const instance of [a, b]) await eventually(`${instance.name} serves it`, async () => (await persisted(instance, probe!)).body.data, 5_000, 50)
    for (let i = 0; i < 10; i++) t.ok((await persisted(i % 2 ? a : b, shared!)).body.data)
    for (let i = 0; i < 4; i++) t.ok((await persisted(a, shared!, { 'apollographql-client-name': 'usage', 'apollographql-client-version': '1' })).body.data)
    const counts = await eventually('usage written', async () => {
      const rows = (await db.query(
        "SELECT version, SUM(requests)::int AS n FROM app_deployment_operations WHERE name = 'usage' AND hash = $1 GROUP BY version",
        [sha256Hex(shared!)])).rows
      const byVersion = Object.fromEntries(rows.map((row) => [row.version, row.n]))
      return byVersion['1'] + byVersion['2'] >= 14 ? byVersion : null
    }, 5_000, 100)
    t.same(counts, { 1: 4, 2: 10 }, 'ten without headers once each for usage 2 (the newest), four named usage 1')
  })

  await t.test('a SIGKILL loses at most the counts of the last flush interval', async (t) => {
    await retireAll()
    const [counted] = PAIR('Killed')
    t.equal((await adminRequest(b, 'PUT', '/killed/1', manifestOf(counted!))).status, 201)
    await eventually('a serves it', async () => (await persisted(a, counted!)).body.data, 5_000, 50)
    const answeredAt: number[] = []
    const until = Date.now() + 2500
    while (Date.now() < until) {
      await Promise.all(Array.from({ length: 8 }, async () => {
        if ((await persisted(a, counted!)).body.data) answeredAt.push(Date.now())
      }))
    }
    const killedAt = Date.now()
    await a.kill()
    const written = (await db.query("SELECT COALESCE(SUM(requests), 0)::int AS n FROM app_deployment_operations WHERE name = 'killed'")).rows[0].n
    const lost = answeredAt.length - written
    // DEPLOYMENT_USAGE_FLUSH_MS is 200 here: what came in its last interval (and the write under way) may be lost.
    const lastInterval = answeredAt.filter((at) => at > killedAt - 200 - 300).length
    t.ok(written <= answeredAt.length, `never more than served (${written} of ${answeredAt.length})`)
    t.ok(lost <= lastInterval, `lost ${lost} of ${answeredAt.length}: at most the last interval's ${lastInterval}`)
  })

  await t.test('an instance with a 384 MiB heap serves the deployments that fit, says which it does not, and stays up', async (t) => {
    await retireAll()
    // The two instances (and their small bound) out of the way: the one killed above is still counted as
    // running for a few minutes (it could not say it stopped), so its word is dropped by hand.
    await b.stop()
    await db.query('DELETE FROM service_instances')
    // Three deployments of 800 operations each, about 60 MB of weight each: a quarter of a 384 MiB heap holds one.
    const big = (tag: string) => Array.from({ length: 800 }, (_, i) =>
      `query ${tag}${i} { users(limit: ${1 + (i % 50)}) { id name email } a: user(id: "${i}") { id name email } ` +
      `b: user(id: "${i + 1}") { id name } c: messages(roomId: "r${i}", limit: 3) { id content } }`)
    const job = { DEPLOYMENTS_MAX_BYTES: String(1e9) }
    for (const tag of ['One', 'Two', 'Three']) {
      const published = await app(job, 'publish', '--name', 'big', '--version', tag, file(tag, manifestOf(...big(tag))))
      t.equal(published.code, 0, published.problems.join('\n').slice(0, 300))
    }
    const small = await startInstance(t, 'app-small', {
      DATABASE_URL: db.url,
      DATABASE_SCHEMA: db.schema,
      PERSISTED_ONLY: 'true',
      DEPLOYMENTS_MAX_BYTES: String(1e9),
      NODE_OPTIONS: '--max-old-space-size=384'
    })
    const ready = await request(`${small.url}/health/ready`)
    t.equal(ready.status, 200, 'ready: it serves what fits')
    t.match(ready.json().checks['app deployments'], /^ok, but [12] active app deployment\(s\) not served: .*big One/)
    t.ok((await persisted(small, big('Three')[0]!)).body.data, 'the newest is served')
    t.equal(codeOf((await persisted(small, big('One')[0]!)).body), 'PERSISTED_QUERY_NOT_FOUND', 'the oldest waits')
    t.equal((await request(`${small.url}/health/live`)).status, 200, 'alive')
    t.equal(small.process?.exitCode, null, 'and running')
  })
})
