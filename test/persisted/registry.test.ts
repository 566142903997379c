// The persisted registry's persisted-only rules as plain objects (no server, no store): the one place the
// mode is enforced, for a single operation and for a whole batch, and where APQ is turned off with it.
// (Through a listening server: test/graphql-cop.test.ts's production profile.)
import { test } from 'tap'
import { OperationTypeNode } from 'graphql'
import { AppError } from '../../app/core/errors.ts'
import { memoryApqStore } from '../../app/graphql/apq-store.ts'
import type { RegisteredOperations } from '../../app/graphql/deployment-catalog.ts'
import { createPersistedQueries } from '../../app/graphql/persisted-registry.ts'
import { sha256Hex, type PersistedOperation } from '../../app/graphql/persisted.ts'

const USERS = 'query Users { users(limit: 2) { id } }'
const DEPLOYED: PersistedOperation = { id: `sha256:${sha256Hex(USERS)}`, text: USERS, name: 'Users', type: OperationTypeNode.QUERY }

function registryOf (persistedOnly: boolean) {
  const registered = {
    find: (id: string) => (id === DEPLOYED.id ? DEPLOYED : undefined),
    retiredWith: () => undefined,
    count () {}
  } as unknown as RegisteredOperations
  return createPersistedQueries({
    registered,
    persistedOnly,
    apq: memoryApqStore(10),
    apqMaxEntries: 10,
    apqMaxBytes: 1 << 20,
    apqMaxDocumentBytes: 1 << 16,
    plan: () => ({ operations: [{ name: 'Users', type: OperationTypeNode.QUERY }] })
  })
}

const codeOf = (run: () => unknown) => {
  try { run(); return 'allowed' } catch (err) { return (err as AppError).code }
}

test('persisted-only: a batch with one ad-hoc entry is refused whole, once; ids and hashes pass', async (t) => {
  const strict = registryOf(true)
  const named = [{ id: DEPLOYED.id }, { extensions: { persistedQuery: { version: 1, sha256Hash: 'ab'.repeat(32) } } }]
  t.equal(codeOf(() => strict.checkBatch(named)), 'allowed', 'entries naming registered operations')
  t.equal(codeOf(() => strict.checkBatch([...named, { query: USERS }])), 'PERSISTED_QUERY_REQUIRED', 'one text among them')
  t.equal(codeOf(() => registryOf(false).checkBatch([{ query: USERS }])), 'allowed', 'texts run when the mode is off')
})

test('persisted-only: a text is refused, a deployed id resolves, and APQ is off', async (t) => {
  const strict = registryOf(true)
  t.equal(strict.apq, null, 'no automatic registration in persisted-only mode')
  t.equal(registryOf(false).apq?.kind, 'memory')
  await t.rejects(strict.resolve({ query: USERS }), { code: 'PERSISTED_QUERY_REQUIRED' })
  const deployed = await strict.resolve({ id: DEPLOYED.id })
  t.same(deployed, { text: USERS, registered: true, introspectionOnly: false, deployed: DEPLOYED })
  t.same(await strict.resolve({ query: '{ __schema { queryType { name } } }' }, true),
    { text: '{ __schema { queryType { name } } }', registered: false, introspectionOnly: true },
    "an ADMIN's text runs only if it introspects alone (admission checks its plan)")
})
