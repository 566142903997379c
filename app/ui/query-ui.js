// The development query UI: sends the query, variables and an optional bearer token to POST /graphql
// (same origin, application/json) and shows the response; lists the schema through introspection.
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

/** POSTs a GraphQL request; resolves to { status, body } where body is parsed JSON (or the raw text). */
async function postGraphQL (query, variables) {
  const headers = { 'content-type': 'application/json', accept: 'application/json' }
  const token = tokenBox.value.trim().replace(/^Bearer\s+/i, '')
  if (token !== '') headers.authorization = `Bearer ${token}`
  const response = await fetch('/graphql', {
    method: 'POST',
    headers,
    body: JSON.stringify(variables === undefined ? { query } : { query, variables }),
    credentials: 'omit'
  })
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

async function run () {
  let variables
  try {
    variables = parseVariables()
  } catch (err) {
    showStatus(`Variables: ${err.message}`, true)
    return
  }
  saveDraft()
  runButton.disabled = true
  resultPane.textContent = ''
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
