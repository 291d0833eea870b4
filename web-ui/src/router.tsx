// A pathname router: two routes, pushState navigation, back/forward via popstate.

import { useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from 'react';

const listeners = new Set<() => void>();

function subscribe(l: () => void): () => void {
  listeners.add(l);
  window.addEventListener('popstate', l);
  return () => {
    listeners.delete(l);
    window.removeEventListener('popstate', l);
  };
}

export function navigate(to: string): void {
  if (to === location.pathname + location.search) return;
  history.pushState(null, '', to);
  window.scrollTo(0, 0);
  for (const l of listeners) l();
}

export function usePathname(): string {
  return useSyncExternalStore(subscribe, () => location.pathname);
}

export type Route = { page: 'fleet' } | { page: 'sandbox'; id: string } | { page: 'missing' };

export function matchRoute(pathname: string): Route {
  if (pathname === '/' || pathname === '') return { page: 'fleet' };
  const m = /^\/sandboxes\/([^/]+)\/?$/.exec(pathname);
  if (m) {
    try {
      return { page: 'sandbox', id: decodeURIComponent(m[1]!) };
    } catch {
      return { page: 'missing' };
    }
  }
  return { page: 'missing' };
}

export const sandboxHref = (id: string) => `/sandboxes/${encodeURIComponent(id)}`;

/** An <a> that navigates in-page on a plain left click and stays a real link otherwise. */
export function Link({ to, onClick, ...rest }: { to: string } & AnchorHTMLAttributes<HTMLAnchorElement>) {
  const handle = (e: MouseEvent<HTMLAnchorElement>) => {
    onClick?.(e);
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return <a href={to} onClick={handle} {...rest} />;
}
