// The README's copy-paste production start, run as written by bash: both secrets, the manifest, a seeded
// store, `npm start` in the background, a persisted GET, and a SIGTERM that stops the service. Only the
// port and the store's path are changed, so the test neither collides with a running service nor
// writes into the repository.
import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { freePort, REPO, runScript } from '../helpers/server-process.ts'

/** The README's ```sh block that starts the production profile. */
function productionStart (): string {
  const blocks = [...readFileSync(`${REPO}/README.md`, 'utf8').matchAll(/```sh\n([^]*?)```/g)].map((m) => m[1]!)
  const block = blocks.find(
    (b) => b.includes('NODE_ENV=production') && b.includes('PARTNER_SECRET_KEY=') && b.includes('npm start')
  )
  if (!block) {
    throw new Error(
      'README: no copy-paste production start (a sh block with NODE_ENV=production, PARTNER_SECRET_KEY and npm start)'
    )
  }
  return block
}

test('the README\'s production start works as written', async (t) => {
  const dir = t.testdir()
  const port = await freePort()
  const block = productionStart()
  t.match(block, /JWT_SECRET=/, 'names JWT_SECRET')
  t.match(block, /PERSISTED_MANIFEST=/, 'names PERSISTED_MANIFEST')
  // The development server the README starts just above listens on 3000: the production block must not.
  const blockPort = /\bPORT=(\d+)/.exec(block)?.[1]
  t.ok(blockPort && blockPort !== '3000', 'sets a PORT of its own, not the development server\'s 3000')
  t.notMatch(block, /:3000\b/, 'and calls no service on 3000')
  const { code, stdout, stderr } = await runScript(block
    .replaceAll(`PORT=${blockPort}`, `PORT=${port}`)
    .replaceAll(`:${blockPort}`, `:${port}`)
    .replaceAll('data/production.db', `${dir}/production.db`))
  t.equal(code, 0, `the block ran to its end:\n${stderr}`)
  // curl's answer has no newline: it runs from '{"data"' to the service's next log line.
  const start = stdout.indexOf('{"data":')
  t.ok(start >= 0, `the persisted query answered:\n${stdout.slice(-2000)}`)
  const end = stdout.indexOf('{"level"', start)
  const answer = JSON.parse(stdout.slice(start, end < 0 ? undefined : end).trim())
  t.equal(answer.data.users.length, 3, 'with the three seeded users')
  t.notOk(answer.errors)
  t.match(stdout, /"signal":"SIGTERM","msg":"shutting down"/, 'kill %1 stopped the service gracefully')
  t.notMatch(stderr, /Configuration:|Could not start|FSTDEP/)
  await t.rejects(fetch(`http://127.0.0.1:${port}/health/live`), 'nothing listens any more')
})
