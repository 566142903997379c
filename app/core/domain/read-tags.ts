// The names of what a request read and what a write changed. The response cache keeps, with each answer,
// the tags of everything the answer read; a write drops the answers that carry a tag it changed. One
// definition for both sides: the readers (the per-request loaders) and the writers (users.ts, messages.ts,
// and PostgreSQL's change-log triggers for writes made beside the service: store/postgres.ts).

/**
 * What a changed row of each table is tagged with: `prefix` followed by its `column`, the table's own tag
 * (for a change too wide to name row by row), and a tag every change of it carries (lists of users).
 */
export const tableTags = {
  users: { prefix: 'user:', column: 'id', table: 'table:users', everyChange: 'users' },
  messages: { prefix: 'room:', column: 'room_id', table: 'table:messages', everyChange: null }
} as const

export const readTags = {
  /** One user, read by id: found or not (a miss becomes a hit once the user is created). */
  user: (id: string) => `${tableTags.users.prefix}${id}`,
  /** Any page or list of users: a create, an update or a delete can change what a list shows. */
  users: tableTags.users.everyChange,
  /** A room's messages (their authors are read as `user:<id>`: deleting a user deletes their messages). */
  room: (roomId: string) => `${tableTags.messages.prefix}${roomId}`,
  /**
   * Every row of a table: each read of the table carries its tag too, so a change too wide to name row by
   * row (a bulk load, a TRUNCATE: the store's change log names the table instead) drops every answer that
   * read the table, and no other.
   */
  usersTable: tableTags.users.table,
  messagesTable: tableTags.messages.table
} as const

/**
 * The tags one request read, collected as it runs. Made only when someone asks (a cacheable query); the
 * loaders' recording is then a null check per batch or list for every other request.
 */
export type ReadSet = Set<string>
