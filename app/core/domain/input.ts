// Input rules shared by every transport: the generic caps (string length, list length, page size)
// and the business formats (names, e-mail addresses, room ids).
import { badInput, Messages } from '../errors.ts'

export interface InputCaps {
  maxStringLength: number
  maxListLength: number
  maxPageSize: number
}

/** Walks any input value (arguments, variables, SOAP fields) and rejects over-long strings and lists. */
export function assertWithinCaps (value: unknown, caps: InputCaps, path: string): void {
  if (typeof value === 'string') {
    if (value.length > caps.maxStringLength) {
      throw badInput(Messages.tooLong, { field: path, maxLength: caps.maxStringLength })
    }
  } else if (Array.isArray(value)) {
    if (value.length > caps.maxListLength) {
      throw badInput(`Too many entries in ${path}: at most ${caps.maxListLength}`, {
        field: path,
        maxEntries: caps.maxListLength
      })
    }
    value.forEach((item, i) => assertWithinCaps(item, caps, `${path}[${i}]`))
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) assertWithinCaps(item, caps, `${path}.${key}`)
  }
}

/**
 * The page size of a list read without one (GraphQL's `limit`
 * default, a connection without `first`/`last`, SOAP's ListUsers).
 */
export const DEFAULT_PAGE_SIZE = 20

/** A page size argument (`limit`/`first`): a positive integer no larger than the cap. */
export function assertPageSize (value: number, caps: Pick<InputCaps, 'maxPageSize'>, name = 'limit'): number {
  if (!Number.isInteger(value) || value < 1 || value > caps.maxPageSize) {
    throw badInput(`${name} must be between 1 and ${caps.maxPageSize}`, { field: name, max: caps.maxPageSize })
  }
  return value
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/

// Characters XML 1.0 cannot carry: C0 controls other than tab, LF and CR, U+FFFE/U+FFFF, and lone
// surrogates. No name, address or message needs them, and stored text holding them could not be
// answered over SOAP: refused here, for every transport.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const NOT_TEXT = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** Refuses control and other non-text characters in a stored text field. */
export function assertText (value: string, field: string): string {
  if (NOT_TEXT.test(value)) {
    throw badInput(`${field} holds a control character or another character text cannot carry`, { field })
  }
  return value
}

export function normalizeEmail (value: string): string {
  const email = assertText(value, 'email').trim().toLowerCase()
  if (email.length > 254 || !EMAIL.test(email)) throw badInput('Invalid email address', { field: 'email' })
  return email
}

export function normalizeName (value: string): string {
  const name = assertText(value, 'name').trim()
  if (name.length === 0) throw badInput('Name must not be empty', { field: 'name' })
  if (name.length > 200) throw badInput(Messages.tooLong, { field: 'name', maxLength: 200 })
  return name
}

export function normalizeRoomId (value: string): string {
  if (!/^[A-Za-z0-9_.:-]{1,100}$/.test(value)) throw badInput('Invalid room id: 1 to 100 letters, digits or _ . : -', { field: 'roomId' })
  return value
}

export function normalizeContent (value: string, caps: Pick<InputCaps, 'maxStringLength'>): string {
  if (assertText(value, 'content').trim().length === 0) {
    throw badInput('Message content must not be empty', { field: 'content' })
  }
  if (value.length > caps.maxStringLength) {
    throw badInput(Messages.tooLong, { field: 'content', maxLength: caps.maxStringLength })
  }
  return value
}
