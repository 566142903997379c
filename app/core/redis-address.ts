// Where a Redis is, as the settings name it: read by the configuration, used by whatever connects.
/**
 * Where a Redis is: one server (one URL), a Redis Cluster (the URLs of some of its nodes), or a server
 * that Redis Sentinel names (`urls[0]`'s host is the master group's name; its credentials and database
 * are the master's) with the sentinels' URLs.
 */
export interface RedisAddress {
  urls: string[]
  cluster: boolean
  sentinels?: string[]
}
