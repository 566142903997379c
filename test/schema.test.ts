import { test } from 'tap'
import { buildSchema, Kind, type ListValueNode } from 'graphql'
import { compareWithCommitted, exportedSDL } from '../cli/schema-tool.ts'
import { RESTRICTED_USER_FIELDS } from '../app/core/domain/authorization.ts'
import { readFileSync } from 'node:fs'

test('the committed schema.graphql matches the live schema (run npm run schema:export after a change)', async (t) => {
  const { breaking, drifted } = compareWithCommitted()
  t.same(breaking, [])
  t.equal(drifted, false)
})

test('schema:check detects breaking changes and tolerates additions', async (t) => {
  const live = exportedSDL()
  const withoutUsers = live.replace(/\n {2}roomId: String!/, '')
  t.not(withoutUsers, live)
  // Committed had `users`; live removes it: breaking.
  t.match(compareWithCommitted(live, withoutUsers).breaking, [/FIELD_REMOVED: Message\.roomId was removed/])
  // Committed lacked it; live adds it: not breaking, but drifted.
  const addition = compareWithCommitted(withoutUsers, live)
  t.same(addition.breaking, [])
  t.equal(addition.drifted, true)
})

test('@auth directives in the SDL name exactly the domain rules for restricted user fields', async (t) => {
  const schema = buildSchema(readFileSync(new URL('../app/graphql/schema.graphql', import.meta.url), 'utf8'))
  const user = schema.getType('User') as import('graphql').GraphQLObjectType
  const declared: Record<string, string[]> = {}
  for (const field of Object.values(user.getFields())) {
    const auth = field.astNode?.directives?.find((d) => d.name.value === 'auth')
    if (!auth) continue
    const list = auth.arguments![0]!.value as ListValueNode
    declared[field.name] = list.values.map((v) => (v.kind === Kind.ENUM ? v.value : ''))
  }
  t.same(declared, RESTRICTED_USER_FIELDS)
})
