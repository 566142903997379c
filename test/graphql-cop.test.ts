// graphql-cop's twelve checks (the security audit people run against GraphQL endpoints), reproduced
// request for request against a listening server in both production modes: persisted-only (the
// default) and PERSISTED_ONLY=false (ad-hoc queries allowed). Each check reports a finding when the
// answer is what graphql-cop counts as vulnerable; the target is none in either mode.
import { test } from 'tap'
import { listenTestApp } from './helpers/app.ts'
import { MANIFEST_FILE, NO_SHEDDING } from './persisted/helpers.ts'

interface Answer { status: number; text: string; json: any }

async function send (url: string, init: RequestInit & { path?: string } = {}): Promise<Answer> {
  const response = await fetch(`${url}${init.path ?? '/graphql'}`, init)
  const text = await response.text()
  let json: any
  try { json = JSON.parse(text) } catch { json = undefined }
  return { status: response.status, text, json }
}

const postJson = (url: string, body: unknown) =>
  send(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
const getQuery = (url: string, query: string) => send(url, { path: `/graphql?query=${encodeURIComponent(query)}` })

/** graphql-cop's checks, as it sends them, each with its own test of vulnerability on the answer. */
const CHECKS: Record<string, (url: string) => Promise<{ vulnerable: boolean; answer: Answer }>> = {
  // Alias Overloading: 101 aliases of __typename; vulnerable when the 101st is answered.
  async 'alias overloading' (url) {
    const aliases = Array.from({ length: 101 }, (_, i) => `alias${i}:__typename`).join(' \n')
    const answer = await postJson(url, { query: `query cop { ${aliases} }` })
    return { vulnerable: answer.json?.data?.alias100 !== undefined, answer }
  },
  // Array-based Query Batching: ten queries in a JSON array; vulnerable when answered with an array of ten.
  async 'array batching' (url) {
    const answer = await postJson(url, Array.from({ length: 10 }, () => ({ query: 'query cop { __typename }' })))
    return { vulnerable: Array.isArray(answer.json) && answer.json.length >= 10, answer }
  },
  // Directive Overloading: ten unknown directives on one field; vulnerable when answered with ten errors.
  async 'directive overloading' (url) {
    const answer = await postJson(url, { query: `query cop { __typename ${'@aa'.repeat(10)} }` })
    return { vulnerable: (answer.json?.errors?.length ?? 0) >= 10, answer }
  },
  // Field Suggestions: a misspelt field; vulnerable when the answer suggests the right one.
  async 'field suggestions' (url) {
    const answer = await postJson(url, { query: 'query cop { __schema { directive } }' })
    const answer2 = await postJson(url, { query: 'query cop { usr(id: "1") { id } }' })
    return { vulnerable: /Did you mean/i.test(answer.text + answer2.text), answer: answer2 }
  },
  // GET based Queries: an ad-hoc query by GET; vulnerable when it runs.
  async 'GET-based queries' (url) {
    const answer = await getQuery(url, 'query cop { __typename }')
    return { vulnerable: answer.json?.data?.__typename !== undefined, answer }
  },
  // GET based Mutation: a mutation by GET (CSRF); vulnerable when it runs.
  async 'GET-based mutation' (url) {
    const answer = await getQuery(url, 'mutation cop { __typename }')
    return { vulnerable: answer.json?.data !== undefined && answer.json?.data !== null, answer }
  },
  // POST based url-encoded query (CSRF): a form body; vulnerable when it runs.
  async 'POST url-encoded' (url) {
    const answer = await send(url, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: `query=${encodeURIComponent('query cop { __typename }')}`
    })
    return { vulnerable: answer.json?.data?.__typename !== undefined, answer }
  },
  // Introspection: the schema's types; vulnerable when an anonymous caller gets them.
  async introspection (url) {
    const answer = await postJson(url, { query: 'query cop { __schema { types { name fields { name } } } }' })
    return { vulnerable: Array.isArray(answer.json?.data?.__schema?.types), answer }
  },
  // Introspection-based circular query: a deep cycle through the schema's own types.
  async 'circular introspection' (url) {
    const answer = await postJson(url, {
      query:
        'query cop { __schema { types { fields { type { fields { type { fields { type { fields { type { name } } } } } } } } } } }'
    })
    return { vulnerable: answer.json?.data?.__schema !== undefined && answer.json?.data?.__schema !== null, answer }
  },
  // Trace Mode and Debug Mode: an answer carrying tracing extensions, or errors with stack traces or exceptions.
  async 'trace/debug mode' (url) {
    const answers = [
      await postJson(url, { query: 'query cop { __typename }' }),
      await postJson(url, { query: 'query cop { __typename ' }),
      await send(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"query": ' })
    ]
    const leaks = answers.some((a) => /stacktrace|"exception"|"tracing"|"debug"|\bat \S+ \(/i.test(a.text))
    return { vulnerable: leaks, answer: answers[1]! }
  },
  // GraphQL IDE: GraphiQL, Playground and friends at their usual paths; vulnerable when one is served.
  async 'GraphiQL / query UI' (url) {
    for (const path of ['/graphiql', '/playground', '/graphql', '/altair', '/voyager', '/console', '/graphiql/query-ui.js']) {
      const answer = await send(url, { path, headers: { accept: 'text/html' } })
      if (answer.status === 200 && /graphiql|graphql-playground|query-ui|<html/i.test(answer.text)) return { vulnerable: true, answer }
    }
    return { vulnerable: false, answer: await send(url, { path: '/graphiql', headers: { accept: 'text/html' } }) }
  },
  // GET based queries once more, wrapped as an automatic registration (the APQ path): must not run either.
  async 'GET-based query wrapped as an APQ registration' (url) {
    const text = 'query cop { __typename }'
    const { createHash } = await import('node:crypto')
    const extensions = JSON.stringify({
      persistedQuery: { version: 1, sha256Hash: createHash('sha256').update(text).digest('hex') }
    })
    const answer = await send(url, {
      path: `/graphql?query=${encodeURIComponent(text)}&extensions=${encodeURIComponent(extensions)}`
    })
    return { vulnerable: answer.json?.data?.__typename !== undefined, answer }
  }
}

const MODES: Record<string, Record<string, string>> = {
  'persisted-only production': { NODE_ENV: 'production', PERSISTED_MANIFEST: MANIFEST_FILE, ...NO_SHEDDING },
  'production with PERSISTED_ONLY=false': { NODE_ENV: 'production', PERSISTED_ONLY: 'false', ...NO_SHEDDING }
}

for (const [mode, env] of Object.entries(MODES)) {
  test(`graphql-cop finds nothing: ${mode}`, async (t) => {
    const { url } = await listenTestApp(t, { ...env, RATE_LIMIT_REQUESTS: '1000' })
    const findings: string[] = []
    for (const [name, check] of Object.entries(CHECKS)) {
      const { vulnerable, answer } = await check(url)
      t.notOk(vulnerable, `${name}: not vulnerable (${answer.status} ${answer.text.slice(0, 160)})`)
      if (vulnerable) findings.push(name)
      // Every refusal is in the interface's shape with a code (a 404 for an IDE path included).
      if (answer.json?.errors) {
        t.ok(
          answer.json.errors.every((e: any) => typeof e.extensions?.code === 'string'),
          `${name}: refused with a code`
        )
      }
    }
    t.same(findings, [], 'no findings')
  })
}

test('what graphql-cop\'s requests get, check by check, with ad-hoc queries allowed in production', async (t) => {
  const { url } = await listenTestApp(t, {
    NODE_ENV: 'production',
    PERSISTED_ONLY: 'false',
    RATE_LIMIT_REQUESTS: '1000',
    ...NO_SHEDDING
  })
  const codes = async (name: string) =>
    (await CHECKS[name]!(url)).answer.json?.errors?.map((e: any) => e.extensions.code)
  t.same(await codes('alias overloading'), ['ALIAS_LIMIT_EXCEEDED'])
  t.same(await codes('array batching'), ['BAD_REQUEST'])
  t.same(await codes('directive overloading'), ['DIRECTIVE_LIMIT_EXCEEDED'])
  t.same(await codes('GET-based queries'), ['METHOD_NOT_ALLOWED'])
  t.same(await codes('GET-based mutation'), ['METHOD_NOT_ALLOWED'])
  t.same(await codes('POST url-encoded'), ['UNSUPPORTED_MEDIA_TYPE'])
  t.same(await codes('introspection'), ['INTROSPECTION_DISABLED'])
  t.same(await codes('GraphiQL / query UI'), ['NOT_FOUND'])
  const suggestion = await CHECKS['field suggestions']!(url)
  t.match(suggestion.answer.json, { errors: [{ message: /Cannot query field "usr" on type "Query"\.$/, extensions: { code: 'GRAPHQL_VALIDATION_FAILED' } }] }, 'the error, without its suggestion')
})

test('persisted-only production: graphql-cop\'s ad-hoc requests are refused once each, before anything is parsed', async (t) => {
  const { url } = await listenTestApp(t, {
    NODE_ENV: 'production',
    PERSISTED_MANIFEST: MANIFEST_FILE,
    RATE_LIMIT_REQUESTS: '1000',
    MAX_BATCH_SIZE: '10',
    ...NO_SHEDDING
  })
  // Even with batches turned on, a batch of ad-hoc queries is one refusal, not ten.
  const batch = (await CHECKS['array batching']!(url)).answer
  t.notOk(Array.isArray(batch.json))
  t.same(batch.json.errors.map((e: any) => e.extensions.code), ['PERSISTED_QUERY_REQUIRED'])
  for (const name of ['alias overloading', 'directive overloading', 'introspection', 'field suggestions']) {
    t.same(
      (await CHECKS[name]!(url)).answer.json.errors.map((e: any) => e.extensions.code),
      ['PERSISTED_QUERY_REQUIRED'],
      name
    )
  }
})
