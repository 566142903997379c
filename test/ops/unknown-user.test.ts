// A valid token whose `sub` names no user (deleted since the token was issued, or never known): a write
// made as that user is refused as the credential's fault, in the interface's shape, on both stores,
// with nothing stored and nothing logged as a server error.
import { test } from 'tap'
import { buildApp } from '../../app/app.ts'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'
import type { Store } from '../../app/core/store/types.ts'
import { mintToken } from '../../cli/mint-token.ts'
import { capturedLog, gql, testConfig, type TestLike } from '../helpers/app.ts'
import { freshSchema, TEST_DATABASE_URL } from '../helpers/postgres.ts'

const POST = 'mutation { postMessage(roomId: "gone", content: "hello") { id } }'

const stores: Record<string, (t: TestLike) => Promise<Store>> = {
  sqlite: async () => openSqliteStore(':memory:'),
  postgres: async (t) => openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 2, schema: await freshSchema(t, 'gone') })
}

for (const [kind, open] of Object.entries(stores)) {
  test(`${kind}: postMessage with a token whose user is deleted or never known is UNAUTHENTICATED, no stack logged`, async (t) => {
    const store = await open(t)
    await loadDemoData(store)
    const { lines, stream } = capturedLog()
    const config = testConfig({ NODE_ENV: 'production', PERSISTED_ONLY: 'false', LOG_LEVEL: 'info' })
    const app = await buildApp(config, { store, logger: { stream } })
    t.teardown(async () => { await app.close(); await store.close() })
    const url = await app.listen({ host: '127.0.0.1', port: 0 })
    const as = (sub: string) => ({ authorization: `Bearer ${mintToken(config.jwt, sub, 'USER')}` })

    const posted = await gql(url, POST, undefined, as('3'))
    t.match(posted.body.data, { postMessage: { id: /\d+/ } }, 'a known user posts')
    await store.deleteUser('3')
    for (const [who, headers] of [['deleted', as('3')], ['never known', as('no-such-user')]] as const) {
      const refused = await gql(url, POST, undefined, headers)
      type ErrorJson = { message: string; extensions: { code: string } }
      t.same(
        refused.body.errors?.map((e: ErrorJson) => [e.extensions.code, e.message]),
        [['UNAUTHENTICATED', 'The token names no user of this service']],
        `${who}: refused as the credential's fault`
      )
      t.equal(refused.body.data, null)
    }
    t.same(await store.messagesByRoom('gone', 10), [], 'nothing stored (the earlier message went with its author)')
    t.same(lines.filter((line) => /"level":50|"stack"/.test(line)), [], 'nothing logged as a server error')
  })
}
