// `npm run bench -- --target URL`: the benchmark's requests against a deployment it did not start (the
// compose stack through its nginx, a staging URL). It signs USER tokens with the key it is given
// (JWT_SECRET, or JWT_PRIVATE_KEY, with JWT_ALGORITHMS, JWT_ISSUER and JWT_AUDIENCE as the service has
// them), reads the users it asks for from the service itself (the persisted Users operation), and
// checks, before any load, that the service answers, accepts the tokens and knows the operations: each
// of those failing stops the run with one line saying which (TargetRefusal).
import { readFileSync } from 'node:fs'
import { mintToken } from '../cli/mint-token.ts'
import type { SigningConfig } from '../app/config.ts'
import { serviceScenarios, USERS_LIST_QUERY, type BenchData, type HttpScenario } from './scenarios.ts'
import { PERSISTED_MANIFEST, soapScenario } from './transports.ts'

/** Why a run against a target cannot start, in one line for the person who started it. */
export class TargetRefusal extends Error {}

/** The rows a deployment can be load-tested with: reads only (a load test must not change its data). */
export const TARGET_ROWS = ['persisted-get', 'persisted-users-list', 'user-by-id', 'users-list', 'soap-get-user']

interface Operation { id: string; name: string; body: string }

function operationNamed (name: string): Operation {
  const manifest = JSON.parse(readFileSync(PERSISTED_MANIFEST, 'utf8')) as { operations: Operation[] }
  const operation = manifest.operations.find((o) => o.name === name)
  if (!operation) throw new TargetRefusal(`${PERSISTED_MANIFEST} has no ${name} operation`)
  return { ...operation, id: operation.id.startsWith('sha256:') ? operation.id : `sha256:${operation.id}` }
}

interface Answer { status: number; headers: Headers; body: any; text: string }

async function get (url: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  let response: Response
  try {
    response = await fetch(url + path, { headers, signal: AbortSignal.timeout(10_000) })
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause
    throw new TargetRefusal(`${url} does not answer: ${cause?.code ?? cause?.message ?? (err as Error).message}`)
  }
  const text = await response.text()
  let body: any = null
  try { body = JSON.parse(text) } catch { /* not JSON: said below */ }
  return { status: response.status, headers: response.headers, body, text }
}

/** The first error of an answer, as `CODE: message`. */
const firstError = (answer: Answer) => {
  const error = answer.body?.errors?.[0]
  return error ? `${error.extensions?.code ?? 'error'}: ${error.message}` : `HTTP ${answer.status} ${answer.text.slice(0, 200)}`
}

/**
 * What the requests need from the deployment: its users (up to 100, by the persisted Users operation,
 * anonymous), a USER token for each, and proof that it accepts those tokens (UserById as the first user).
 */
export async function targetData (url: string, jwt: SigningConfig, keyInWords: string): Promise<BenchData> {
  const users = operationNamed('Users')
  const listed = await get(url, `/graphql?${new URLSearchParams({ queryId: users.id, variables: JSON.stringify({ limit: 100 }) })}`)
  if (listed.status !== 200 || !Array.isArray(listed.body?.data?.users)) {
    throw new TargetRefusal(`${url} answered the persisted Users operation (${users.id.slice(0, 19)}…) with ${firstError(listed)}` +
      (listed.body?.errors?.[0]?.extensions?.code === 'PERSISTED_QUERY_NOT_FOUND'
        ? ': give the service persisted/manifest.json (PERSISTED_MANIFEST) to load-test it'
        : ''))
  }
  const ids = (listed.body.data.users as { id: string }[]).map((user) => user.id)
  if (ids.length === 0) throw new TargetRefusal(`${url} has no users to read: seed it first (npm run seed)`)
  const data: BenchData = {
    users: ids.map((id) => ({ id, token: mintToken(jwt, id, 'USER') })),
    adminToken: '',
    rooms: ['general', 'random', 'support', 'releases', 'design'],
    runId: `target${Date.now().toString(36)}`,
    persistedUserQueryId: operationNamed('UserById').id
  }
  const [first] = data.users
  const read = await get(url, `/graphql?${new URLSearchParams({ queryId: data.persistedUserQueryId!, variables: JSON.stringify({ id: first!.id }) })}`,
    { authorization: `Bearer ${first!.token}` })
  if (read.status === 401 || read.body?.errors?.[0]?.extensions?.code === 'UNAUTHENTICATED') {
    throw new TargetRefusal(`${url} refused the token signed with ${keyInWords} (${firstError(read)}): give the key it verifies with ` +
      '(JWT_SECRET, or JWT_PRIVATE_KEY; JWT_ALGORITHMS, JWT_ISSUER and JWT_AUDIENCE as the service has them)')
  }
  if (read.status !== 200 || read.body?.data?.user?.id !== first!.id) {
    throw new TargetRefusal(`${url} answered the persisted UserById operation with ${firstError(read)}`)
  }
  return data
}

/**
 * The rows a deployment is load-tested with, made for it: the persisted GETs a mobile app sends, the
 * same reads by POST (skipped when the service takes persisted operations only), and SOAP GetUser when a
 * partner login is given (BENCH_SOAP_LOGIN, BENCH_SOAP_PASSWORD). No row writes.
 */
export function targetScenarios (data: BenchData, adHoc: string | null): HttpScenario[] {
  const byName = new Map(serviceScenarios(data).map((s) => [s.name, s]))
  const users = operationNamed('Users')
  const persistedList: HttpScenario = {
    ...byName.get('users-list')!,
    name: 'persisted-users-list',
    description: 'GET /graphql?queryId=<Users>&variables={"limit":20}, anonymous',
    next: () => ({
      method: 'GET',
      path: `/graphql?${new URLSearchParams({ queryId: users.id, variables: JSON.stringify({ limit: 20 }) })}`,
      headers: {}
    }),
    verify: (_request, response) => {
      if (response.status !== 200) return `HTTP ${response.status}: ${response.body.slice(0, 200)}`
      const list = (JSON.parse(response.body) as { data?: { users?: unknown[] } }).data?.users
      return Array.isArray(list) && list.length > 0 ? null : `no users: ${response.body.slice(0, 200)}`
    }
  }
  const refusedAdHoc = () => adHoc
  const soapLogin = process.env.BENCH_SOAP_LOGIN
  const soapPassword = process.env.BENCH_SOAP_PASSWORD
  if (soapLogin && soapPassword) data.soap = { path: '/v1/UserService', login: soapLogin, password: soapPassword }
  return [
    byName.get('persisted-get')!,
    persistedList,
    { ...byName.get('user-by-id')!, unavailable: refusedAdHoc },
    { ...byName.get('users-list')!, unavailable: refusedAdHoc },
    soapScenario(data, 'no partner login given (set BENCH_SOAP_LOGIN and BENCH_SOAP_PASSWORD)')
  ].map((scenario) => ({ ...scenario, guarded: undefined, env: undefined }))
}

/** Why the deployment cannot run the POST rows (it takes persisted operations only), or null. */
export async function adHocRefusal (url: string): Promise<string | null> {
  let response: Response
  try {
    response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: USERS_LIST_QUERY }),
      signal: AbortSignal.timeout(10_000)
    })
  } catch (err) {
    return (err as Error).message
  }
  const body = await response.json().catch(() => null) as { errors?: { extensions?: { code?: string } }[] } | null
  const code = body?.errors?.[0]?.extensions?.code
  return code ? `the service refuses ad-hoc queries (${code}): it takes persisted operations only` : null
}
