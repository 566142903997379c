// URLs in settings: how their form is checked at start, and how they are shown in messages (never with
// their credentials).

/**
 * A URL's credentials anywhere in a message: scheme://, then the user info up to the authority's last
 * `@` (a password may hold an unencoded `@` or `/`). A message may end up anywhere (a terminal, a log
 * collector, a ticket), so every start-up error and every logged error shows URL settings this way.
 */
const URL_CREDENTIALS = /\b([a-z][a-z0-9+.-]*:\/\/)(?:[^\s@"'<>]*@)+/gi

/** `text` with the user and password of every URL in it replaced by `***` (redis://***@host:6379). */
export function withoutCredentials (text: string): string {
  return text.replace(URL_CREDENTIALS, '$1***@')
}

/**
 * Why `value` is not a URL with one of `schemes` and a host (a PostgreSQL URL may name a socket
 * directory as ?host= instead), or null when it is one. The value is never quoted: it may hold a password.
 */
export function urlProblem (name: string, value: string | null, schemes: string[], example: string): string | null {
  if (value === null) return null
  let url: URL
  try { url = new URL(value) } catch { return `${name} is not a URL (expected ${example})` }
  if (!schemes.includes(url.protocol)) return `${name} must start with ${schemes.map((s) => `${s}//`).join(' or ')} (expected ${example})`
  if (!url.hostname && !url.searchParams.has('host')) return `${name} names no host (expected ${example})`
  return null
}

/** An origin as browsers send it (lower-case host, default port dropped), or null when `entry` is not one. */
export function origin (entry: string): string | null {
  let url: URL
  try { url = new URL(entry) } catch { return null }
  const bare =
    ['http:', 'https:'].includes(url.protocol) &&
    !url.username &&
    !url.password &&
    url.pathname === '/' &&
    !url.search &&
    !url.hash
  return bare ? url.origin : null
}
