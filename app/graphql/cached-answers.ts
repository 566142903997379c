// Answers to admitted operations over HTTP, through the shared response cache (app/core/cache/) when it is on
// and the operation is a query that reads the service's data. The HTTP exchange (http-exchange.ts) asks
// here once an operation is admitted (its caller identified, its request and its price paid), so a hit
// costs a client exactly what an execution does.
import { createHash } from 'node:crypto'
import { printSchema, type GraphQLSchema } from 'graphql'
import { cacheKey, type CachedAnswer, type EarlyRead, type ResponseCache } from '../core/cache/response-cache.ts'
import type { ReadSet } from '../core/domain/read-tags.ts'
import { formatResult, type FormatOptions, type GraphQLAnswer } from '../core/error-format.ts'
import { cacheScopeOf, callerDependence, executedAs } from './answer-scope.ts'
import { withinAnswerCap } from './answer-size.ts'
import type { Visibility } from './http-cache.ts'
import type { Admission, OperationExecution, Priced } from './pipeline.ts'

/** An answer as sent: the execution's outcome plus our extensions (cost). */
export interface GraphQLResponseBody extends GraphQLAnswer {
  extensions?: Record<string, unknown>
}

/**
 * One operation's answer. `cached`: the response cache's entry holding it (its `body` is the answer's
 * JSON without `extensions`, which are this request's own and spliced in when sent), and its HTTP `Age`
 * when this request was answered from the cache rather than executed (null). On such a hit `body` holds
 * only the extensions: its data is in the entry, and the instruments read only its errors (it has none).
 */
export interface Answered {
  body: GraphQLResponseBody
  cached?: { entry: CachedAnswer; age: number | null }
  /**
   * Who may keep a query's answer, from its fields' declarations (answer-scope.ts): `public` when it is
   * every caller's, `private` when it depends on the caller. Absent for anything else (mutations,
   * refusals): never to be stored.
   */
  visibility?: Visibility
}

export interface CachedAnswersOptions {
  execution: Pick<OperationExecution, 'execute' | 'cached'>
  errorOptions: FormatOptions
  /** The shared cache of query answers (RESPONSE_CACHE); null when it is off. */
  responseCache: ResponseCache | null
  /** The executable schema: who may share an answer depends on its field rules (answer-scope.ts). */
  schema: () => GraphQLSchema
  /** The answer cap in UTF-8 bytes: an answer over it is not kept (the exchange replaces it by its error). */
  maxAnswerBytes: number
}

/** A cached answer is a query's that reads the service's data: never a mutation's, nor introspection's. */
const cacheable = ({ operation }: Priced) => operation.type === 'query' && !operation.introspects

/** Where a query's answer is kept: its cache key, and who may share it (answer-scope.ts). */
interface CacheLookup {
  key: string
  scope: string
  /** The store's answer, read while the request was paying (Pipeline's `onPriced`). */
  early?: EarlyRead
}

/**
 * `answerAdmitted(admission)`: the admitted operation's answer, from the cache or executed; with Redis, its
 * read of the cache begun while the operation's charge is on its way (`startLookup`).
 */
export function createCachedAnswers (options: CachedAnswersOptions) {
  const { execution, errorOptions, responseCache, schema, maxAnswerBytes } = options

  /**
   * The schema's identity in cache keys: instances on another version of the schema (a rolling deploy)
   * sharing Redis keep their own entries, while invalidations, by read tag, reach all of them.
   */
  let schemaHash: string | undefined
  const schemaVersion = () =>
    (schemaHash ??= createHash('sha256').update(printSchema(schema())).digest('base64url').slice(0, 16))

  /**
   * Where a priced query's answer is kept: the operation (on this schema), its coerced variables, and who
   * may share its answer; undefined when it is not cached.
   */
  function lookupOf (priced: Priced): CacheLookup | undefined {
    if (!responseCache || !cacheable(priced)) return undefined
    const scope = cacheScopeOf(priced.operation, priced.caller, schema())
    return { key: cacheKey(`${schemaVersion()}:${priced.operation.key}`, priced.variables, scope), scope }
  }

  /**
   * An admitted query through the response cache: its entry when one is valid (a hit: nothing executes),
   * else executed once for every concurrent request of the same key, recording what it reads, and kept
   * unless it has errors or is over the answer cap.
   */
  async function throughCache (
    cache: ResponseCache, admission: Admission, { key, scope, early }: CacheLookup
  ): Promise<Answered> {
    const extensions = { cost: admission.cost }
    const visibility: Visibility = scope === 'public' ? 'public' : 'private'
    const found = await cache.find(key, early)
    const hit = found.entry
    if (hit) {
      execution.cached(admission, 'hit')
      return { body: { extensions }, cached: { entry: hit, age: cache.ageOf(hit) }, visibility }
    }
    let executed: GraphQLResponseBody | undefined
    const filled = await cache.fill(key, async () => {
      execution.cached(admission, 'miss')
      const reads: ReadSet = new Set()
      const as = executedAs(scope, admission.caller)
      executed = formatResult(await execution.execute(admission, undefined, reads, as), errorOptions)
      const json = JSON.stringify(executed)
      return { body: json, tags: reads, store: executed.errors === undefined && withinAnswerCap(json, maxAnswerBytes) }
    }, found.since)
    // Waited for a concurrent request's execution of the same key: answered from it, as a hit.
    if (!filled.executed) execution.cached(admission, 'hit')
    const body = executed ?? {}
    body.extensions = extensions
    if (!filled.storable) return { body, visibility }
    const age = filled.executed ? null : cache.ageOf(filled.entry)
    return { body, cached: { entry: filled.entry, age }, visibility }
  }

  return {
    /**
     * Begins the cache's read of a priced query's answer while its charge is on its way (given to the
     * pipeline as `onPriced`): the lookup to pass to `answerAdmitted` once it is admitted.
     */
    startLookup (priced: Priced): CacheLookup | undefined {
      const lookup = lookupOf(priced)
      if (lookup) lookup.early = responseCache!.readEarly(lookup.key)
      return lookup
    },
    /** The admitted operation's answer, from the cache or executed; `lookup`: what `startLookup` began. */
    async answerAdmitted (admission: Admission, lookup = lookupOf(admission)): Promise<Answered> {
      if (responseCache && lookup) return throughCache(responseCache, admission, lookup)
      const body: GraphQLResponseBody = formatResult(await execution.execute(admission), errorOptions)
      body.extensions = { cost: admission.cost }
      if (admission.operation.type !== 'query') return { body }
      return { body, visibility: callerDependence(admission.operation, schema()) === 'none' ? 'public' : 'private' }
    }
  }
}
