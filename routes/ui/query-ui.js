// The development query UI: sends the query, variables and an optional bearer token to POST /graphql
// (same origin, application/json) and shows the response; a subscription runs over server-sent events
// (the same POST with Accept: text/event-stream, graphql-sse's distinct connections mode), each event
// shown as it arrives until the stream completes or Stop ends it; lists the schema through introspection.
// Plain browser JavaScript with no dependencies, so it works offline and under a 'self'-only CSP.
// Results and schema text are written with textContent, never as HTML.
'use strict'

const $ = (id) => document.getElementById(id)
const queryBox = $('query')
const variablesBox = $('variables')
const tokenBox = $('token')
const runButton = $('run')
const statusLine = $('status')
const resultPane = $('result')
const schemaPane = $('schema')

// The query and variables survive a reload; the token is never stored.
const STORAGE_KEY = 'query-ui:draft'
try {
  const draft = JSON.parse(localStorage.getItem(STORAGE_KEY) ?? 'null')
  if (draft && typeof draft.query === 'string' && draft.query.trim() !== '') queryBox.value = draft.query
  if (draft && typeof draft.variables === 'string') variablesBox.value = draft.variables
} catch { /* storage unavailable or corrupt: start from the defaults */ }

function saveDraft () {
  try {
    localStorage.setItem(STORAGE_KEY, JSON.stringify({ query: queryBox.value, variables: variablesBox.value }))
  } catch {
    /* ignore */
  }
}

/** The POST /graphql of a request, answered as `accept` (JSON, or an event stream for a subscription). */
function graphQLRequest (query, variables, accept, signal) {
  const headers = { 'content-type': 'application/json', accept }
  const token = tokenBox.value.trim().replace(/^Bearer\s+/i, '')
  if (token !== '') headers.authorization = `Bearer ${token}`
  return fetch('/graphql', {
    method: 'POST',
    headers,
    body: JSON.stringify(variables === undefined ? { query } : { query, variables }),
    credentials: 'omit',
    signal
  })
}

/** POSTs a GraphQL request; resolves to { status, body } where body is parsed JSON (or the raw text). */
async function postGraphQL (query, variables) {
  const response = await graphQLRequest(query, variables, 'application/json')
  const text = await response.text()
  let body
  try { body = JSON.parse(text) } catch { body = text }
  return { status: response.status, body }
}

function parseVariables () {
  const text = variablesBox.value.trim()
  if (text === '') return undefined
  const value = JSON.parse(text)
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new Error('Variables must be a JSON object')
  }
  return value
}

function showStatus (text, failed) {
  statusLine.textContent = text
  statusLine.classList.toggle('failed', failed)
}

/** Whether the document's first operation is a subscription (comments and blank space before it skipped). */
function isSubscription (query) {
  return /^(?:\s|,|#[^\n]*\n?)*subscription\b/.test(query)
}

/** The running subscription's stream, while one runs: Stop (the Run button) aborts it. */
let streaming = null

/**
 * Runs a subscription as an event stream: each `next` event's payload is appended to the result pane
 * as it arrives, until `complete` or Stop. The status line counts the events.
 */
async function subscribe (query, variables) {
  const controller = new AbortController()
  streaming = controller
  runButton.textContent = 'Stop'
  const started = performance.now()
  let events = 0
  let failed = false
  const show = (payload) => {
    events++
    const seconds = ((performance.now() - started) / 1000).toFixed(1)
    const errors = Array.isArray(payload?.errors) && payload.errors.length > 0
    failed ||= errors
    resultPane.textContent += `${events > 1 ? '\n' : ''}# event ${events} (${seconds} s)\n${JSON.stringify(payload, null, 2)}\n`
    resultPane.classList.toggle('has-errors', failed)
    showStatus(`Subscribed · ${events} event${events === 1 ? '' : 's'}`, failed)
  }
  try {
    const response = await graphQLRequest(query, variables, 'text/event-stream', controller.signal)
    if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      // Refused before any event (a bad token, a limit): the answer is a JSON error.
      const text = await response.text()
      let body
      try { body = JSON.parse(text) } catch { body = text }
      resultPane.textContent = typeof body === 'string' ? body : JSON.stringify(body, null, 2)
      resultPane.classList.add('has-errors')
      showStatus(`HTTP ${response.status} · subscription refused`, true)
      return
    }
    showStatus('Subscribed · waiting for events', false)
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
    let buffered = ''
    for (;;) {
      const { value, done } = await reader.read()
      if (done) break
      buffered += value
      // An event ends with a blank line; ':' lines are keep-alive comments.
      let end
      while ((end = buffered.indexOf('\n\n')) !== -1) {
        const lines = buffered.slice(0, end).split('\n')
        buffered = buffered.slice(end + 2)
        const type = lines.find((line) => line.startsWith('event:'))?.slice(6).trim()
        const data = lines.filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trim()).join('\n')
        if (type === 'next' && data !== '') show(JSON.parse(data))
      }
    }
    showStatus(`Subscription complete · ${events} event${events === 1 ? '' : 's'}`, failed)
  } catch (err) {
    if (controller.signal.aborted) showStatus(`Stopped · ${events} event${events === 1 ? '' : 's'}`, failed)
    else showStatus(`Subscription failed: ${err.message}`, true)
  } finally {
    streaming = null
    runButton.textContent = 'Run'
  }
}

async function run () {
  if (streaming) {
    streaming.abort()
    return
  }
  let variables
  try {
    variables = parseVariables()
  } catch (err) {
    showStatus(`Variables: ${err.message}`, true)
    return
  }
  saveDraft()
  resultPane.textContent = ''
  resultPane.classList.remove('has-errors')
  if (isSubscription(queryBox.value)) return subscribe(queryBox.value, variables)
  runButton.disabled = true
  showStatus('Running…', false)
  const started = performance.now()
  try {
    const { status, body } = await postGraphQL(queryBox.value, variables)
    const ms = Math.round(performance.now() - started)
    const hasErrors =
      typeof body !== 'object' || (body !== null && Array.isArray(body.errors) && body.errors.length > 0)
    resultPane.textContent = typeof body === 'string' ? body : JSON.stringify(body, null, 2)
    resultPane.classList.toggle('has-errors', hasErrors)
    showStatus(`HTTP ${status} · ${ms} ms${hasErrors ? ' · with errors' : ''}`, hasErrors)
  } catch (err) {
    resultPane.textContent = ''
    showStatus(`Request failed: ${err.message}`, true)
  } finally {
    runButton.disabled = false
  }
}

// ---- schema list (introspection; needs INTROSPECTION on, which is the development default) ----

const TYPE_REF = 'kind name ofType { kind name ofType { kind name ofType { kind name } } }'
const INTROSPECTION = `query QueryUiSchema { __schema {
  queryType { name } mutationType { name } subscriptionType { name }
  types { kind name description
    fields { name description args { name defaultValue type { ${TYPE_REF} } } type { ${TYPE_REF} } }
    inputFields { name type { ${TYPE_REF} } }
    enumValues { name }
  }
} }`

function typeName (ref) {
  if (ref.kind === 'NON_NULL') return `${typeName(ref.ofType)}!`
  if (ref.kind === 'LIST') return `[${typeName(ref.ofType)}]`
  return ref.name
}

function element (tag, className, text) {
  const node = document.createElement(tag)
  if (className) node.className = className
  if (text !== undefined) node.textContent = text
  return node
}

function insertAtCursor (text) {
  const { selectionStart, selectionEnd, value } = queryBox
  queryBox.value = value.slice(0, selectionStart) + text + value.slice(selectionEnd)
  queryBox.selectionStart = queryBox.selectionEnd = selectionStart + text.length
  queryBox.focus()
}

function renderType (type, open) {
  const details = element('details')
  details.open = open
  details.append(element('summary', null, `${type.name} (${type.kind.toLowerCase().replace('_', ' ')})`))
  if (type.description) details.title = type.description
  const list = element('ul')
  for (const field of type.fields ?? type.inputFields ?? []) {
    const item = element('li')
    const name = element('span', 'field', field.name)
    name.addEventListener('click', () => insertAtCursor(field.name))
    item.append(name)
    if (field.args?.length) {
      item.append(
        `(${field.args.map((a) => `${a.name}: ${typeName(a.type)}${a.defaultValue != null ? ` = ${a.defaultValue}` : ''}`).join(', ')})`
      )
    }
    item.append(': ', element('span', 'type', typeName(field.type)))
    if (field.description) item.title = field.description
    list.append(item)
  }
  for (const value of type.enumValues ?? []) list.append(element('li', null, value.name))
  details.append(list)
  return details
}

async function loadSchema () {
  schemaPane.textContent = 'Loading…'
  try {
    const { body } = await postGraphQL(INTROSPECTION)
    const schema = body?.data?.__schema
    if (!schema) {
      schemaPane.textContent = `Schema unavailable: ${body?.errors?.[0]?.message ?? 'no data'}`
      return
    }
    const roots = [schema.queryType, schema.mutationType, schema.subscriptionType].filter(Boolean).map((t) => t.name)
    const byName = new Map(schema.types.map((t) => [t.name, t]))
    const others = schema.types
      .filter((t) => !t.name.startsWith('__') && !roots.includes(t.name) && t.kind !== 'SCALAR')
      .sort((a, b) => a.name.localeCompare(b.name))
    schemaPane.replaceChildren(
      ...roots.map((name) => renderType(byName.get(name), true)),
      ...others.map((type) => renderType(type, false))
    )
  } catch (err) {
    schemaPane.textContent = `Schema unavailable: ${err.message}`
  }
}

// ---- wiring ----

runButton.addEventListener('click', run)
$('reload-schema').addEventListener('click', loadSchema)
for (const box of [queryBox, variablesBox]) {
  box.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault()
      run()
    }
  })
  box.addEventListener('change', saveDraft)
}
loadSchema()
