// User use cases, transport-free: GraphQL resolvers and SOAP handlers call these.
import { badInput, notFound } from '../errors.ts'
import { ROLES, type Role, type UserPatch, type UserRow } from '../store/types.ts'
import { actions } from './authorization.ts'
import { assertBeforeDeadline, type DomainContext } from './context.ts'
import { readPage, type Connection } from './pages.ts'
import { assertPageSize, assertText, assertWithinCaps, normalizeEmail, normalizeName } from './input.ts'

export interface CreateUserInput {
  name: string
  email: string
}

export interface UpdateUserInput {
  name?: string | null
  email?: string | null
  role?: string | null
  adminNotes?: string | null
}

export function getUser (ctx: DomainContext, id: string): Promise<UserRow | null> {
  return ctx.loaders.userById.load(id)
}

/** Users by id in the order asked (null where none exists); the id list obeys the list cap. */
export async function getUsers (ctx: DomainContext, ids: readonly string[]): Promise<(UserRow | null)[]> {
  assertWithinCaps(ids, ctx.caps, 'ids')
  const rows = await ctx.loaders.userById.loadMany(ids)
  return rows.map((row) => (row instanceof Error ? null : row))
}

export async function getExistingUser (ctx: DomainContext, id: string): Promise<UserRow> {
  const user = await getUser(ctx, id)
  if (!user) throw notFound(`User ${id}`)
  return user
}

export async function listUsers (ctx: DomainContext, limit: number): Promise<UserRow[]> {
  const users = await ctx.store.listUsers(assertPageSize(limit, ctx.caps))
  ctx.loaders.rememberUsers(users)
  return users
}

/** A page of users, oldest first, after the `after` cursor (GraphQL usersConnection, SOAP ListUsers page tokens). */
export async function listUsersPage (
  ctx: DomainContext,
  args: { first?: number | null; after?: string | null }
): Promise<Connection<UserRow>> {
  const page = await readPage(ctx, 'users', '', { first: args.first, after: args.after }, (_direction, from, limit) =>
    ctx.store.usersAfter(from, limit)
  )
  ctx.loaders.rememberUsers(page.edges.map((edge) => edge.node))
  return page
}

export async function createUser (ctx: DomainContext, input: CreateUserInput): Promise<UserRow> {
  actions.createUser(ctx.caller)
  const user = { name: normalizeName(input.name), email: normalizeEmail(input.email) }
  assertBeforeDeadline(ctx)
  const created = await ctx.store.createUser(user)
  ctx.loaders.userById.prime(created.id, created)
  return created
}

export async function updateUser (ctx: DomainContext, id: string, input: UpdateUserInput): Promise<UserRow> {
  const privileged = input.role != null || input.adminNotes !== undefined
  actions.updateUser(ctx.caller, id, privileged)
  const patch: UserPatch = {}
  if (input.name != null) patch.name = normalizeName(input.name)
  if (input.email != null) patch.email = normalizeEmail(input.email)
  if (input.role != null) patch.role = parseRole(input.role)
  if (input.adminNotes !== undefined) {
    patch.adminNotes = input.adminNotes === null ? null : assertText(input.adminNotes, 'adminNotes')
  }
  assertBeforeDeadline(ctx)
  const updated = await ctx.store.updateUser(id, patch)
  if (!updated) throw notFound(`User ${id}`)
  ctx.loaders.userById.clear(id).prime(id, updated)
  // Long-lived work (subscriptions) holds the role its token claimed: it must learn of the new one.
  if (patch.role !== undefined) await ctx.events.publish({ type: 'userChanged', userId: id, role: updated.role })
  return updated
}

export async function deleteUser (ctx: DomainContext, id: string): Promise<boolean> {
  actions.deleteUser(ctx.caller)
  assertBeforeDeadline(ctx)
  const deleted = (await ctx.store.deleteUser(id)) !== null
  ctx.loaders.forgetUser(id)
  if (deleted) await ctx.events.publish({ type: 'userChanged', userId: id, role: null })
  return deleted
}

function parseRole (value: string): Role {
  if (!(ROLES as readonly string[]).includes(value)) {
    throw badInput(`role must be one of ${ROLES.join(', ')}`, { field: 'role' })
  }
  return value as Role
}
