// The bearer token, checked in constant time (the API's Authorization header and the
// stream's ?token= alike).

import { timingSafeEqual } from 'node:crypto';

export function sameToken(got: string, want: string): boolean {
  const a = Buffer.from(got);
  const b = Buffer.from(want);
  return a.length === b.length && timingSafeEqual(a, b);
}
