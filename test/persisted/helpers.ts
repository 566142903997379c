// Shared by the persisted-query tests: the example manifest (persisted/manifest.json, built from
// persisted/operations) and requests in the two persisted forms.
import { readFileSync } from 'node:fs'
import type { ApolloManifest } from '../../app/graphql/persisted-manifest.ts'

export const MANIFEST_FILE = new URL('../../persisted/manifest.json', import.meta.url).pathname
export const OPERATIONS_DIR = new URL('../../persisted/operations', import.meta.url).pathname
export const manifest = JSON.parse(readFileSync(MANIFEST_FILE, 'utf8')) as ApolloManifest

/** `sha256:<hex>` of a manifest operation, by name. */
export function queryIdOf (name: string): string {
  const op = manifest.operations.find((o) => o.name === name)
  if (!op) throw new Error(`no operation ${name} in ${MANIFEST_FILE}`)
  return `sha256:${op.id}`
}

/** Apollo Client's HttpLink sends this on GET too (not required: see routes/graphql/http-exchange.ts). */
export const PREFLIGHT = { 'content-type': 'application/json' }

export function persistedGetUrl (
  url: string,
  queryId: string,
  variables?: Record<string, unknown>,
  extra: Record<string, string> = {}
): string {
  const params = new URLSearchParams({
    queryId,
    ...(variables ? { variables: JSON.stringify(variables) } : {}),
    ...extra
  })
  return `${url}/graphql?${params}`
}

export async function getPersisted (
  url: string,
  queryId: string,
  variables?: Record<string, unknown>,
  headers: Record<string, string> = {}
) {
  const response = await fetch(persistedGetUrl(url, queryId, variables), { headers: { ...PREFLIGHT, ...headers } })
  const text = await response.text()
  return { status: response.status, headers: response.headers, text, body: text ? JSON.parse(text) : undefined }
}

export async function postJson (url: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body)
  })
  return { status: response.status, headers: response.headers, body: await response.json() as any }
}

/**
 * Load shedding off: with tap running files in parallel, module loading and compilation can stall
 * the event loop past its threshold right after start, and requests would get 503 (that behaviour
 * is tested with the ops plugin, not here).
 */
export const NO_SHEDDING = { PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0' }
