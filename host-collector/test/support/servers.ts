// HTTP servers a test starts (receivers for the exporters): closed after each test, with
// their connections, so a hung receiver never outlives its test. Call at a file's top level.

import type http from 'node:http';
import { afterEach } from 'vitest';

export function serversClosedAfterEach(): http.Server[] {
  const servers: http.Server[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  });
  return servers;
}
