// Load shedding (plugins/under-pressure.ts): past a threshold, new requests get 503 + Retry-After.
import { area } from './area.ts'

export const loadShedding = area({
  key: 'loadShedding',
  title: 'Load shedding',
  about: 'Past a threshold, new requests get 503 with `Retry-After`; a threshold of 0 turns its check off.',
  settings: {
    PRESSURE_MAX_EVENT_LOOP_DELAY_MS: { type: 'integer', minimum: 0, default: 200, doc: 'load shedding (503 + `Retry-After`): mean event-loop delay over a sample; 0 = off' },
    PRESSURE_MAX_EVENT_LOOP_UTILIZATION: { type: 'number', minimum: 0, maximum: 1, default: 0, doc: 'load shedding: event-loop utilisation 0..1 over a sample, e.g. 0.98; 0 = off' },
    PRESSURE_MAX_HEAP_USED_BYTES: { type: 'integer', minimum: 0, default: 0, doc: 'load shedding: heap used; 0 = off' },
    PRESSURE_MAX_RSS_BYTES: { type: 'integer', minimum: 0, default: 0, doc: 'load shedding: resident set size; 0 = off' },
    PRESSURE_SAMPLE_INTERVAL_MS: { type: 'integer', minimum: 10, default: 500, doc: 'how often the load-shedding checks sample' },
    PRESSURE_RETRY_AFTER_SEC: { type: 'integer', minimum: 1, default: 5, doc: 'the `Retry-After` of a shed request' }
  },
  read: (e) => ({
    maxEventLoopDelayMs: e.PRESSURE_MAX_EVENT_LOOP_DELAY_MS,
    maxEventLoopUtilization: e.PRESSURE_MAX_EVENT_LOOP_UTILIZATION,
    maxHeapUsedBytes: e.PRESSURE_MAX_HEAP_USED_BYTES,
    maxRssBytes: e.PRESSURE_MAX_RSS_BYTES,
    sampleIntervalMs: e.PRESSURE_SAMPLE_INTERVAL_MS,
    retryAfterSec: e.PRESSURE_RETRY_AFTER_SEC
  })
})
