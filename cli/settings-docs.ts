// npm run settings:docs [-- --check]
// Writes docs/settings.md's tables from the configuration's declarations (app/core/config/): each area's
// settings with their defaults, accepted values and meaning, between the file's two markers. A setting is
// documented where it is declared; this command only copies it, so the page cannot drift from the code
// (test/docs.test.ts fails when it has). --check writes nothing and exits 1 when the page is out of date.
import { readFileSync, writeFileSync } from 'node:fs'
import { readCommandLine } from '../app/core/command-line.ts'
import { SERVICE_AREAS } from '../app/core/config/index.ts'
import { settingsReference, withReference } from '../app/core/config/reference.ts'

export const SETTINGS_PAGE = new URL('../docs/settings.md', import.meta.url)

/** docs/settings.md as the declarations give it (its prose kept, its tables written anew). */
export function settingsPage (current = readFileSync(SETTINGS_PAGE, 'utf8')): string {
  return withReference(current, settingsReference(SERVICE_AREAS))
}

const USAGE = `usage: npm run settings:docs [-- --check]
Writes docs/settings.md's tables (every setting with its default, accepted values and meaning) from the
declarations in app/core/config/, where each setting is documented. --check writes nothing and exits 1
when docs/settings.md is out of date.`

if (import.meta.main) {
  const { values } = readCommandLine(USAGE, { options: { check: { type: 'boolean', default: false } } })
  const current = readFileSync(SETTINGS_PAGE, 'utf8')
  const page = settingsPage(current)
  if (values.check) {
    if (page !== current) {
      console.error('docs/settings.md is out of date: npm run settings:docs writes it')
      process.exitCode = 1
    }
  } else if (page !== current) {
    writeFileSync(SETTINGS_PAGE, page)
    console.log('wrote docs/settings.md')
  } else {
    console.log('docs/settings.md is up to date')
  }
}
