// npm run seed -- --users 10000 [--messages 50000]
// Loads realistic users and messages into the configured store (SQLITE_PATH or DATABASE_URL).
import { readCommandLine, refuseCommandLine } from '../app/core/command-line.ts'
import { loadSettingsOrExit, SERVICE_AREAS } from '../app/core/config/index.ts'
import { openStore } from '../app/core/store/index.ts'
import { seed } from '../app/core/store/sample-data.ts'

const USAGE = `usage: npm run seed -- [--users N] [--messages M]
Loads N realistic users (default 1000) and M messages (default 5 × N) into the configured store:
DATABASE_URL when set, else the embedded file SQLITE_PATH (docs/settings.md). Adds to what is there.`

const { values } = readCommandLine(USAGE, {
  options: {
    users: { type: 'string', default: '1000' },
    messages: { type: 'string', default: '' }
  }
})
const users = Number(values.users)
const messages = values.messages === '' ? users * 5 : Number(values.messages)
if (!Number.isInteger(users) || users < 0 || !Number.isInteger(messages) || messages < 0) {
  refuseCommandLine(USAGE, '--users and --messages take whole numbers, 0 or more')
}

// The service's whole configuration: run beside a deployment, the command refuses what the service would.
const config = loadSettingsOrExit(SERVICE_AREAS)
const store = await openStore(config)
const started = performance.now()
await seed(store, users, messages)
console.log(
  `seeded ${users} users and ${messages} messages into ${store.kind} in ${Math.round(performance.now() - started)} ms`
)
await store.close()
