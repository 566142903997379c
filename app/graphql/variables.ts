// Variable coercion without graphql-js for the common shape: every declared variable a built-in scalar
// (ID, String, Int, Float, Boolean, nullable or not) without a default value. What a request sends is
// then only type-checked against a checker made once per operation, instead of graphql-js's
// getVariableValues walking the definitions, the schema and its error machinery on every request (about
// 2% of a persisted GET's CPU, measured). It accepts exactly what graphql-js accepts and gives the same
// values; anything else (a list, an input object, a default value, a custom scalar, a value graphql-js
// would refuse) returns undefined, and the caller asks graphql-js, whose words a refusal keeps.
import { Kind, type TypeNode, type VariableDefinitionNode } from 'graphql'

const INVALID = Symbol('invalid')

const INT_MAX = 2147483647
const INT_MIN = -2147483648

/** graphql-js's parseValue of its specified scalars (which a schema cannot redefine), for JSON values. */
const SCALARS: Record<string, (value: unknown) => unknown> = {
  ID: (value) => typeof value === 'string' ? value : Number.isInteger(value) ? String(value) : INVALID,
  String: (value) => typeof value === 'string' ? value : INVALID,
  Int: (value) => typeof value === 'number' && Number.isInteger(value) && value <= INT_MAX && value >= INT_MIN
    ? value
    : INVALID,
  Float: (value) => typeof value === 'number' && Number.isFinite(value) ? value : INVALID,
  Boolean: (value) => typeof value === 'boolean' ? value : INVALID
}

interface ScalarVariable {
  name: string
  nonNull: boolean
  parse: (value: unknown) => unknown
}

export type ScalarCoercion = (sent: Record<string, unknown>) => Record<string, unknown> | undefined

function scalarOf (type: TypeNode): ((value: unknown) => unknown) | undefined {
  return type.kind === Kind.NAMED_TYPE ? SCALARS[type.name.value] : undefined
}

/** The checker of an operation whose variables are all plain scalars; null when any is not. */
export function scalarCoercion (definitions: readonly VariableDefinitionNode[]): ScalarCoercion | null {
  const variables: ScalarVariable[] = []
  for (const definition of definitions) {
    if (definition.defaultValue !== undefined) return null
    const nonNull = definition.type.kind === Kind.NON_NULL_TYPE
    const parse = scalarOf(definition.type.kind === Kind.NON_NULL_TYPE ? definition.type.type : definition.type)
    if (!parse) return null
    variables.push({ name: definition.variable.name.value, nonNull, parse })
  }
  return (sent) => {
    const coerced: Record<string, unknown> = {}
    for (const { name, nonNull, parse } of variables) {
      // As graphql-js: only own properties are provided; an absent nullable variable stays absent.
      const provided = Object.hasOwn(sent, name)
      const value = provided ? sent[name] : undefined
      if (value === undefined) {
        if (nonNull) return undefined
        continue
      }
      if (value === null) {
        if (nonNull) return undefined
        coerced[name] = null
        continue
      }
      const parsed = parse(value)
      if (parsed === INVALID) return undefined
      coerced[name] = parsed
    }
    return coerced
  }
}
