// The pipeline's rules as plain objects (no server, no store): the obvious place a change to one of them
// fails. Admission: which operation types each transport carries, introspection, the order of the charges
// (nothing is charged for a refused operation), and that only an admitted request counts for its app
// deployment. Execution: the deadline, the caller the resolvers see. The instruments wrap each phase once.
// (Through listening servers and real clients: test/admission.test.ts, test/deadlines.test.ts.)
import { test } from 'tap'
import { buildSchema, OperationTypeNode } from 'graphql'
import { AppError } from '../app/core/errors.ts'
import type { Caller, DomainDeps } from '../app/core/domain/context.ts'
import type { CostReport } from '../app/core/limits/cost-report.ts'
import { createAdmission, createExecution, createPipeline, type Admission, type OperationRequest } from '../app/graphql/pipeline.ts'
import { createPlans } from '../app/graphql/plans.ts'
import type { ClientApp, PersistedOperation, PersistedQueries } from '../app/graphql/persisted.ts'
import { schemaSDL } from '../app/graphql/schema.ts'
import { testConfig } from './helpers/app.ts'
import { operationLimits } from '../app/graphql/operation-limits.ts'

const USERS = 'query Users { users(limit: 2) { id name } }'
const RENAME = 'mutation Rename { updateUser(id: "1", input: { name: "x" }) { id } }'
const COUNT = 'subscription Count { count(target: 2) }'
const INTROSPECTION = '{ __schema { queryType { name } } }'

/** Admission over plain objects: its charges and the usage it counts are recorded. */
function pipelineOf (options: { introspection?: boolean; refuseCharge?: boolean } = {}) {
  const schema = buildSchema(schemaSDL)
  const limits = operationLimits(testConfig())
  const charged: { caller: string | null; cost: number }[] = []
  const spentRequests: string[] = []
  const counted: { id: string; client: ClientApp | null }[] = []
  const deployed = new Map<string, PersistedOperation>([['sha256:users', { id: 'sha256:users', text: USERS, name: 'Users', type: OperationTypeNode.QUERY }]])
  const persisted: Pick<PersistedQueries, 'resolve' | 'countUse'> = {
    async resolve (params) {
      const operation = typeof params.documentId === 'string' ? deployed.get(params.documentId) : undefined
      if (operation) return { text: operation.text, registered: true, introspectionOnly: false, deployed: operation }
      return { text: params.query as string, registered: false, introspectionOnly: false }
    },
    countUse: (operation, client) => { counted.push({ id: operation.id, client }) }
  }
  const admission = createAdmission({
    schema: () => schema,
    limits,
    introspection: options.introspection ?? true,
    plans: createPlans(() => schema, limits),
    persisted,
    async spendRequest (caller) { spentRequests.push(caller?.id ?? 'anonymous') },
    chargeCost (caller: Caller | null, _ip: string, cost: number): CostReport {
      if (options.refuseCharge) throw new AppError('RATE_LIMITED', 'Rate limit exceeded')
      charged.push({ caller: caller?.id ?? null, cost })
      return { requested: cost, budget: 1000, remaining: 1000 - cost }
    }
  })
  const admit = (query: Partial<OperationRequest> & { params: OperationRequest['params'] }) =>
    admission.admit({ transport: 'POST', caller: null, ip: '127.0.0.1', ...query })
  return { admit, charged, spentRequests, counted }
}

const codeOf = async (promise: Promise<unknown>) => promise.then(() => 'admitted', (err: AppError) => err.code)

test('each transport carries the operation types it may; a refused one is charged nothing', async (t) => {
  const { admit, charged } = pipelineOf()
  t.equal(await codeOf(admit({ params: { query: RENAME }, transport: 'GET' })), 'METHOD_NOT_ALLOWED', 'a mutation by GET')
  t.equal(await codeOf(admit({ params: { query: COUNT }, transport: 'POST' })), 'BAD_REQUEST', 'a subscription by a plain POST')
  t.same(charged, [], 'neither was charged')
  t.equal(await codeOf(admit({ params: { query: COUNT }, transport: 'WS' })), 'admitted', 'a subscription over WebSocket')
  t.equal(await codeOf(admit({ params: { query: RENAME }, transport: 'POST' })), 'admitted', 'a mutation by POST')
})

test('an admitted operation is charged once, at its price, and carries its cost report', async (t) => {
  const { admit, charged, spentRequests } = pipelineOf()
  const admission = await admit({ params: { query: USERS }, caller: { id: '7', role: 'USER' } })
  t.equal(charged.length, 1)
  t.equal(charged[0]!.caller, '7')
  t.ok(charged[0]!.cost > 0, `priced at ${charged[0]!.cost}`)
  t.same(admission.cost, { requested: charged[0]!.cost, budget: 1000, remaining: 1000 - charged[0]!.cost })
  t.same(spentRequests, [], 'an HTTP request has paid for itself at its route')
  await admit({ params: { query: USERS }, transport: 'WS' })
  t.same(spentRequests, ['anonymous'], 'an operation over WebSocket spends a request of its own')
})

test('introspection is refused when off, but for administrators', async (t) => {
  const { admit, charged } = pipelineOf({ introspection: false })
  t.equal(await codeOf(admit({ params: { query: INTROSPECTION } })), 'INTROSPECTION_DISABLED')
  t.same(charged, [])
  t.equal(await codeOf(admit({ params: { query: INTROSPECTION }, caller: { id: '1', role: 'ADMIN' } })), 'admitted')
})

test('only an admitted request counts for its app deployment, with the app it names', async (t) => {
  const ios = { name: 'ios', version: '1' }
  const admitted = pipelineOf()
  await admitted.admit({ params: { documentId: 'sha256:users' }, client: ios })
  await admitted.admit({ params: { query: USERS } })
  t.same(admitted.counted, [{ id: 'sha256:users', client: ios }], 'the deployed operation, once; an ad-hoc text counts for none')
  const refused = pipelineOf({ refuseCharge: true })
  t.equal(await codeOf(refused.admit({ params: { documentId: 'sha256:users' }, client: ios })), 'RATE_LIMITED')
  t.same(refused.counted, [], 'a request its budget refused counts for nobody')
})

/** An admission of `text` as admission makes it, over a schema whose resolvers the test gives. */
async function admittedOver (schema: ReturnType<typeof buildSchema>, text: string): Promise<Admission> {
  const limits = operationLimits(testConfig())
  const admission = createAdmission({
    schema: () => schema,
    limits,
    introspection: true,
    plans: createPlans(() => schema, limits),
    persisted: {
      async resolve (params) { return { text: params.query as string, registered: false, introspectionOnly: false } },
      countUse () {}
    },
    async spendRequest () {},
    chargeCost: (_caller, _ip, cost) => ({ requested: cost, budget: 1000, remaining: 1000 - cost })
  })
  return admission.admit({ params: { query: text }, transport: 'POST', caller: { id: '7', role: 'USER' }, ip: '127.0.0.1' })
}

test('execution: an answer past the deadline is "Query timeout" (TIMEOUT); the resolvers see the caller asked for', async (t) => {
  const schema = buildSchema('type Query { slow: String, viewer: String }')
  const seenBy: (string | null)[] = []
  const fields = schema.getQueryType()!.getFields()
  fields.slow!.resolve = () => new Promise((resolve) => setTimeout(() => resolve('late'), 200))
  fields.viewer!.resolve = (_root, _args, context: { domain: { caller: Caller | null } }) => {
    seenBy.push(context.domain.caller?.id ?? null)
    return 'seen'
  }
  const domain = { caps: testConfig().input } as unknown as DomainDeps
  const execution = createExecution({ schema: () => schema, timeoutMs: 50, domain })
  const slow = await execution.execute(await admittedOver(schema, '{ slow }'))
  t.same(slow.data, null)
  t.equal(slow.errors?.[0]?.message, 'Query timeout')
  t.equal(slow.errors?.[0]?.extensions?.code, 'TIMEOUT')
  const viewer = await admittedOver(schema, '{ viewer }')
  t.same((await execution.execute(viewer)).data, { viewer: 'seen' }, 'a synchronous answer is complete at once')
  await execution.execute(viewer, undefined, undefined, null)
  t.same(seenBy, ['7', null], "the admission's caller, then the one the answer is shared as (nobody)")
})

test('the instruments wrap each phase once, and every carrier runs the wrapped ones', async (t) => {
  const schema = buildSchema(schemaSDL)
  const limits = operationLimits(testConfig())
  const calls: string[] = []
  const pipeline = createPipeline({
    schema: () => schema,
    limits,
    introspection: true,
    timeoutMs: limits.timeoutMs,
    domain: {} as DomainDeps,
    plans: createPlans(() => schema, limits),
    persisted: {
      async resolve (params) { return { text: params.query as string, registered: false, introspectionOnly: false } },
      countUse () {}
    },
    async spendRequest () {},
    chargeCost: (_caller, _ip, cost) => ({ requested: cost, budget: 1000, remaining: 1000 - cost }),
    instrumentation: {
      phases: (phases) => ({
        admit: (request) => { calls.push('admit'); return phases.admit(request) },
        execute: (...args) => { calls.push('execute'); return phases.execute(...args) },
        subscribe: (admission) => { calls.push('subscribe'); return phases.subscribe(admission) },
        cached: (admission, outcome) => { calls.push(`cached ${outcome}`); phases.cached(admission, outcome) }
      })
    }
  })
  const admitted = await pipeline.admission.admit({ params: { query: USERS }, transport: 'POST', caller: null, ip: '127.0.0.1' })
  pipeline.execution.cached(admitted, 'miss')
  t.equal(await pipeline.admission.operationType({ query: USERS }, null), 'query', 'asking the type is no phase')
  t.same(calls, ['admit', 'cached miss'])
})
