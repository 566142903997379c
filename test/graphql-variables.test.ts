// The fast path of variable coercion (app/graphql/variables.ts) against graphql-js's getVariableValues:
// for every value it accepts, the same coerced variables; for everything else, no answer of its own
// (the pipeline then asks graphql-js, whose words a refusal keeps).
import { test } from 'tap'
import { isDeepStrictEqual } from 'node:util'
import fc from 'fast-check'
import { buildSchema, getVariableValues, parse, type OperationDefinitionNode } from 'graphql'
import { scalarCoercion } from '../app/graphql/variables.ts'

const schema = buildSchema(`
  input Filter { name: String }
  scalar DateTime
  type Query { f(id: ID, s: String, i: Int, x: Float, b: Boolean, l: [Int], o: Filter, d: DateTime): Int }
`)

function definitionsOf (source: string) {
  return (parse(source).definitions[0] as OperationDefinitionNode).variableDefinitions ?? []
}

const SIGNATURE = '($id: ID!, $s: String, $i: Int!, $x: Float, $b: Boolean!)'
const definitions = definitionsOf(`query Q${SIGNATURE} { f(id: $id, s: $s, i: $i, x: $x, b: $b) }`)

const anyJson = fc.oneof(
  fc.string(), fc.integer(), fc.double(), fc.boolean(), fc.constant(null),
  fc.constant(2 ** 31), fc.constant(-(2 ** 31) - 1),
  fc.constant(1e300), fc.constant(3.5), fc.array(fc.integer(), { maxLength: 2 }), fc.constant({ name: 'x' })
)

test('plain scalar variables: the same values as graphql-js, or no answer where graphql-js refuses', (t) => {
  const coerce = scalarCoercion(definitions)
  t.ok(coerce, 'built for an operation of plain scalars without defaults')
  // Each variable mostly of its own type (so that graphql-js often accepts), sometimes anything, or absent.
  const value = (own: fc.Arbitrary<unknown>) =>
    fc.oneof({ arbitrary: own, weight: 4 }, { arbitrary: anyJson, weight: 1 })
  const sentVariables = fc.record({
    id: value(fc.oneof(fc.string(), fc.integer())),
    s: value(fc.string()),
    i: value(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })),
    x: value(fc.double({ noNaN: true, noDefaultInfinity: true })),
    b: value(fc.boolean()),
    other: anyJson
  }, { requiredKeys: [] })
  let accepted = 0
  fc.assert(fc.property(sentVariables, (sent) => {
    const fast = coerce!(sent)
    const { coerced, errors } = getVariableValues(schema, definitions, sent)
    if (errors) return fast === undefined
    accepted++
    // Where graphql-js accepts, the fast path must too (else it would be no faster), with the same values.
    return isDeepStrictEqual(fast, coerced)
  }), { numRuns: 3000 })
  t.ok(accepted > 300, `graphql-js accepted ${accepted} of 3000 (the comparison covered both sides)`)
  t.same(coerce!({ id: 7, i: 1, b: false }), { id: '7', i: 1, b: false },
    'an integer ID becomes a string, as graphql-js makes it')
  t.equal(coerce!({ id: 7.5, i: 1, b: false }), undefined, 'a non-integer ID is left to graphql-js')
  t.equal(coerce!(JSON.parse('{"__proto__": {"id": "1"}, "i": 1, "b": true}')), undefined,
    'a "__proto__" key provides no other variable')
  t.end()
})

test('other variable shapes are left to graphql-js', (t) => {
  const signatures = ['($l: [Int])', '($o: Filter)', '($d: DateTime)', '($i: Int = 3)', '($s: String!, $l: [Int])']
  for (const signature of signatures) {
    t.equal(scalarCoercion(definitionsOf(`query Q${signature} { f }`)), null, signature)
  }
  t.end()
})
