// Development logs are for a person at a terminal: one readable line per request (time, level, method,
// path, status, duration, request id), no JSON, no headers. Production keeps its JSON lines, formatted on
// a path of their own (test/lifecycle.test.ts, test/ops/metrics.test.ts).
import { test } from 'tap'
import { startService } from '../helpers/server-process.ts'

test('development (debug, the default level): one readable line per request, without headers', async (t) => {
  const dir = t.testdir()
  const service = await startService(t, { PORT: '0', HOST: '127.0.0.1', SQLITE_PATH: `${dir}/service.db` })
  const answer = await fetch(`${service.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-test-header': 'header-value-0123' },
    body: JSON.stringify({ query: '{ users(limit: 1) { id } }' })
  })
  t.equal(answer.status, 200)
  const requestId = answer.headers.get('x-request-id')!
  await answer.arrayBuffer()
  service.child.kill('SIGTERM')
  t.equal(await service.exited, 0)

  const lines = service.stdout().trim().split('\n')
  const about = lines.filter((line) => line.includes('/graphql'))
  t.equal(about.length, 1, `one line for the request:\n${service.stdout()}`)
  t.match(about[0], new RegExp(`^\\d\\d:\\d\\d:\\d\\d\\.\\d{3} INFO  POST /graphql 200 [\\d.]+ ms \\(${requestId}\\)$`), 'readable')
  t.same(lines.filter((line) => line.startsWith('{')), [], 'no JSON line')
  t.notMatch(service.stdout(), 'header-value-0123', 'no header')
  t.match(service.stdout(), /INFO {2}shutting down signal=SIGTERM\n.*INFO {2}shut down/, 'the other lines are readable too')
})
