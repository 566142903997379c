// The one description of the SOAP UserService, per version: element types, operations, what each
// operation calls in the domain. Dispatch (index.ts/service.ts), argument reading and response writing,
// and the WSDL (wsdl.ts) are all generated from it, so they cannot drift apart.
// Versions: v2 is a non-breaking extension of v1 (it adds createdAt to User and the ListUsers operation);
// a breaking change would be a v3 beside them.
import { visibleUser } from '../../app/domain/authorization.ts'
import type { DomainContext } from '../../app/domain/context.ts'
import { createUser, deleteUser, getExistingUser, listUsers, updateUser } from '../../app/domain/users.ts'
import type { UserRow } from '../../app/store/types.ts'

export type ScalarType = 'string' | 'int' | 'boolean' | 'dateTime'

export interface Field {
  name: string
  type: ScalarType | 'User'
  /** minOccurs 0: may be absent (or xsi:nil). */
  optional?: boolean
  /** maxOccurs unbounded. */
  many?: boolean
}

export type Args = Record<string, string | number | boolean | null | undefined>
export type Result = UserRow | UserRow[] | boolean

export interface Operation {
  name: string
  /** The first service version that has it. */
  since: number
  input: Field[]
  /** The single child of <NameResponse>. */
  output: Field
  run (ctx: DomainContext, args: Args): Promise<Result>
}

export interface ServiceVersion {
  /** 'v1', 'v2': the path segment and the namespace segment. */
  id: string
  number: number
  serviceName: 'UserService'
  path: string
  userFields: Field[]
  operations: Map<string, Operation>
}

const DEFAULT_LIST_LIMIT = 20

const userFields: Array<Field & { since: number; of: keyof UserRow }> = [
  { name: 'id', type: 'string', since: 1, of: 'id' },
  { name: 'name', type: 'string', since: 1, of: 'name' },
  // Hidden (absent) unless the caller is the user or an administrator: the same rule as GraphQL.
  { name: 'email', type: 'string', optional: true, since: 1, of: 'email' },
  { name: 'createdAt', type: 'dateTime', since: 2, of: 'createdAt' }
]

const operations: Operation[] = [
  {
    name: 'GetUser',
    since: 1,
    input: [{ name: 'id', type: 'string' }],
    output: { name: 'user', type: 'User' },
    run: async (ctx, args) => visibleUser(ctx.caller, await getExistingUser(ctx, args.id as string))
  },
  {
    name: 'CreateUser',
    since: 1,
    input: [{ name: 'name', type: 'string' }, { name: 'email', type: 'string' }],
    output: { name: 'user', type: 'User' },
    run: async (ctx, args) => visibleUser(ctx.caller, await createUser(ctx, { name: args.name as string, email: args.email as string }))
  },
  {
    name: 'UpdateUser',
    since: 1,
    input: [{ name: 'id', type: 'string' }, { name: 'name', type: 'string', optional: true }, { name: 'email', type: 'string', optional: true }],
    output: { name: 'user', type: 'User' },
    run: async (ctx, args) => visibleUser(ctx.caller, await updateUser(ctx, args.id as string, { name: args.name as string | null | undefined, email: args.email as string | null | undefined }))
  },
  {
    name: 'DeleteUser',
    since: 1,
    input: [{ name: 'id', type: 'string' }],
    output: { name: 'deleted', type: 'boolean' },
    run: (ctx, args) => deleteUser(ctx, args.id as string)
  },
  {
    name: 'ListUsers',
    since: 2,
    input: [{ name: 'limit', type: 'int', optional: true }],
    output: { name: 'user', type: 'User', optional: true, many: true },
    run: async (ctx, args) => (await listUsers(ctx, (args.limit as number | null | undefined) ?? DEFAULT_LIST_LIMIT)).map((u) => visibleUser(ctx.caller, u))
  }
]

function serviceVersion (number: number): ServiceVersion {
  return {
    id: `v${number}`,
    number,
    serviceName: 'UserService',
    path: `/v${number}/UserService`,
    userFields: userFields.filter((f) => f.since <= number).map(({ name, type, optional }) => ({ name, type, optional })),
    operations: new Map(operations.filter((o) => o.since <= number).map((o) => [o.name, o]))
  }
}

export const SERVICE_VERSIONS: readonly ServiceVersion[] = [serviceVersion(1), serviceVersion(2)]

/** The target namespace of a version: the public base URL + the path, e.g. https://api.example.com/v1/UserService. */
export function namespaceOf (version: ServiceVersion, publicUrl: string): string {
  return publicUrl.replace(/\/+$/, '') + version.path
}

/** The soapAction of an operation, as the WSDL announces it. */
export function soapActionOf (namespace: string, operation: Operation): string {
  return `${namespace}/${operation.name}`
}
