// Who may do what: the one place for every authorization rule, used by the GraphQL @auth directive,
// GraphQL resolvers, SOAP handlers and subscriptions alike.
import { AppError, forbidden, unauthenticated } from '../errors.ts'
import type { Role, Store, UserRow } from '../store/types.ts'
import type { Caller } from './context.ts'

/** The requirements the @auth directive can name: SELF (the user the field belongs to) and ADMIN. */
export type AccessRequirement = 'SELF' | 'ADMIN'

/**
 * Fields of a user that not everybody may read. The SDL carries the same lists in @auth directives;
 * a test keeps the two in step.
 */
export const RESTRICTED_USER_FIELDS = {
  email: ['SELF', 'ADMIN'],
  adminNotes: ['ADMIN']
} as const satisfies Record<string, readonly AccessRequirement[]>

export function requireCaller (caller: Caller | null): Caller {
  if (!caller) throw unauthenticated()
  return caller
}

/**
 * An authenticated caller who is nobody: role USER, owner of nothing. A USER's or SERVICE's answer differs
 * from a non-owner's only where SELF lets them read their own data, so the fan-out hub executes an event
 * once as a non-owner for all of them, and once more only for the callers among `refusedOwners`: the
 * owners of the data SELF refused the non-owner (app/graphql/fanout.ts).
 */
export class NonOwner implements Caller {
  readonly id = ''
  readonly role: Role = 'USER'
  readonly refusedOwners = new Set<string>()
}

/** True when the caller meets any of the requirements for data owned by `ownerId`. */
export function meets (
  caller: Caller | null,
  requirements: readonly AccessRequirement[],
  ownerId: string | null
): boolean {
  if (!caller) return false
  return requirements.some((r) => {
    if (r === 'ADMIN') return caller.role === 'ADMIN'
    if (ownerId === null) return false
    if (caller.id === ownerId) return true
    if (caller instanceof NonOwner) caller.refusedOwners.add(ownerId)
    return false
  })
}

/**
 * Why a caller's token no longer speaks for its user, given the user's role in the store (null: the user
 * is gone); undefined while it still does. Requests take the token's word until it expires (its life is
 * bounded by JWT_MAX_LIFETIME_SEC); long-lived work (subscriptions) asks this when it starts and when the
 * user changes, so a demoted or deleted user keeps no rights the store no longer gives.
 */
export function staleIdentity (caller: Caller, storedRole: Role | null): AppError | undefined {
  if (storedRole === null) return new AppError('UNAUTHENTICATED', 'The user of this token no longer exists')
  if (storedRole !== caller.role) {
    return forbidden(`The user's role is now ${storedRole}, not the token's ${caller.role}: use a new token`)
  }
  return undefined
}

/**
 * The role the store gives a user now (null: the user is gone), read from the store itself (no loader's
 * memory): what staleIdentity weighs a token's role against.
 */
export async function storedRole (store: Pick<Store, 'usersByIds'>, userId: string): Promise<Role | null> {
  return (await store.usersByIds([userId]))[0]?.role ?? null
}

/** A user as a caller may see it: the email may be hidden (null) as well as the admin notes. */
export type VisibleUser = Omit<UserRow, 'email'> & { email: string | null }

/** A user as `caller` may see it: restricted fields they may not read are null. */
export function visibleUser (caller: Caller | null, user: UserRow): VisibleUser {
  const email = meets(caller, RESTRICTED_USER_FIELDS.email, user.id)
  const adminNotes = meets(caller, RESTRICTED_USER_FIELDS.adminNotes, user.id)
  if (email && adminNotes) return user
  return {
    ...user,
    email: email ? user.email : null,
    adminNotes: adminNotes ? user.adminNotes : null
  }
}

/** Who may perform a write: the roles that may act on any user, and whether a user may act on itself. */
export interface WriteRule {
  roles: readonly Role[]
  self: boolean
}

/**
 * The write rules as data: the checks below enforce them, and transports that describe their
 * operations (the SOAP contract's documentation) read them, so the two cannot disagree.
 */
export const WRITE_RULES = {
  createUser: { roles: ['ADMIN', 'SERVICE'], self: false },
  updateUser: { roles: ['ADMIN'], self: true },
  deleteUser: { roles: ['ADMIN'], self: false }
} as const satisfies Record<string, WriteRule>

/** A rule in words, e.g. "role ADMIN or SERVICE", "role ADMIN, or the user themself". */
export function describeRule (rule: WriteRule): string {
  return `role ${rule.roles.join(' or ')}${rule.self ? ', or the user themself (the id is the caller\'s own)' : ''}`
}

const allowed = (rule: WriteRule, caller: Caller, userId: string | null): boolean =>
  (rule.roles as readonly Role[]).includes(caller.role) || (rule.self && userId !== null && caller.id === userId)

export const actions = {
  createUser (caller: Caller | null): void {
    if (!allowed(WRITE_RULES.createUser, requireCaller(caller), null)) {
      throw forbidden('Only administrators and services may create users')
    }
  },
  updateUser (caller: Caller | null, userId: string, changesPrivilegedFields: boolean): void {
    const c = requireCaller(caller)
    if (!allowed(WRITE_RULES.updateUser, c, userId)) {
      throw forbidden('Only the user themself or an administrator may update a user')
    }
    if (changesPrivilegedFields && c.role !== 'ADMIN') {
      throw forbidden('Only administrators may change role or adminNotes')
    }
  },
  deleteUser (caller: Caller | null): void {
    if (!allowed(WRITE_RULES.deleteUser, requireCaller(caller), null)) {
      throw forbidden('Only administrators may delete users')
    }
  },
  postMessage (caller: Caller | null): Caller {
    return requireCaller(caller)
  }
}
