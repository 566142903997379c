// The one description of the SOAP UserService, per version: element types, operations, what each
// operation calls in the domain. Dispatch (index.ts/service.ts), argument reading and response writing,
// and the WSDL (wsdl.ts) are all generated from it, so they cannot drift apart.
// Versions: v2 is a non-breaking extension of v1 (it adds createdAt to User and the ListUsers operation,
// which later gained optional paging elements); a breaking change would be a v3 beside them.
import { WRITE_RULES, visibleUser, type VisibleUser, type WriteRule } from '../core/domain/authorization.ts'
import type { DomainContext } from '../core/domain/context.ts'
import { DEFAULT_PAGE_SIZE, assertPageSize, type InputCaps } from '../core/domain/input.ts'
import { createUser, deleteUser, getExistingUser, listUsersPage, updateUser } from '../core/domain/users.ts'
import { badInput } from '../core/errors.ts'
import type { UserRow } from '../core/store/types.ts'

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
/** An operation's answer: the value of each output element by name; an undefined one is left out. */
export type Result = Record<string, VisibleUser | VisibleUser[] | boolean | string | undefined>

export interface Operation {
  name: string
  /** The first service version that has it. */
  since: number
  input: Field[]
  /** The children of <NameResponse>, in order. */
  output: Field[]
  /** The domain's rule for a write (who may call it, priced as a write); null for a read any partner may make. */
  write: WriteRule | null
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
    output: [{ name: 'user', type: 'User' }],
    write: null,
    run: async (ctx, args) => ({ user: visibleUser(ctx.caller, await getExistingUser(ctx, args.id as string)) })
  },
  {
    name: 'CreateUser',
    since: 1,
    input: [
      { name: 'name', type: 'string' },
      { name: 'email', type: 'string' }
    ],
    output: [{ name: 'user', type: 'User' }],
    write: WRITE_RULES.createUser,
    run: async (ctx, args) => ({
      user: visibleUser(ctx.caller, await createUser(ctx, { name: args.name as string, email: args.email as string }))
    })
  },
  {
    name: 'UpdateUser',
    since: 1,
    input: [
      { name: 'id', type: 'string' },
      { name: 'name', type: 'string', optional: true },
      { name: 'email', type: 'string', optional: true }
    ],
    output: [{ name: 'user', type: 'User' }],
    write: WRITE_RULES.updateUser,
    run: async (ctx, args) => ({
      user: visibleUser(
        ctx.caller,
        await updateUser(ctx, args.id as string, {
          name: args.name as string | null | undefined,
          email: args.email as string | null | undefined
        })
      )
    })
  },
  {
    name: 'DeleteUser',
    since: 1,
    input: [{ name: 'id', type: 'string' }],
    output: [{ name: 'deleted', type: 'boolean' }],
    write: WRITE_RULES.deleteUser,
    run: async (ctx, args) => ({ deleted: await deleteUser(ctx, args.id as string) })
  },
  {
    name: 'ListUsers',
    since: 2,
    // limit: the first page only (as first shipped). pageSize/pageToken: keyset paging, the same pages
    // as GraphQL's usersConnection; nextPageToken (a signed cursor) is answered only to a paging call
    // that has more to read, so clients built before paging never see an element they do not know.
    input: [
      { name: 'limit', type: 'int', optional: true },
      { name: 'pageSize', type: 'int', optional: true },
      { name: 'pageToken', type: 'string', optional: true }
    ],
    output: [
      { name: 'user', type: 'User', optional: true, many: true },
      { name: 'nextPageToken', type: 'string', optional: true }
    ],
    write: null,
    run: async (ctx, args) => {
      const paging = args.pageSize != null || args.pageToken != null
      if (paging && args.limit != null) {
        throw badInput('ListUsers: send limit or pageSize/pageToken, not both', { field: 'limit' })
      }
      const page = await listUsersPage(ctx, {
        first: pageSizeOf(args),
        after: args.pageToken as string | null | undefined
      })
      return {
        user: page.edges.map(({ node }) => visibleUser(ctx.caller, node)),
        nextPageToken: paging && page.pageInfo.hasNextPage ? (page.pageInfo.endCursor ?? undefined) : undefined
      }
    }
  }
]

function serviceVersion (number: number): ServiceVersion {
  return {
    id: `v${number}`,
    number,
    serviceName: 'UserService',
    path: `/v${number}/UserService`,
    userFields: userFields
      .filter((f) => f.since <= number)
      .map(({ name, type, optional }) => ({ name, type, optional })),
    operations: new Map(operations.filter((o) => o.since <= number).map((o) => [o.name, o]))
  }
}

export const SERVICE_VERSIONS: readonly ServiceVersion[] = [serviceVersion(1), serviceVersion(2)]

/**
 * The target namespace of a version: the configured base (SOAP_NAMESPACE_BASE) + the version's path,
 * e.g. urn:graphql-query-service:soap/v1/UserService. Part of the contract: it never depends on the
 * address the service listens on or is reached at.
 */
export function namespaceOf (version: ServiceVersion, namespaceBase: string): string {
  return namespaceBase + version.path
}

/**
 * Cost units of a call, priced as the GraphQL operation that does the same read or write: a user is
 * 1 plus one per field of the version's User, a list of users its page size times the fields of one,
 * a boolean 1; a write adds what a GraphQL mutation field adds on top of its selection (mutationCost - 1).
 */
export function costOf (
  operation: Operation,
  args: Args,
  version: ServiceVersion,
  limits: Pick<InputCaps, 'maxPageSize'> & { mutationCost: number }
): number {
  const perUser = version.userFields.length
  const main = operation.output[0]!
  let cost = 1
  if (main.type === 'User') {
    cost = main.many
      ? assertPageSize(pageSizeOf(args), limits, args.pageSize != null ? 'pageSize' : 'limit') * perUser
      : 1 + perUser
  }
  return operation.write ? cost + limits.mutationCost - 1 : cost
}

/** A list call's page size: pageSize or limit, the default page size without either. */
function pageSizeOf (args: Args): number {
  return (args.pageSize as number | null | undefined) ?? (args.limit as number | null | undefined) ?? DEFAULT_PAGE_SIZE
}

/** The soapAction of an operation, as the WSDL announces it. */
export function soapActionOf (namespace: string, operation: Operation): string {
  return `${namespace}/${operation.name}`
}
