// Debian's headless chromium driven by playwright-core, for the browser tests: a fresh profile per
// test, closed and removed when the test ends; null (the test failed with a clear word) when missing.
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium, type BrowserContext } from 'playwright-core'

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

export async function launchChromium (t: {
  fail (message: string): void
  teardown (fn: () => unknown): void
}): Promise<BrowserContext | null> {
  if (!existsSync(CHROMIUM)) {
    t.fail(
      `Chromium not found at ${CHROMIUM}: install Debian's chromium (apt-get install -y chromium; .ci/run does it) or set CHROMIUM_PATH`
    )
    return null
  }
  // Playwright adds --headless, --no-sandbox (chromiumSandbox: false) and --user-data-dir (this fresh directory).
  const profileDir = await mkdtemp(join(tmpdir(), 'test-chromium-'))
  const context = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    chromiumSandbox: false,
    args: [
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync'
    ]
  })
  t.teardown(async () => {
    await context.close()
    await rm(profileDir, { recursive: true, force: true })
  })
  return context
}
