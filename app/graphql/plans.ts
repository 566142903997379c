// The plans of document texts, made once per text and cached by the bytes they keep alive, each with its
// operations' graphql-jit compilations (made on first admitted execution, or at once for a retained
// deploy-time text). Built first: the app deployments' catalog retains through it, the persisted registry
// plans registered texts with it, and admission plans every other text with it.
import { createRequire } from 'node:module'
import { setFlagsFromString } from 'node:v8'
import type { GraphQLSchema } from 'graphql'
import type { CompiledQuery } from 'graphql-jit'
import { AppError } from '../core/errors.ts'
import { LruMap } from '../core/lru-map.ts'
import type { OperationLimits } from './operation-limits.ts'
import { makePlan, type DocumentPlan, type OperationPlan } from './plan.ts'

// graphql-jit's CommonJS build: its ESM build imports a sibling module without its extension and
// fails to load under Node's resolver.
const require = createRequire(import.meta.url)
const { compileQuery, isCompiledQuery } = require('graphql-jit') as typeof import('graphql-jit')

/** Limits the plan cache works under: a plan's own (depth, tokens, caps...), the text length, the cache's bytes. */
export type PlanCacheLimits = OperationLimits

/**
 * The plans of document texts, made once per text and cached by bytes, with each operation's
 * graphql-jit compilation. Built before the persisted registry (which plans registered texts) and the
 * pipeline (which resolves documents through that registry): that order is the whole dependency chain.
 */
export interface Plans {
  /** The plan of a text: from the cache, or made (and cached) now. Throws when the text cannot run. */
  plan (source: string): DocumentPlan
  /** Makes and compiles the plan of a deploy-time text, kept until released (never evicted): what it weighs. */
  retain (source: string): number
  /** Lets a retained text go (its app deployment was retired): planned again, and cached, if it runs again. */
  release (source: string): void
  /**
   * The operation's compilation (of the text `source`), made now when it has none: the cached plan then weighs more.
   */
  compiled (operation: OperationPlan, source: string): CompiledQuery
  /** Plans made for ad-hoc and APQ texts: entries and estimated bytes kept. */
  readonly stats: { entries: number; bytes: number }
}

/** graphql-jit compilations, one per operation of a plan (it keys nothing by text: no cross-operation mix-up). */
const compilations = new WeakMap<OperationPlan, CompiledQuery>()

/** The operation's compilation, made now when it has none (`made` is then called: the plan weighs more). */
function compiledOf (schema: GraphQLSchema, operation: OperationPlan, made?: () => void): CompiledQuery {
  let compiled = compilations.get(operation)
  if (!compiled) {
    const result = compileQuery(schema, operation.document, operation.name ?? undefined)
    // The document validated, so a failure here is ours: reported as an internal error.
    if (!isCompiledQuery(result)) {
      throw new Error(`graphql-jit could not compile the operation: ${result.errors?.map((e) => e.message).join('; ')}`)
    }
    compilations.set(operation, compiled = result)
    made?.()
  }
  return compiled
}

/** What a plan keeps alive: its own estimate plus that of each operation compiled so far. */
function weightOf (plan: DocumentPlan): number {
  let bytes = plan.bytes
  for (const operation of plan.operations) if (compilations.has(operation)) bytes += operation.compiledBytes
  return bytes
}

/**
 * Turns V8's compilation cache off for the process, once plans are made (createPlans), not as a side
 * effect of importing this module. graphql-jit compiles each operation with `new Function(source)`, and
 * V8 keeps every such source's compilation in its eval cache, strongly, until a last-resort GC near the
 * heap limit: measured, about 2 MiB per distinct 7.8 KB document, kept long after the plan cache had let
 * the plan go (a compilation is made once per plan, so the cache never saves anything here). Node's
 * documented v8.setFlagsFromString turns that cache off; a compilation then lives exactly as long as its
 * plan, whose weight counts it.
 */
function keepCompilationsWithTheirPlans (): void {
  setFlagsFromString('--no-compilation-cache')
}

export function createPlans (schema: () => GraphQLSchema, limits: PlanCacheLimits): Plans {
  keepCompilationsWithTheirPlans()
  const cache = new LruMap<string, DocumentPlan>(Infinity, limits.planCacheBytes)
  const retained = new Map<string, DocumentPlan>()

  function plan (source: string): DocumentPlan {
    let made = retained.get(source) ?? cache.get(source)
    if (!made) {
      if (source.length > limits.maxQueryLength) {
        throw new AppError('QUERY_TOO_LARGE', `The document is longer than ${limits.maxQueryLength} characters`, {
          maxQueryLength: limits.maxQueryLength
        })
      }
      // A text that fails throws here and is never kept.
      made = makePlan(schema(), source, limits)
      cache.set(source, made, made.bytes)
    }
    return made
  }

  /** Weighs a cached plan again once an operation of it is compiled (a retained one is not counted). */
  function reweigh (source: string): void {
    const cached = cache.peek(source)
    if (cached) cache.set(source, cached, weightOf(cached))
  }

  return {
    plan,
    retain (source) {
      const made = makePlan(schema(), source, limits)
      for (const operation of made.operations) compiledOf(schema(), operation)
      retained.set(source, made)
      return weightOf(made)
    },
    release (source) {
      retained.delete(source)
    },
    compiled: (operation, source) => compiledOf(schema(), operation, () => reweigh(source)),
    get stats () { return { entries: cache.size, bytes: cache.weight } }
  }
}
