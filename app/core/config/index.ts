// The service's configuration, read from the environment by area. Each area (a file of this folder) declares
// its settings once, each environment variable with its type, bounds, default and documentation, and
// `read`s them into its part of `Config`; `Config`'s type is composed of what those `read`s return, and
// docs/settings.md's tables are generated from the same declarations (npm run settings:docs).
//
// Two profiles: production (NODE_ENV=production: safe defaults, secrets required) and development
// (anything else: introspection, query UI and ad-hoc queries open, a fixed development JWT secret).
// The service loads every area (loadConfig); a command names the areas it needs (loadSettings), so
// `npm run token` reads the signing key alone and `npm run app` the store and the limits, no secret.
import type { AreaResult } from './area.ts'
import { budgets } from './budgets.ts'
import { cors, schemaDiscovery } from './browsers.ts'
import { cursors } from './cursors.ts'
import { jwt, tokenSigning } from './jwt.ts'
import { loadSettings, environment, type Environment, type Loaded } from './load.ts'
import { loadShedding } from './load-shedding.ts'
import { document, execution, input } from './operations.ts'
import { apq, deployments, httpCaching, persisted } from './persisted.ts'
import { profile } from './profile.ts'
import { redis } from './redis.ts'
import { responseCache } from './response-cache.ts'
import { server } from './server.ts'
import { soap } from './soap.ts'
import { store } from './store.ts'
import { streaming } from './streaming.ts'
import { tracing } from './tracing.ts'

export type { Profile } from './area.ts'
export { ConfigError, environment, loadSettings, loadSettingsOrExit, type Environment, type Loaded } from './load.ts'
export { withoutCredentials } from './urls.ts'
export { DEV_JWT_SECRET } from './jwt.ts'
export type { SoapSigning } from './soap.ts'
export { TRACE_SAMPLERS, type TracingConfig } from './tracing.ts'
export {
  apq, budgets, cors, cursors, deployments, document, execution, httpCaching, input, jwt, loadShedding, persisted,
  profile, redis, responseCache, schemaDiscovery, server, soap, store, streaming, tokenSigning, tracing
}

/** Every area of the service, in the order docs/settings.md and the type errors of a bad start list them. */
export const SERVICE_AREAS = [
  profile, server, loadShedding, store, redis, jwt, document, input, execution, budgets, cors, schemaDiscovery,
  persisted, deployments, apq, httpCaching, responseCache, soap, cursors, streaming, tracing
] as const

/** The service's whole configuration: each area's result under its key (config.server.port, config.store...). */
export type Config = Loaded<typeof SERVICE_AREAS>

/** What signing a token needs (npm run token): see tokenSigning. */
export type SigningConfig = AreaResult<typeof tokenSigning>

/**
 * Reads the service's configuration from `env` (the process environment and `.env` by default); throws a
 * ConfigError naming every missing or invalid setting when it is unusable.
 */
export function loadConfig (env: Environment = environment()): Config {
  return loadSettings(SERVICE_AREAS, env)
}

/** Every variable the service reads, in the order of SERVICE_AREAS. */
export const SETTING_NAMES: readonly string[] = SERVICE_AREAS.flatMap((area) => Object.keys(area.settings))
