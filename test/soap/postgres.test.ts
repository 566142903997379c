// The SOAP binding on the PostgreSQL store: partner credentials (hash and sealed password) round-trip
// through PostgreSQL, a captured digest request is accepted and its replay refused, and a user created
// over SOAP lands in PostgreSQL. Needs PostgreSQL at 127.0.0.1:5432 (fails with a clear message without it).
import { test } from 'tap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { loadDemoData } from '../../app/core/store/sample-data.ts'
import { TEST_PARTNER_SECRET_KEY } from '../helpers/app.ts'
import { freshSchema, TEST_DATABASE_URL } from '../helpers/postgres.ts'
import { envelope, fixture, listenSoapApp, post, readFault } from './helpers.ts'

test('SOAP over the PostgreSQL store', async (t) => {
  const store = await openPostgresStore({ url: TEST_DATABASE_URL, poolSize: 2, schema: await freshSchema(t, 'soap') })
  t.teardown(() => store.close())
  await loadDemoData(store)
  await createPartnerAccount(store, TEST_PARTNER_SECRET_KEY, { login: 'partner', password: 's3cret', userId: '5' })
  await store.createUser({ id: '007', name: 'James Bond', email: 'jb@example.com' })
  const { url } = await listenSoapApp(t, { SOAP_PUBLIC_URL: 'https://example.com', SOAP_NAMESPACE_BASE: 'https://example.com' }, { store, clock: () => Date.parse('2026-11-22T07:17:00Z') })

  const { body, headers } = fixture('zeep-3')
  const accepted = await post(`${url}/v1/UserService`, body, headers)
  t.equal(accepted.status, 200, accepted.text)
  t.match(accepted.text, '<id>007</id>')
  const replay = await post(`${url}/v1/UserService`, body, headers)
  t.match(readFault(replay.text), { code: 'env:Sender', subcode: 'wsse:FailedAuthentication' })

  // The injected clock is the fixtures' time, so this request carries no Created: PasswordText.
  const token = '<wsse:Security xmlns:wsse="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"><wsse:UsernameToken><wsse:Username>partner</wsse:Username><wsse:Password>s3cret</wsse:Password></wsse:UsernameToken></wsse:Security>'
  const created = await post(`${url}/v1/UserService`, envelope('1.1', '<CreateUser xmlns="https://example.com/v1/UserService"><name>Pat Postgres</name><email>pat@example.com</email></CreateUser>', token), { 'content-type': 'text/xml; charset=utf-8' })
  t.equal(created.status, 200, created.text)
  const id = /<id>([^<]+)<\/id>/.exec(created.text)![1]!
  t.match((await store.usersByIds([id]))[0], { name: 'Pat Postgres', email: 'pat@example.com' })
})
