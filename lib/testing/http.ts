/**
 * A small HTTP client for end-to-end tests of the gateway.
 *
 * @module
 */

/** What a call returned. */
export interface HttpResult {
  /** The status code. */
  status: number;
  /** The parsed JSON body, or undefined when the body was empty. */
  // deno-lint-ignore no-explicit-any
  body: any;
  /** The raw body text. */
  text: string;
  /** The response headers. */
  headers: Headers;
}

/** Options of a call. */
export interface CallOptions {
  /** Bearer token. */
  token?: string;
  /** JSON body (serialised) or raw text/bytes. */
  json?: unknown;
  /** A raw body, sent as is. */
  raw?: BodyInit;
  /** Extra headers. */
  headers?: Record<string, string>;
}

/** Returns a function that calls the gateway at `baseUrl`. */
export function httpClient(
  baseUrl: string,
): (method: string, path: string, options?: CallOptions) => Promise<HttpResult> {
  return async (method, path, options = {}) => {
    const headers = new Headers(options.headers);
    if (options.token !== undefined) headers.set("authorization", `Bearer ${options.token}`);
    let body: BodyInit | undefined = options.raw;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
    }
    const res = await fetch(baseUrl + path, {
      method,
      headers,
      ...(body !== undefined ? { body } : {}),
    });
    const text = await res.text();
    let parsed: unknown;
    if (text !== "") {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
    }
    return { status: res.status, body: parsed, text, headers: res.headers };
  };
}

/** The status of `GET url`, or 0 when nothing answers. */
export async function status(url: string): Promise<number> {
  try {
    const res = await fetch(url);
    await res.body?.cancel();
    return res.status;
  } catch {
    return 0;
  }
}

/** Polls `check` every 20 ms until it holds; resolves with the ms it took, throws after `ms`. */
export async function until(
  check: () => Promise<boolean> | boolean,
  ms: number,
  what: string,
): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < ms) {
    if (await check()) return Date.now() - started;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`Timed out after ${ms} ms waiting for ${what}`);
}

/** Rejects when `promise` has not settled within `ms`. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
