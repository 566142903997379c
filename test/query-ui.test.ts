// The development query UI: served only when enabled (never in production), under a 'self'-only CSP,
// and usable in a real browser (Debian's chromium, headless, driven by playwright-core) with nothing
// loaded from outside the service.
import { test } from 'tap'
import type { Page } from 'playwright-core'
import { buildTestApp, listenTestApp } from './helpers/app.ts'
import { launchChromium } from './helpers/chromium.ts'
import { QUERY_UI_CSP, QUERY_UI_PATH } from '../routes/query-ui.ts'

const ASSETS = [QUERY_UI_PATH, `${QUERY_UI_PATH}/query-ui.js`, `${QUERY_UI_PATH}/query-ui.css`]

test('production: the query UI does not exist', async (t) => {
  const { url } = await listenTestApp(t, { NODE_ENV: 'production' })
  for (const path of [...ASSETS, '/graphiql/', '/graphiql/main.js']) {
    const response = await fetch(`${url}${path}`)
    t.equal(response.status, 404, `${path}: 404`)
    t.match(await response.json(), { errors: [{ message: /not found/, extensions: { code: 'NOT_FOUND' } }] }, `${path}: GraphQL error shape`)
  }
})

test('production refuses to start with QUERY_UI=true', async (t) => {
  await t.rejects(buildTestApp(t, { NODE_ENV: 'production', QUERY_UI: 'true' }), /QUERY_UI cannot be turned on in production/)
})

test('development with QUERY_UI=false: no query UI', async (t) => {
  const { url } = await listenTestApp(t, { QUERY_UI: 'false' })
  t.equal((await fetch(`${url}${QUERY_UI_PATH}`)).status, 404)
})

test('development: the page and its assets, under a self-only Content-Security-Policy', async (t) => {
  const { url } = await listenTestApp(t)
  const types = [/^text\/html; charset=utf-8/, /^text\/javascript; charset=utf-8/, /^text\/css; charset=utf-8/]
  for (const [i, path] of ASSETS.entries()) {
    const response = await fetch(`${url}${path}`)
    t.equal(response.status, 200, `${path}: 200`)
    t.match(response.headers.get('content-type'), types[i]!, `${path}: content type`)
    t.equal(response.headers.get('content-security-policy'), QUERY_UI_CSP, `${path}: CSP`)
    t.equal(response.headers.get('x-content-type-options'), 'nosniff')
    const text = await response.text()
    t.notMatch(text, /https?:\/\//, `${path}: refers to no absolute URL (no CDN)`)
  }
  t.match(QUERY_UI_CSP, /default-src 'none'/)
  t.match(QUERY_UI_CSP, /script-src 'self'(;|$)/)
  t.notMatch(QUERY_UI_CSP, /unsafe-inline|unsafe-eval|https?:|\*/)
})

/** Fills the editors, clicks Run and returns the result pane's JSON once the request has finished. */
async function runQuery (page: Page, query: string, token = ''): Promise<any> {
  await page.fill('#query', query)
  await page.fill('#token', token)
  await page.click('#run')
  await page.waitForFunction(() => {
    const document = (globalThis as any).document // runs in the page; the test's TypeScript has no DOM types
    return !document.getElementById('run').disabled && document.getElementById('result').textContent !== ''
  })
  return JSON.parse(await page.textContent('#result') ?? 'null')
}

test('browser: open the UI, run a query and see its result, with nothing loaded from elsewhere', async (t) => {
  const context = await launchChromium(t)
  if (!context) return
  const { url, token } = await listenTestApp(t)
  const origin = new URL(url).origin

  // Every request the page makes is recorded; any that would leave the service is aborted and reported.
  const requested: string[] = []
  await context.route('**/*', (route) => {
    const target = route.request().url()
    requested.push(target)
    return target.startsWith(`${origin}/`) ? route.continue() : route.abort()
  })
  const problems: string[] = []
  const page = context.pages()[0] ?? await context.newPage()
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))
  page.on('console', (message) => { if (/Content Security Policy/i.test(message.text())) problems.push(`CSP: ${message.text()}`) })

  const response = await page.goto(`${url}${QUERY_UI_PATH}`)
  t.equal(response?.status(), 200)
  t.equal(await page.title(), 'GraphQL query UI (development)')

  // The schema list comes from introspection on load.
  await page.waitForSelector('#schema .field')
  t.ok(await page.isVisible('#schema >> text=users'), 'the schema list shows the users field')

  const anonymous = await runQuery(page, '{ users { id name } }')
  t.same(
    anonymous.data.users.map((u: { name: string }) => u.name),
    ['Admin', 'Ada Lovelace', 'Alan Turing', 'Grace Hopper', 'Partner Inc.']
  )
  t.match(await page.textContent('#result'), /"name": "Ada Lovelace"/, 'the result pane shows the demo users')
  t.match(await page.textContent('#status'), /^HTTP 200/)

  // The token box: email is visible to administrators only.
  const withoutToken = await runQuery(page, '{ user(id: "2") { name email } }')
  t.same(withoutToken.data.user, { name: 'Ada Lovelace', email: null })
  t.match(withoutToken.errors, [{ extensions: { code: 'UNAUTHENTICATED' } }])
  t.match(await page.textContent('#status'), /with errors/)
  const asAdmin = await runQuery(page, '{ user(id: "2") { name email } }', token('1', 'ADMIN'))
  t.same(asAdmin, {
    data: { user: { name: 'Ada Lovelace', email: 'ada@example.com' } },
    extensions: asAdmin.extensions
  })

  t.same(problems, [], 'no script errors and no CSP violations')
  t.ok(requested.length >= 5, 'the page, its two assets, the schema and the queries were requested')
  t.same(requested.filter((u) => !u.startsWith(`${origin}/`)), [], `no request left ${origin}`)
})

test('browser: a subscription runs over server-sent events, each event shown as it arrives; Stop ends it', async (t) => {
  const context = await launchChromium(t)
  if (!context) return
  const { url, app } = await listenTestApp(t)
  const page = context.pages()[0] ?? await context.newPage()
  const problems: string[] = []
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`))
  page.on('console', (message) => { if (/Content Security Policy/i.test(message.text())) problems.push(`CSP: ${message.text()}`) })
  await page.goto(`${url}${QUERY_UI_PATH}`)
  await page.waitForSelector('#schema .field')
  // The page runs in the browser: its DOM is reached through globalThis (the test's TypeScript has no DOM types).
  const statusIs = (pattern: string) => page.waitForFunction((source) =>
    new RegExp(source).test((globalThis as any).document.getElementById('status').textContent), pattern)

  await page.fill('#query', '# counts to three\nsubscription { count(target: 3) }')
  await page.click('#run')
  await statusIs('^Subscribed · 1 event$')
  t.equal(await page.textContent('#run'), 'Stop', 'while it runs, the button stops it')
  await statusIs('^Subscription complete · 3 events$')
  const shown = await page.textContent('#result') ?? ''
  const payloads = shown.split(/^# event \d+ \(\d+\.\d s\)$/m).slice(1).map((text) => JSON.parse(text))
  t.same(payloads, [{ data: { count: 0 } }, { data: { count: 1 } }, { data: { count: 2 } }], 'the three events, in order')
  t.equal(await page.textContent('#run'), 'Run')

  await page.fill('#query', 'subscription { count(target: 100) }')
  await page.click('#run')
  await statusIs('^Subscribed · 2 events$')
  t.equal(app.graphqlInspection.subscriptionStats().eventStreams, 1, 'one event stream open on the server')
  await page.click('#run')
  await statusIs('^Stopped · 2 events$')
  for (let i = 0; app.graphqlInspection.subscriptionStats().eventStreams !== 0; i++) {
    if (i > 100) throw new Error('the stream stayed open on the server')
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  t.pass('Stop ended the stream on the server too')

  await page.fill('#query', 'subscription { count(target: 3) }')
  await page.fill('#token', 'not-a-token')
  await page.click('#run')
  await statusIs('^HTTP 401 · subscription refused$')
  t.match(JSON.parse(await page.textContent('#result') ?? 'null'), { errors: [{ extensions: { code: 'UNAUTHENTICATED' } }] })
  t.same(problems, [], 'no script errors and no CSP violations')
})
