import type { Store } from '../../app/core/store/types.ts'
import { openSqliteStore } from '../../app/core/store/sqlite.ts'

/**
 * Store calls a running app makes on its own, whenever the store reports a change or a timer fires: it
 * follows the change feed, reloads the app deployments' operations (the development manifest published at
 * start is such a change) and writes their usage. They can land while any request is in flight, so they
 * are kept apart (`ownCalls`) from the calls that requests make.
 */
export const APP_OWN_CALLS = new Set([
  'watchChanges', 'listDeployments', 'deploymentOperations', 'recordUsage',
  // It says which profile it runs (at start, every minute, when it stops), read back by publishes.
  'recordServiceInstance', 'forgetServiceInstance', 'serviceProfiles'
])

/**
 * A store whose every call is recorded: every resolver of the schema reads or writes through the
 * store, so "no store call" proves "no resolver ran". `calls` holds what requests (and the test) call;
 * `ownCalls` what the app calls on its own (APP_OWN_CALLS).
 */
export function countingStore (store: Store = openSqliteStore(':memory:')) {
  const calls: { method: string; args: unknown[] }[] = []
  const ownCalls: { method: string; args: unknown[] }[] = []
  const counted = new Proxy(store, {
    get (target, property, receiver) {
      const value = Reflect.get(target, property, receiver)
      if (typeof value !== 'function') return value
      const method = String(property)
      const into = APP_OWN_CALLS.has(method) ? ownCalls : calls
      return (...args: unknown[]) => {
        into.push({ method, args })
        return value.apply(target, args)
      }
    }
  })
  return { store: counted, calls, ownCalls }
}

/** Store calls that authenticate a SOAP partner (by password or by certificate): no domain work. */
export const AUTHENTICATION_CALLS = new Set([
  'findCredentials', 'findCertificate', 'findCertificateByThumbprint', 'findCertificateByIssuerSerial'
])

/** The methods of `calls` that did a request's domain work (authentication left out). */
export function domainMethods (calls: readonly { method: string }[]): string[] {
  return calls.map((c) => c.method).filter((m) => !AUTHENTICATION_CALLS.has(m))
}
