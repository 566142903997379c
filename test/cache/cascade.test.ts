// Deleting a user deletes their messages (the store cascades). A cached page of a room whose own rows
// are all by someone else still depends on the deleted user when their message was the row read ahead
// (the one that decides hasNextPage, or hasPreviousPage for `last`): after the delete is acknowledged,
// by GraphQL or by SOAP, the next read on both instances (PostgreSQL + Redis) shows the new page.
import { test } from 'tap'
import { randomBytes } from 'node:crypto'
import soap from 'soap'
import { createPartnerAccount } from '../../cli/create-partner.ts'
import { openPostgresStore } from '../../app/core/store/postgres.ts'
import { PARTNER_SECRET_KEY, gql, newUser, startInstances, token, type Instance } from '../cluster/harness.ts'
import { CACHE_TEST_ENV, ageOf } from './instances.ts'

const PAGE = `query Page($roomId: String!, $first: Int, $last: Int) {
  messagesConnection(roomId: $roomId, first: $first, last: $last) { edges { node { content } } pageInfo { hasNextPage hasPreviousPage } }
}`
const ROOT_PARTNER = { login: 'cascade-root', password: 'cascade-r00t-s3cret' }

test('a deleted user\'s messages leave the cached pages that read them ahead, by GraphQL and by SOAP', async (t) => {
  const { instances, db } = await startInstances(t, { env: CACHE_TEST_ENV })
  const [a, b] = instances as [Instance, Instance]
  const partners = await openPostgresStore({ url: db.url, poolSize: 1, schema: db.schema })
  await createPartnerAccount(partners, PARTNER_SECRET_KEY, { ...ROOT_PARTNER, userId: '1' })
  await partners.close()
  const admin = token(`cascade-admin-${randomBytes(3).toString('hex')}`, 'ADMIN')

  const post = async (author: string, roomId: string, content: string) => {
    const posted = await gql(a.url, 'mutation ($roomId: String!, $content: String!) { postMessage(roomId: $roomId, content: $content) { id } }',
      { roomId, content }, { token: token(author) })
    if (!posted.body.data?.postMessage) throw new Error(JSON.stringify(posted.body))
  }
  const page = async (instance: Instance, roomId: string, size: { first?: number; last?: number }) => {
    const response = await gql(instance.url, PAGE, { roomId, ...size }, { token: admin })
    return { ...response.body.data.messagesConnection.pageInfo, age: ageOf(response) }
  }

  /**
   * A fresh room where `last: 2` and `first: 2` each show two messages by a bystander and read the
   * victim's one ahead: [victim, bystander, bystander] read backwards, [bystander, bystander, victim] forwards.
   */
  async function scene (label: string) {
    const bystander = await newUser(a.url, `${label}-bystander`)
    const victim = await newUser(a.url, `${label}-victim`)
    const forwards = `fwd-${label}-${randomBytes(3).toString('hex')}`
    const backwards = `bwd-${label}-${randomBytes(3).toString('hex')}`
    await post(bystander, forwards, 'one')
    await post(bystander, forwards, 'two')
    await post(victim, forwards, 'ahead')
    await post(victim, backwards, 'ahead')
    await post(bystander, backwards, 'one')
    await post(bystander, backwards, 'two')
    for (const instance of [a, b]) {
      await page(instance, forwards, { first: 2 })
      await page(instance, backwards, { last: 2 })
    }
    const cached = [await page(b, forwards, { first: 2 }), await page(a, backwards, { last: 2 })]
    t.match(cached, [{ hasNextPage: true, age: /^\d+$/ }, { hasPreviousPage: true, age: /^\d+$/ }], `${label}: both pages cached, each with a row read ahead`)
    return { victim, forwards, backwards }
  }

  // The first read after the delete executes (no Age); the other instance may then share its new entry.
  const afterDelete = async (label: string, { forwards, backwards }: { forwards: string; backwards: string }) => {
    for (const instance of [b, a]) {
      const first = await page(instance, forwards, { first: 2 })
      const last = await page(instance, backwards, { last: 2 })
      t.equal(first.hasNextPage, false, `${label}: first on ${instance.name} has no next page`)
      t.equal(last.hasPreviousPage, false, `${label}: last on ${instance.name} has no previous page`)
      if (instance === b) t.same([first.age, last.age], [undefined, undefined], `${label}: executed anew`)
    }
  }

  const overGraphQL = await scene('graphql')
  const deleted = await gql(b.url, 'mutation ($id: ID!) { deleteUser(id: $id) }', { id: overGraphQL.victim }, { token: admin })
  t.equal(deleted.body.data.deleteUser, true)
  await afterDelete('GraphQL deleteUser', overGraphQL)

  const overSoap = await scene('soap')
  const client = await soap.createClientAsync(`${b.url}/v1/UserService?wsdl`, {}, `${b.url}/v1/UserService`)
  client.setSecurity(new soap.WSSecurity(ROOT_PARTNER.login, ROOT_PARTNER.password, { passwordType: 'PasswordText', hasTimeStamp: true }))
  const call = client as unknown as Record<string, (args: unknown) => Promise<[any]>>
  const [answer] = await call.DeleteUserAsync!({ id: overSoap.victim })
  t.equal(String(answer.deleted), 'true')
  await afterDelete('SOAP DeleteUser', overSoap)
})
