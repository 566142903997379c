// node bench/profile-summary.ts bench/profiles/<file>.cpuprofile [--top 25]
// What dominates a profile written by `npm run bench -- --profile` (node --cpu-prof): self time by
// function and by package (node_modules/<name>, the project's own directories, Node internals), so a
// change to the hot path can be aimed at what costs most.
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

export interface Summary {
  totalMs: number
  byFunction: { name: string; ms: number; share: number }[]
  byPackage: { name: string; ms: number; share: number }[]
}

function packageOf (url: string): string {
  if (url === '') return '(native / idle / gc)'
  const modules = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (modules) return modules[1]!
  if (url.startsWith('node:')) return 'node:internal'
  const own = /\/(app|plugins|routes|bench)\/([^/]+)/.exec(url)
  return own ? `${own[1]}/${own[2]}` : url
}

export function summarize (profile: Profile, top = 25): Summary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const selfUs = new Map<number, number>()
  profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))
  const fn = new Map<string, number>()
  const pkg = new Map<string, number>()
  let total = 0
  for (const [id, us] of selfUs) {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame
    total += us
    const key = `${functionName || '(anonymous)'} ${url ? `${url.replace(/^file:\/\/.*?\/(node_modules|app|plugins|routes|bench)\//, '$1/')}:${lineNumber + 1}` : ''}`.trim()
    fn.set(key, (fn.get(key) ?? 0) + us)
    const p = packageOf(url)
    pkg.set(p, (pkg.get(p) ?? 0) + us)
  }
  const rank = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).slice(0, top)
    .map(([name, us]) => ({ name, ms: us / 1000, share: us / total }))
  return { totalMs: total / 1000, byFunction: rank(fn), byPackage: rank(pkg) }
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { top: { type: 'string', default: '25' } }
  })
  for (const file of positionals) {
    const summary = summarize(JSON.parse(readFileSync(file, 'utf8')) as Profile, Number(values.top))
    const line = (r: { name: string; ms: number; share: number }) =>
      `  ${(r.share * 100).toFixed(1).padStart(5)}%  ${r.ms.toFixed(0).padStart(7)} ms  ${r.name}`
    console.log(`${file}: ${summary.totalMs.toFixed(0)} ms sampled\nself time by package:`)
    summary.byPackage.forEach((r) => console.log(line(r)))
    console.log('self time by function:')
    summary.byFunction.forEach((r) => console.log(line(r)))
  }
}
