// Prometheus counters counted cheaply on the hot path: the HTTP metrics and the GraphQL metrics use it.
import type { Counter } from 'prom-client'

/**
 * Counts for one counter, kept in plain records on the hot path and added to the prom-client counter
 * when it is scraped: prom-client validates and hashes a label set on every inc (its labelled children
 * only bind the values), which cost more per request than all the rest of this bookkeeping. Records
 * are found through nested Maps by label value, so counting builds no string.
 */
export class Tally {
  readonly #labelNames: readonly string[]
  readonly #index = new Map<unknown, unknown>()
  readonly #records: { labels: Record<string, string>; count: number }[] = []

  constructor (labelNames: readonly string[]) {
    this.#labelNames = labelNames
  }

  /** The record of one label combination (values in labelNames order); callers add to its count. */
  of (...values: (string | number)[]): { count: number } {
    let node = this.#index
    for (let i = 0; i < values.length - 1; i++) {
      let next = node.get(values[i]) as Map<unknown, unknown> | undefined
      if (!next) node.set(values[i], next = new Map())
      node = next
    }
    const last = values[values.length - 1]
    let record = node.get(last) as { labels: Record<string, string>; count: number } | undefined
    if (!record) {
      record = { labels: Object.fromEntries(this.#labelNames.map((name, i) => [name, String(values[i])])), count: 0 }
      node.set(last, record)
      this.#records.push(record)
    }
    return record
  }

  /** Adds what was counted since the last scrape to `counter` (its collect function). */
  flushInto (counter: Counter<string>): void {
    for (const record of this.#records) {
      if (record.count === 0) continue
      counter.inc(record.labels, record.count)
      record.count = 0
    }
  }
}
