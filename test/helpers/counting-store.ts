import type { Store } from '../../app/store/types.ts'
import { openSqliteStore } from '../../app/store/sqlite.ts'

/**
 * A store whose every call is recorded: every resolver of the schema reads or writes through the
 * store, so "no store call" proves "no resolver ran".
 */
export function countingStore (store: Store = openSqliteStore(':memory:')) {
  const calls: { method: string; args: unknown[] }[] = []
  const counted = new Proxy(store, {
    get (target, property, receiver) {
      const value = Reflect.get(target, property, receiver)
      if (typeof value !== 'function') return value
      return (...args: unknown[]) => {
        calls.push({ method: String(property), args })
        return value.apply(target, args)
      }
    }
  })
  return { store: counted, calls }
}
