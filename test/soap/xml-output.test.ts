// Characters XML cannot carry: refused by the domain's input rules whatever the transport (GraphQL
// here), and never written by the SOAP writer even when the store holds them (data stored before the
// rule, or by another path): every SOAP answer is a document a conformant parser accepts.
import { test } from 'tap'
import { SaxesParser } from 'saxes'
import { mintToken } from '../../cli/mint-token.ts'
import { gql } from '../helpers/app.ts'
import { envelope, listenSoapApp, parseXmlText, post, textToken } from './helpers.ts'

const NS = 'urn:graphql-query-service:soap/v1/UserService'

/** True when saxes (a conformant, namespace-aware parser) accepts the document. */
function conformant (xml: string): boolean {
  const parser = new SaxesParser({ xmlns: true })
  let ok = true
  parser.on('error', () => { ok = false })
  parser.write(xml).close()
  return ok
}

test('GraphQL: a name or admin note holding a control character is BAD_USER_INPUT and changes nothing', async (t) => {
  const { url, app } = await listenSoapApp(t)
  const admin = { authorization: `Bearer ${mintToken(app.config.jwt, '1', 'ADMIN')}` }
  const created = await gql(
    url,
    'mutation ($input: CreateUserInput!) { createUser(input: $input) { id } }',
    { input: { name: 'Bad\u0001Name', email: 'bad-name@example.com' } },
    admin
  )
  t.equal(created.body.errors?.[0]?.extensions?.code, 'BAD_USER_INPUT')
  t.match(created.body.errors[0].message, /name holds a control character/)
  const listed = await gql(url, '{ users(limit: 100) { email } }', undefined, admin)
  t.notOk(
    listed.body.data.users.some((u: { email: string }) => u.email === 'bad-name@example.com'),
    'no user was created'
  )
  for (const input of [
    { adminNotes: 'note\u0008' },
    { email: 'a\u0000@example.com' },
    { name: 'half \uD800 surrogate' }
  ]) {
    const updated = await gql(
      url,
      'mutation ($input: UpdateUserInput!) { updateUser(id: "2", input: $input) { id } }',
      { input },
      admin
    )
    t.equal(updated.body.errors?.[0]?.extensions?.code, 'BAD_USER_INPUT', JSON.stringify(input))
  }
  const fine = await gql(
    url,
    'mutation ($input: CreateUserInput!) { createUser(input: $input) { name } }',
    { input: { name: 'Tab\tand\nnewline are text', email: 'fine@example.com' } },
    admin
  )
  t.same(fine.body.data, { createUser: { name: 'Tab\tand\nnewline are text' } })
})

test('SOAP: a stored name with characters XML forbids is answered as a document parsers accept (U+FFFD in their place)', async (t) => {
  const { url, store } = await listenSoapApp(t)
  // Written straight to the store, as data from before the input rule would be.
  await store.createUser({ id: 'legacy', name: 'Bad\u0001Name\uFFFE\uDC00!', email: 'legacy@example.com' })
  const response = await post(
    `${url}/v1/UserService`,
    envelope('1.1', `<GetUser xmlns="${NS}"><id>legacy</id></GetUser>`, textToken('partner', 's3cret')),
    { 'content-type': 'text/xml; charset=utf-8' }
  )
  t.equal(response.status, 200)
  t.ok(conformant(response.text), 'saxes accepts the answer')
  const user = parseXmlText(response.text).children[0]!.children[0]!.children[0]!
  t.equal(
    user.children.find((c) => c.local === 'name')?.text,
    'Bad\uFFFDName\uFFFD\uFFFD!',
    'our own reader too, with each forbidden character replaced'
  )
})
