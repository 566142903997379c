// The freshness rule through HTTP, as a property over two real instances sharing PostgreSQL and Redis:
// in random interleavings of reads (a user by id, the users list) and writes (updateUser over GraphQL),
// each on either instance and started after a random short delay, no read returns a name older than
// the last write acknowledged before the read was sent. Writes to one user are never concurrent with
// each other (so the database's order is the model's), while reads and writes overlap freely.
import { test } from 'tap'
import fc from 'fast-check'
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { gql, newUser, startInstances, token, type Instance } from '../cluster/harness.ts'
import { CACHE_TEST_ENV, ageOf } from './instances.ts'

type Op =
  | { kind: 'write', user: number, on: number, delayMs: number }
  | { kind: 'read', user: number, on: number, delayMs: number }
  | { kind: 'list', on: number, delayMs: number }

const delayMs = fc.integer({ min: 0, max: 15 })
const on = fc.nat(1)
const user = fc.nat(1)
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('write' as const), user, on, delayMs }),
  fc.record({ kind: fc.constant('read' as const), user, on, delayMs }),
  fc.record({ kind: fc.constant('list' as const), on, delayMs })
)
/** Groups of operations run together; the groups one after another. */
const groups = fc.array(fc.array(op, { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 4 })

const USER_NAME = 'query PropertyUser($id: ID!) { user(id: $id) { id name } }'
const USER_NAMES = 'query PropertyUsers { users(limit: 100) { id name } }'
const RENAME = 'mutation Rename($id: ID!, $name: String!) { updateUser(id: $id, input: { name: $name }) { id } }'
const versionOf = (name: string | undefined) => Number(/-v(\d+)$/.exec(name ?? '')?.[1] ?? NaN)

test('no read on either instance returns a name older than the last acknowledged write', async (t) => {
  const { instances } = await startInstances(t, { env: CACHE_TEST_ENV })
  const admin = token(`property-admin-${randomBytes(3).toString('hex')}`, 'ADMIN')
  const ids = [await newUser(instances[0]!.url, 'property'), await newUser(instances[0]!.url, 'property')]
  // The model: versions written (in order, per user) and the highest one acknowledged.
  const written = [0, 0]
  const acked = [0, 0]
  for (const [u, id] of ids.entries()) {
    const set = await gql(instances[0]!.url, RENAME, { id, name: `p${u}-v0` }, { token: admin })
    if (set.body.data?.updateUser?.id !== id) throw new Error(`could not name user ${id}: ${JSON.stringify(set.body)}`)
  }
  let reads = 0
  let hits = 0
  let writes = 0

  async function run (o: Op, instance: Instance): Promise<string | null> {
    await sleep(o.delayMs)
    if (o.kind === 'write') {
      const version = ++written[o.user]!
      const response = await gql(instance.url, RENAME, { id: ids[o.user], name: `p${o.user}-v${version}` }, { token: admin })
      if (response.body.data?.updateUser?.id !== ids[o.user]) return `write v${version} failed: ${JSON.stringify(response.body)}`
      writes++
      acked[o.user] = Math.max(acked[o.user]!, version)
      return null
    }
    const floor = [...acked]
    const response = o.kind === 'read'
      ? await gql(instance.url, USER_NAME, { id: ids[o.user] }, { token: admin })
      : await gql(instance.url, USER_NAMES, {}, { token: admin })
    reads++
    if (ageOf(response) !== undefined) hits++
    // The version of each user the answer shows, against the floor the acknowledged writes set.
    const shown: [number, number][] = o.kind === 'read'
      ? [[o.user, versionOf(response.body.data?.user?.name)]]
      : ids.map((id, u) => [u, versionOf(response.body.data?.users?.find((r: { id: string }) => r.id === id)?.name)])
    const stale = shown.filter(([u, seen]) => !(seen >= floor[u]!))
    if (stale.length === 0) return null
    const what = o.kind === 'read' ? 'user' : 'list'
    return `${what} on ${instance.name}: ${stale.map(([u, seen]) => `user ${u} v${seen} after v${floor[u]} was acknowledged`).join(', ')}`
  }

  await fc.assert(fc.asyncProperty(groups, async (plan) => {
    const violations: string[] = []
    for (const group of plan) {
      // At most one write per user in a group: a second one reads instead.
      const writing = new Set<number>()
      const ops = group.map((o): Op => {
        if (o.kind !== 'write') return o
        if (writing.has(o.user)) return { ...o, kind: 'read' }
        writing.add(o.user)
        return o
      })
      const outcomes = await Promise.all(ops.map((o) => run(o, instances[o.on]!)))
      violations.push(...outcomes.filter((v): v is string => v !== null))
    }
    if (violations.length > 0) throw new Error(violations.join('; '))
  }), { numRuns: 40, endOnFailure: true })

  t.comment(`${reads} reads (${hits} hits), ${writes} writes`)
  t.ok(writes > 0 && hits > 0, 'reads were served from the cache (Age) between the writes: the property is not vacuous')
})
