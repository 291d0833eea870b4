// Debian's Chromium driven by playwright-core, headless, for the dashboard's browser tests.
// Flags keep it off the network (this machine's network is closed) and out of the way.

import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

export function browserAvailable(): boolean {
  return fs.existsSync(CHROMIUM);
}

/** Playwright gives the browser a fresh temporary profile of its own. */
export async function launchBrowser(): Promise<{ browser: Browser; close: () => Promise<void> }> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    browser,
    close: () => browser.close(),
  };
}
