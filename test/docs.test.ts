// The reference tables that restate the code, checked against the code: every error code of the catalogue
// in docs/errors.md with its HTTP status; docs/settings.md's tables as `npm run settings:docs` writes them from
// the configuration's declarations (app/core/config/, imported, never read as text), and every variable they
// declare in .env.example. Adding a code or a setting without documenting it fails here.
import { test } from 'tap'
import { readFileSync } from 'node:fs'
import { loadConfig, SERVICE_AREAS, SETTING_NAMES, tokenSigning } from '../app/core/config/index.ts'
import type { Setting } from '../app/core/config/area.ts'
import { ErrorCodes } from '../app/core/errors.ts'
import { settingsPage } from '../cli/settings-docs.ts'
import { REPO } from './helpers/server-process.ts'

const read = (path: string) => readFileSync(`${REPO}/${path}`, 'utf8')

/** The first cells of a markdown table's rows whose first cell is one `NAME`, keyed by that name. */
function tableRows (markdown: string): Map<string, string[]> {
  const rows = new Map<string, string[]>()
  for (const line of markdown.split('\n')) {
    const match = /^\| `([A-Z][A-Z0-9_]*)` \|(.*)\|$/.exec(line)
    if (match) rows.set(match[1]!, match[2]!.split('|').map((cell) => cell.trim()))
  }
  return rows
}

test('every error code of the catalogue is in docs/errors.md with its HTTP status, and nothing else', async (t) => {
  const rows = tableRows(read('docs/errors.md'))
  for (const [code, { status }] of Object.entries(ErrorCodes)) {
    const row = rows.get(code)
    if (!row) {
      t.fail(`docs/errors.md has no row for ${code}`)
      continue
    }
    t.equal(row[0], String(status), `${code}: HTTP ${status}`)
    t.ok(row[1], `${code}: says what it means`)
  }
  t.same(
    [...rows.keys()].filter((code) => !Object.hasOwn(ErrorCodes, code)),
    [],
    'no row for a code the catalogue lacks'
  )
})

test('docs/settings.md\'s tables are the configuration\'s declarations, each variable declared once', async (t) => {
  t.ok(read('docs/settings.md') === settingsPage(), 'docs/settings.md is what `npm run settings:docs` writes (run it)')
  const declared = new Map<string, Setting>()
  for (const area of [...SERVICE_AREAS, tokenSigning]) {
    for (const [name, setting] of Object.entries<Setting>(area.settings)) {
      t.ok(setting.doc.trim(), `${name}: says what it means`)
      // An area may use another's declaration (the token's signing key is the service's), never redeclare it.
      if (declared.has(name)) t.equal(declared.get(name), setting, `${name} is declared once (${area.key})`)
      declared.set(name, setting)
    }
  }
  t.same([...declared.keys()].sort(), [...SETTING_NAMES].sort(), 'the service\'s areas document every variable a command reads')
  t.equal(SETTING_NAMES.length, new Set(SETTING_NAMES).size, 'in one table each')
})

test('.env.example lists every variable the service reads, and no other', async (t) => {
  const example = new Set([...read('.env.example').matchAll(/^#? ?([A-Z][A-Z0-9_]*)=/gm)].map((m) => m[1]!))
  t.ok(SETTING_NAMES.length > 50, `the declared variables were found (${SETTING_NAMES.length})`)
  t.same(SETTING_NAMES.filter((name) => !example.has(name)), [], '.env.example lists every variable')
  t.same([...example].filter((name) => !SETTING_NAMES.includes(name)), [], '.env.example lists no variable the service does not read')
})

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
const anchor = (heading: string) => heading.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replaceAll(' ', '-')

const GUIDE_AND_REFERENCE = [
  'README.md',
  'docs/architecture.md',
  'docs/reference.md',
  'docs/errors.md',
  'docs/settings.md',
  'docs/soap.md',
  'docs/operations.md',
  'docs/benchmarks.md'
]

test('the README and the reference docs link only to files and headings that exist', async (t) => {
  for (const file of GUIDE_AND_REFERENCE) {
    const dir = file.includes('/') ? file.slice(0, file.lastIndexOf('/') + 1) : ''
    for (const [, target, fragment] of read(file).matchAll(/\]\(([^)#\s]*)(?:#([^)\s]*))?\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue
      const path = target ? new URL(target, `file:///${dir}`).pathname.slice(1) : file
      let text = ''
      t.doesNotThrow(() => { text = read(path) }, `${file} → ${path}`)
      if (fragment) {
        const anchors = [...text.matchAll(/^#+ (.*)$/gm)].map((m) => anchor(m[1]!))
        t.ok(anchors.includes(fragment), `${file} → ${path}#${fragment} names a heading`)
      }
    }
  }
})

test('the persisted ids the README and docs send are in persisted/manifest.json', async (t) => {
  const manifest = JSON.parse(read('persisted/manifest.json')) as { operations: { id: string }[] }
  const ids = new Set(manifest.operations.map((operation) => `sha256:${operation.id}`))
  const sent = GUIDE_AND_REFERENCE.flatMap((file) => [...read(file).matchAll(/queryId=(sha256:[0-9a-f]{64})/g)].map((m) => [file, m[1]!]))
  t.ok(sent.length >= 2, 'the README sends persisted queries')
  for (const [file, id] of sent) t.ok(ids.has(id!), `${file}: ${id} is registered`)
  t.equal(loadConfig({ NODE_ENV: 'development' }).persisted.manifest, `${REPO}/persisted/manifest.json`,
    'the development server the README starts serves that manifest')
})

test('docs/errors.md\'s status table gives each code the status of the catalogue', async (t) => {
  const markdown = read('docs/errors.md')
  const start = markdown.indexOf('## Which HTTP status a request gets')
  t.ok(start >= 0, 'docs/errors.md has its "Which HTTP status a request gets" table')
  let checked = 0
  for (const line of markdown.slice(start).split('\n')) {
    const cells = /^\|([^|]*)\|([^|]*)\|([^|]*)\|$/.exec(line)
    if (!cells) continue
    // A row names its statuses and codes in the same order ("408, 431, 400" and three codes).
    const statuses = [...cells[2]!.matchAll(/\b[1-5]\d\d\b/g)].map((m) => Number(m[0]))
    const codes = [...cells[3]!.matchAll(/`([A-Z_]{3,})`/g)].map((m) => m[1]!)
    if (codes.length === 0) continue
    t.equal(statuses.length, codes.length, `one status per code: ${line}`)
    codes.forEach((code, i) => {
      t.ok(Object.hasOwn(ErrorCodes, code), `${code} is in the catalogue`)
      t.equal(statuses[i], ErrorCodes[code as keyof typeof ErrorCodes]?.status, `${code}: ${line}`)
      checked++
    })
  }
  t.ok(checked >= 8, `the rows were found (${checked} codes checked)`)
  // The text names the persisted-query miss's status too.
  t.match(markdown, `A persisted-query miss stays ${ErrorCodes.PERSISTED_QUERY_NOT_FOUND.status}`)
})
