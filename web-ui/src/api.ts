// The dashboard's view of the collector API. A token, when the collector wants one, is
// asked for once and kept for the browser session.

export interface SandboxSummary {
  id: string;
  state: string;
  reason: string;
  since: string;
  generation: number;
  connected: boolean;
  lastPhase: string | null;
}

export class Unauthorized extends Error {}

const TOKEN_KEY = 'vsockdiag.token';

export function setToken(token: string): void {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export async function getJson<T>(path: string): Promise<T> {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const res = await fetch(path, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  if (res.status === 401) throw new Unauthorized('token required');
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
  return (await res.json()) as T;
}
