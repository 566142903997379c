// How one area of the configuration is declared: its settings (each environment variable once: its type,
// bounds, default and one line of documentation) and `read`, which turns their values into the area's part
// of the configuration. The area's type is whatever `read` returns (TypeScript infers it), and `Config` is
// composed of those types (index.ts): nothing describes a setting a second time. docs/settings.md's tables are
// generated from the same declarations (reference.ts).
//
// The settings stay JSON-schema entries for env-schema (Ajv): its coercion, defaults and messages ("PORT must
// be integer") are what operators and tests already know, and it reports every invalid variable in one pass.
// The two documentation keys are removed before Ajv sees an entry (schemaEntry).

export type Profile = 'production' | 'development'

/** One environment variable: a JSON-schema entry for env-schema, and its documentation. */
export interface Setting {
  readonly type: 'string' | 'integer' | 'number' | 'boolean'
  readonly minimum?: number
  readonly maximum?: number
  readonly enum?: readonly string[]
  /** Applied by env-schema when the variable is unset; without one, the value is undefined when unset. */
  readonly default?: string | number | boolean
  /** What the setting does: the meaning column of docs/settings.md (markdown, one line). */
  readonly doc: string
  /**
   * The default column of docs/settings.md when `default` does not say it all (a default that depends on
   * the profile or on another setting, computed in `read`); markdown.
   */
  readonly shownDefault?: string
}

export type Settings = Readonly<Record<string, Setting>>

/** A setting's value after env-schema: a number, a boolean, a member of its enum, else text. */
type Value<S> = S extends { type: 'integer' | 'number' } ? number
  : S extends { enum: readonly (infer Member)[] } ? Member
    : S extends { type: 'boolean' } ? boolean : string

/** The values of `S` as env-schema returns them: typed, defaulted, undefined when unset without a default. */
export type Values<S extends Settings> = {
  readonly [Name in keyof S]: S[Name] extends { default: unknown } ? Value<S[Name]> : Value<S[Name]> | undefined
}

/** What every area's `read` is given besides its values. */
export interface Reading {
  profile: Profile
  production: boolean
  /** Where `read` adds what is wrong (one line each, without the "Configuration: " prefix). */
  problems: string[]
  /** The variables env-schema refused (already reported): read as unset, so the checks after it still run. */
  invalid: ReadonlySet<string>
}

export interface Area<Key extends string = string, S extends Settings = Settings, Result = unknown> {
  /** The area's name in `Config` (config.<key>). */
  readonly key: Key
  /** Its heading in docs/settings.md, and a sentence under it. */
  readonly title: string
  readonly about: string
  readonly settings: S
  /** The areas whose results `read` needs (read first, handed to it under their keys). */
  readonly uses: readonly AnyArea[]
  // A method, so that an area of particular settings is still an AnyArea (methods' parameters are bivariant).
  read (values: Values<S>, reading: Reading & Record<string, unknown>): Result
}

export type AnyArea = Area<string, any, unknown>

/** The result of an area's `read`: its part of the configuration. */
export type AreaResult<A> = A extends Area<string, Settings, infer Result> ? Result : never

/** The results of `Uses`, under their keys. */
export type Results<Uses extends readonly AnyArea[]> = { [A in Uses[number] as A['key']]: AreaResult<A> }

/**
 * Declares an area. `settings` is read as written (`const`: literal types and bounds), so `values` in
 * `read` comes typed, and the area's type is inferred from what `read` returns.
 */
export function area<
  const Key extends string,
  const S extends Settings,
  Result,
  const Uses extends readonly AnyArea[] = []
> (declaration: {
  key: Key
  title: string
  about: string
  settings: S
  uses?: Uses
  read (values: Values<S>, reading: Reading & Results<Uses>): Result
}): Area<Key, S, Result> {
  const { uses = [], read, ...rest } = declaration
  return { ...rest, uses, read: read as Area<Key, S, Result>['read'] }
}

/** The JSON-schema entry env-schema validates a setting with (its documentation left out: Ajv is strict). */
export function schemaEntry ({ doc: _doc, shownDefault: _shown, ...entry }: Setting): object {
  return entry
}

/** A comma-separated list's entries, trimmed, empty ones dropped. */
export function list (value: string | undefined): string[] {
  return (value ?? '').split(',').map((s) => s.trim()).filter(Boolean)
}

/** A text setting's value, or null when it is unset or empty. */
export function optional (value: string | undefined): string | null {
  return value !== undefined && value !== '' ? value : null
}
