// docs/settings.md's tables, written from the areas' declarations: a section per area, a row per setting with
// its default, the values it accepts and what it does. `npm run settings:docs` writes them between the
// file's two markers (the prose around them is the file's own); test/docs.test.ts fails when the file is
// not what the declarations give.
import type { AnyArea, Setting } from './area.ts'

export const REFERENCE_BEGIN = '<!-- settings reference: written by `npm run settings:docs` from app/core/config/ -->'
export const REFERENCE_END = '<!-- end of the settings reference -->'

/** The default column: what the declaration says, else the schema's default, "empty" or "unset". */
function shownDefault (setting: Setting): string {
  if (setting.shownDefault !== undefined) return setting.shownDefault
  if (setting.default === undefined) return 'unset'
  return setting.default === '' ? 'empty' : `\`${setting.default}\``
}

/** The values a setting accepts, from its type, bounds and enum (what env-schema refuses otherwise). */
function accepted (setting: Setting): string {
  if (setting.enum) return setting.enum.map((value) => `\`${value}\``).join(', ')
  if (setting.type === 'boolean') return '`true`, `false`'
  if (setting.type === 'string') return 'text'
  const kind = setting.type === 'integer' ? 'integer' : 'number'
  const { minimum, maximum } = setting
  if (minimum !== undefined && maximum !== undefined) return `${kind}, ${minimum} to ${maximum}`
  if (minimum !== undefined) return `${kind}, at least ${minimum}`
  if (maximum !== undefined) return `${kind}, at most ${maximum}`
  return kind
}

/** A table cell: one line, and a pipe that is not the cell's end escaped. */
const cell = (text: string) => text.replaceAll('|', '\\|').replace(/\s*\n\s*/g, ' ')

/** The markdown of `areas`' settings: a section (### title, then about) and a table each. */
export function settingsReference (areas: readonly AnyArea[]): string {
  return areas.map((area) => [
    `### ${area.title}`,
    '',
    area.about,
    '',
    '| setting | default | accepts | meaning |',
    '|---|---|---|---|',
    ...Object.entries<Setting>(area.settings).map(([name, setting]) =>
      `| \`${name}\` | ${cell(shownDefault(setting))} | ${cell(accepted(setting))} | ${cell(setting.doc)} |`)
  ].join('\n')).join('\n\n')
}

/** `markdown` with what is between the markers replaced by `reference`; throws when a marker is missing. */
export function withReference (markdown: string, reference: string): string {
  const begin = markdown.indexOf(REFERENCE_BEGIN)
  const end = markdown.indexOf(REFERENCE_END)
  if (begin < 0 || end < begin) throw new Error(`the markers ${REFERENCE_BEGIN} and ${REFERENCE_END} are missing`)
  return `${markdown.slice(0, begin + REFERENCE_BEGIN.length)}\n\n${reference}\n\n${markdown.slice(end)}`
}
