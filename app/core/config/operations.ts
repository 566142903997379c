// What one operation may be, carry and take, whatever the transport: the document's shape (checked when it
// is planned, before it runs), the values it carries (every transport's input caps), and its execution (a
// deadline, the answer's size, batches). What operations cost callers is budgets.ts.
import { area } from './area.ts'

export const document = area({
  key: 'document',
  title: 'Documents: what a GraphQL document may be',
  about: 'Checked when a document is planned (parsed, validated and compiled), before anything runs; a persisted or published operation is checked against them too. Plans are kept for reuse up to `PLAN_CACHE_BYTES`.',
  settings: {
    MAX_QUERY_LENGTH: { type: 'integer', minimum: 100, default: 65536, doc: 'characters of document text, checked before parsing' },
    MAX_QUERY_TOKENS: { type: 'integer', minimum: 100, default: 10000, doc: 'graphql-js stops parsing past it' },
    MAX_DEPTH: { type: 'integer', minimum: 1, default: 10, doc: 'deepest selection, through fragments (`DEPTH_LIMIT_EXCEEDED`)' },
    MAX_ALIASES: { type: 'integer', minimum: 0, default: 15, doc: 'aliases per operation, through fragments (alias overloading; graphql-armor\'s default)' },
    MAX_DIRECTIVES_PER_FIELD: { type: 'integer', minimum: 0, default: 4, doc: '@include, @skip and a client directive or two; more is directive overloading' },
    MAX_DIRECTIVES: { type: 'integer', minimum: 0, default: 50, doc: 'directives per operation, through fragments (graphql-armor\'s default)' },
    MAX_MUTATIONS_PER_OPERATION: { type: 'integer', minimum: 1, default: 10, doc: 'mutation fields per operation, aliases included (`MUTATION_LIMIT_EXCEEDED`)' },
    MAX_VALIDATION_ERRORS: { type: 'integer', minimum: 1, default: 10, doc: 'validation errors answered (one per kind of mistake)' },
    PLAN_CACHE_BYTES: { type: 'integer', minimum: 0, default: 67108864, doc: 'estimated bytes of parsed, validated, compiled documents kept (ad-hoc and APQ)' }
  },
  read: (e) => ({
    /** Checked on the text, before anything is parsed. */
    maxQueryLength: e.MAX_QUERY_LENGTH,
    maxQueryTokens: e.MAX_QUERY_TOKENS,
    maxDepth: e.MAX_DEPTH,
    maxAliases: e.MAX_ALIASES,
    maxDirectivesPerField: e.MAX_DIRECTIVES_PER_FIELD,
    maxDirectives: e.MAX_DIRECTIVES,
    maxMutationsPerOperation: e.MAX_MUTATIONS_PER_OPERATION,
    maxValidationErrors: e.MAX_VALIDATION_ERRORS,
    /** Estimated bytes of parsed, validated and compiled documents kept for reuse (ad-hoc and APQ texts). */
    planCacheBytes: e.PLAN_CACHE_BYTES
  })
})

export const input = area({
  key: 'input',
  title: 'Input: the values an operation carries',
  about: 'The same caps on arguments and variables for GraphQL (every carrier) and SOAP.',
  settings: {
    MAX_STRING_LENGTH: { type: 'integer', minimum: 1, default: 1000, doc: 'longest string argument or variable, every transport (`BAD_USER_INPUT`, `Too long`)' },
    MAX_LIST_LENGTH: { type: 'integer', minimum: 1, default: 100, doc: 'most entries in a list argument' },
    MAX_PAGE_SIZE: { type: 'integer', minimum: 1, default: 100, doc: 'largest `limit`, `first`, `last` and SOAP `pageSize`' },
    MAX_COUNT_TARGET: { type: 'integer', minimum: 0, default: 100, doc: 'largest target Subscription.count accepts' }
  },
  read: (e) => ({
    maxStringLength: e.MAX_STRING_LENGTH,
    maxListLength: e.MAX_LIST_LENGTH,
    maxPageSize: e.MAX_PAGE_SIZE,
    /** Largest `target` Subscription.count accepts. */
    maxCountTarget: e.MAX_COUNT_TARGET
  })
})

export const execution = area({
  key: 'execution',
  title: 'Execution: running an operation',
  about: 'How long an operation may run, how large its answer may be, and how many operations one request may batch.',
  settings: {
    QUERY_TIMEOUT_MS: { type: 'integer', minimum: 1, default: 10000, doc: 'execution deadline (`TIMEOUT`)' },
    MAX_RESPONSE_BYTES: { type: 'integer', minimum: 1024, default: 8388608, doc: 'largest answer; larger ones get RESPONSE_TOO_LARGE' },
    MAX_BATCH_SIZE: { type: 'integer', minimum: 0, default: 0, doc: 'operations in one batched POST (a JSON array), each admitted and priced on its own; 0 (default, as Apollo Server and Yoga) = batches refused' }
  },
  read: (e) => ({
    timeoutMs: e.QUERY_TIMEOUT_MS,
    /** Largest answer (bytes of JSON) an operation may produce; larger ones are refused with RESPONSE_TOO_LARGE. */
    maxResponseBytes: e.MAX_RESPONSE_BYTES,
    maxBatchSize: e.MAX_BATCH_SIZE
  })
})
