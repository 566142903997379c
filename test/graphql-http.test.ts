import { test } from 'tap'
import { gql, listenTestApp } from './helpers/app.ts'

test('answers a query from the store over HTTP', async (t) => {
  const { url } = await listenTestApp(t)
  const { status, body, headers } = await gql(url, '{ users { id name createdAt } }')
  t.equal(status, 200)
  t.match(headers.get('content-type'), /^application\/json/)
  t.same(body.data.users.map((u: { name: string }) => u.name), ['Admin', 'Ada Lovelace', 'Alan Turing', 'Grace Hopper', 'Partner Inc.'])
  t.notOk(body.errors)
  t.same(body.extensions.cost.requested, 60)
})
