// Adding a hook to one route from an onRoute hook: a route's hook option may be absent, one function
// or a list, and the hook added runs after the route's own (e.g. after the route has identified the caller).
export function appendRouteHook<T> (existing: T | T[] | undefined, hook: T): T[] {
  return existing === undefined ? [hook] : Array.isArray(existing) ? [...existing, hook] : [existing, hook]
}
