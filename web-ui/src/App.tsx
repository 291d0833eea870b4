// The dashboard: a header with the live indicator, the fleet (/) or one sandbox
// (/sandboxes/:id), and the token prompt when the API answers 401.
// Guest-supplied text is only ever rendered as React text.

import { useEffect, useSyncExternalStore } from 'react';
import { auth } from './api';
import { LiveStatus } from './components/LiveStatus';
import { useAuthEpoch } from './hooks';
import { TokenPrompt } from './components/TokenPrompt';
import { Fleet } from './pages/Fleet';
import { SandboxPage } from './pages/Sandbox';
import { Link, matchRoute, usePathname } from './router';
import { stream } from './stream';

export function App() {
  const pathname = usePathname();
  const route = matchRoute(pathname);
  const needToken = useSyncExternalStore(auth.subscribe, auth.needToken);
  const epoch = useAuthEpoch();

  useEffect(() => {
    stream.start();
  }, []);
  // A token was entered: the stream reconnects with it.
  useEffect(() => {
    if (epoch > 0) stream.restart();
  }, [epoch]);

  const title = route.page === 'sandbox' ? `${route.id} · vsockdiag` : 'vsockdiag';
  useEffect(() => {
    document.title = title;
  }, [title]);

  return (
    <>
      <header className="topbar">
        <Link to="/" className="brand">
          vsockdiag
        </Link>
        <span className="topbar-sub">sandbox boot diagnostics</span>
        <span className="spacer" />
        <LiveStatus />
      </header>
      {route.page === 'fleet' && <Fleet />}
      {route.page === 'sandbox' && <SandboxPage key={route.id} id={route.id} />}
      {route.page === 'missing' && (
        <main className="page">
          <p>
            No such page. <Link to="/">All sandboxes</Link>
          </p>
        </main>
      )}
      {needToken && <TokenPrompt />}
    </>
  );
}
