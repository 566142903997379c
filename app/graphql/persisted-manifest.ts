// Deploy-time manifests (PERSISTED_MANIFEST): loaded once at start, every id verified against its
// text, each text a single operation. Never evicted; the only source in persisted-only mode.
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Kind, parse, type DocumentNode, type OperationTypeNode } from 'graphql'
import { sha256Hex, type PersistedOperation } from './persisted.ts'

// ---------------------------------------------------------------------------------------------
// Documents

/** The single operation of a document, or a reason it cannot be registered. */
function singleOperation (document: DocumentNode): { name: string | null; type: OperationTypeNode } | string {
  const operations = document.definitions.filter((d) => d.kind === Kind.OPERATION_DEFINITION)
  if (operations.length === 0) return 'it contains no operation'
  if (operations.length > 1) return `it contains ${operations.length} operations; register one operation per document`
  const op = operations[0]!
  return { name: op.name?.value ?? null, type: op.operation }
}

/**
 * Parses a registered text: it must hold one operation. Throws a message. (Whether the service can run
 * it, against its schema and limits, is decided when the engine's warm-up (routes/graphql/engine.ts)
 * retains its plan at start.)
 */
function describeOperation (text: string): { name: string | null; type: OperationTypeNode } {
  let document: DocumentNode
  try {
    document = parse(text)
  } catch (err) {
    throw new Error(`it does not parse: ${(err as Error).message}`)
  }
  const single = singleOperation(document)
  if (typeof single === 'string') throw new Error(single)
  return single
}

// ---------------------------------------------------------------------------------------------
// Deploy-time manifests

/** The format `npm run persisted:build` writes: Apollo's, so one loader reads both. */
export interface ApolloManifest {
  format: 'apollo-persisted-query-manifest'
  version: 1
  operations: { id: string; name: string | null; type: OperationTypeNode; body: string }[]
}

const ID_FORM = /^(sha256:)?([0-9a-fA-F]+)$/
const ALGORITHM_BY_LENGTH: Record<number, string> = { 32: 'md5', 40: 'sha1', 64: 'sha256' }

/** Checks that a manifest id is the hash of its text (md5, sha1 or sha256 by length; `sha256:` prefix allowed). */
function verifyId (id: string, text: string): string | null {
  const match = ID_FORM.exec(id)
  const algorithm = match
    ? match[1]
      ? match[2]!.length === 64
        ? 'sha256'
        : undefined
      : ALGORITHM_BY_LENGTH[match[2]!.length]
    : undefined
  if (!match || !algorithm) return `id "${id}" is not a hash (expected sha256:<hex>, or md5/sha1/sha256 hex)`
  const actual = createHash(algorithm).update(text, 'utf8').digest('hex')
  return actual === match[2]!.toLowerCase()
    ? null
    : `id "${id}" does not match the ${algorithm} of its text (${actual})`
}

/** Manifest entries as (id, text) pairs, whatever the format. */
function entriesOf (json: unknown): { id: string; text: string; name?: string | null; type?: string }[] {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new Error('it is not a JSON object')
  const manifest = json as Partial<ApolloManifest> & Record<string, unknown>
  if (manifest.format !== undefined) {
    if (
      manifest.format !== 'apollo-persisted-query-manifest' ||
      manifest.version !== 1 ||
      !Array.isArray(manifest.operations)
    ) {
      throw new Error(
        `unknown manifest format "${String(manifest.format)}" version ${String(manifest.version)} (expected apollo-persisted-query-manifest version 1)`
      )
    }
    return manifest.operations.map((op, i) => {
      if (typeof op?.id !== 'string' || typeof op.body !== 'string') {
        throw new Error(`operations[${i}] needs string "id" and "body"`)
      }
      return { id: op.id, text: op.body, name: op.name, type: op.type }
    })
  }
  return Object.entries(manifest).map(([id, text]) => {
    if (typeof text !== 'string') {
      throw new Error(`the value of "${id}" is not a document text (expected an id → text map)`)
    }
    return { id, text }
  })
}

export interface Manifest {
  /** Every operation once. */
  operations: PersistedOperation[]
  /** Lookup by `sha256:<hex>` and by the id the manifest gave (e.g. Relay's md5), and by bare sha256 hex. */
  byId: Map<string, PersistedOperation>
}

export function emptyManifest (): Manifest {
  return { operations: [], byId: new Map() }
}

/** One operation of a manifest, as read: its text's sha256, the id the manifest gave it, its text and kind. */
export interface ManifestEntry {
  /** sha256 hex of `text`. */
  hash: string
  /** The id the manifest lists it under (its sha256 in any spelling, or Relay's md5 or sha1). */
  id: string
  text: string
  name: string | null
  type: OperationTypeNode
}

/**
 * Reads a manifest (in any of the formats above), verifying that every id is the hash of its text and
 * that every text is a single operation. Throws the first problem, naming the operation.
 */
export function readManifest (json: unknown): ManifestEntry[] {
  return entriesOf(json).map((entry) => {
    const wrongId = verifyId(entry.id, entry.text)
    if (wrongId) throw new Error(wrongId)
    let described: { name: string | null; type: OperationTypeNode }
    try {
      described = describeOperation(entry.text)
    } catch (err) {
      throw new Error(`operation "${entry.id}" cannot be registered: ${(err as Error).message}`)
    }
    if (
      (entry.name !== undefined && entry.name !== described.name) ||
      (entry.type !== undefined && entry.type !== described.type)
    ) {
      throw new Error(
        `operation "${entry.id}" is listed as ${entry.type} ${entry.name} but its text holds ${described.type} ${described.name}`
      )
    }
    return { hash: sha256Hex(entry.text), id: entry.id, text: entry.text, ...described }
  })
}

/** The JSON of a manifest file; throws naming the file. */
export function readManifestFile (file: string): ManifestEntry[] {
  try {
    return readManifest(JSON.parse(readFileSync(file, 'utf8')))
  } catch (err) {
    throw new Error(`Persisted query manifest ${file}: ${(err as Error).message}`)
  }
}

/** Adds an operation to a lookup under its sha256 (in both spellings) and the id its manifest gave it. */
export function addToManifest (manifest: Manifest, entry: Pick<ManifestEntry, 'hash' | 'id' | 'text' | 'name' | 'type'>): PersistedOperation {
  const id = `sha256:${entry.hash}`
  let operation = manifest.byId.get(id)
  if (!operation) {
    operation = { id, text: entry.text, name: entry.name, type: entry.type }
    manifest.operations.push(operation)
    manifest.byId.set(id, operation)
    manifest.byId.set(entry.hash, operation)
  }
  manifest.byId.set(entry.id, operation)
  return operation
}

/**
 * Reads manifest files into one lookup, verifying every hash and that every text is a single
 * operation. Any problem is a startup error naming the file and id.
 */
export function loadManifests (files: string[]): Manifest {
  const manifest = emptyManifest()
  for (const file of files) for (const entry of readManifestFile(file)) addToManifest(manifest, entry)
  return manifest
}
