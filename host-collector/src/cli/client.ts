// The CLI's HTTP client for a running collector.

export class ClientError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
    readonly code: string | null,
  ) {
    super(message);
  }
}

export interface ClientOptions {
  url: string;
  token?: string;
  /** Where `url` came from, for the message when it cannot be reached. */
  urlFrom?: string;
}

export class CollectorClient {
  private readonly base: string;

  constructor(private readonly opts: ClientOptions) {
    this.base = opts.url.replace(/\/+$/, '');
  }

  /** JSON request; returns status and body. Non-2xx statuses listed in `accept` are not errors. */
  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    accept: number[] = [],
    timeoutMs = 30_000,
  ): Promise<{ status: number; body: T }> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.opts.token) headers.authorization = `Bearer ${this.opts.token}`;
    let res: Response;
    try {
      res = await fetch(`${this.base}${path}`, {
        method,
        headers,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
      throw new ClientError(
        `cannot reach the collector at ${this.base} (${cause}); is "vsockdiag collector" running? (${this.opts.urlFrom ?? '--collector / VSOCKDIAG_URL'})`,
        null,
        null,
      );
    }
    const text = await res.text();
    const parsed = text ? (JSON.parse(text) as unknown) : undefined;
    if (!res.ok && !accept.includes(res.status)) {
      const e = (parsed as { error?: { code?: string; message?: string } } | undefined)?.error;
      throw new ClientError(e?.message ?? `HTTP ${res.status}`, res.status, e?.code ?? null);
    }
    return { status: res.status, body: parsed as T };
  }
}
