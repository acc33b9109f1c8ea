/**
 * The `Request` a guarded listener (./http_guard.ts) hands its handler, and the `Response` a
 * handler may answer with instead of Deno's: a request whose head was read and checked by
 * ./http1.ts and whose whole body is already here, in one array; a response whose body is one
 * string or array, which the listener writes without reading a stream. Each is a `Request` or a
 * `Response` to every reader (the members, the body's ways of being read, the defaults of one made
 * with `new Request(url, { method, body })` or `new Response(body, { status, headers })`), without
 * what making one of Deno's costs on every request: WebIDL conversions, a `Headers` whose every
 * field is checked again (the parser checked them), a body stream made whether or not it is read.
 * Measured in a loop of 100,000, three times: a token request's head of six fields made into a
 * request, eight `headers.get` and its body read with `bytes()`, 3.7 to 4.5 us with `new Request`
 * and 0.70 to 0.79 with these (the URL parse included); a token answer made with `json`, given two
 * fields and written by `responseBytes`, 4.6 to 5.2 us with `Response.json`, 3.5 to 3.7 with these.
 *
 * {@link FieldHeaders} is a `Headers` as the Fetch standard says one behaves: names are compared
 * without case, values of one name are joined by `, ` (but `set-cookie`'s, which
 * `getSetCookie()` lists), iteration is in the order of the lowercased names, and a field set by a
 * handler is checked as `Headers` checks it (a token name; a value without NUL, CR or LF, and
 * without characters above U+00FF; leading and trailing whitespace taken off).
 *
 * @module
 */

/** A field name: an RFC 9110 token. */
const tokenName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** What a field value may not hold (Fetch's header value, and a byte string). */
// deno-lint-ignore no-control-regex
const badValue = /[\x00\r\n]|[^\x00-\xff]/;
/** Leading and trailing HTTP whitespace (Fetch's header value normalization). */
const edges = /^[\t\n\r ]+|[\t\n\r ]+$/g;

function checkedName(name: string): string {
  const text = String(name);
  if (!tokenName.test(text)) throw new TypeError(`Invalid header name: "${text}"`);
  return text.toLowerCase();
}

function checkedValue(value: string): string {
  const text = String(value).replace(edges, "");
  if (badValue.test(text)) throw new TypeError(`Invalid header value: "${text}"`);
  return text;
}

type Entries = ReturnType<Headers["entries"]>;
type Names = ReturnType<Headers["keys"]>;

/** The fields of a request or a response: a `Headers`. */
export class FieldHeaders implements Headers {
  /** Lowercased name to its values joined by `, `. */
  #fields = new Map<string, string>();
  /** `set-cookie`'s values, one by one. */
  #cookies: string[] = [];

  /**
   * `fields`: names and values in turn, as ./http1.ts reads them (names are tokens, values
   * checked and trimmed), so taken as they are.
   */
  constructor(fields?: readonly string[]) {
    if (!fields) return;
    for (let i = 0; i < fields.length; i += 2) this.#add(fields[i]!.toLowerCase(), fields[i + 1]!);
  }

  #add(name: string, value: string): void {
    if (name === "set-cookie") this.#cookies.push(value);
    const held = this.#fields.get(name);
    this.#fields.set(name, held === undefined ? value : `${held}, ${value}`);
  }

  append(name: string, value: string): void {
    this.#add(checkedName(name), checkedValue(value));
  }

  delete(name: string): void {
    const key = checkedName(name);
    this.#fields.delete(key);
    if (key === "set-cookie") this.#cookies = [];
  }

  get(name: string): string | null {
    const value = this.#fields.get(name.toLowerCase());
    if (value !== undefined) return value;
    // A name that is not a token is refused, as by `Headers`; any other is simply absent.
    checkedName(name);
    return null;
  }

  getSetCookie(): string[] {
    return [...this.#cookies];
  }

  has(name: string): boolean {
    return this.#fields.has(name.toLowerCase()) || (checkedName(name), false);
  }

  set(name: string, value: string): void {
    const key = checkedName(name);
    const text = checkedValue(value);
    this.#fields.set(key, text);
    if (key === "set-cookie") this.#cookies = [text];
  }

  /** The fields in the order Fetch iterates them: sorted names, each `set-cookie` on its own. */
  #list(): [string, string][] {
    const names = [...this.#fields.keys()].sort();
    const list: [string, string][] = [];
    for (const name of names) {
      if (name === "set-cookie") { for (const c of this.#cookies) list.push([name, c]); }
      else list.push([name, this.#fields.get(name)!]);
    }
    return list;
  }

  forEach(
    callback: (value: string, key: string, parent: this) => void,
    thisArg?: unknown,
  ): void {
    for (const [name, value] of this.#list()) callback.call(thisArg, value, name, this);
  }

  entries(): Entries {
    return this.#list()[Symbol.iterator]() as Entries;
  }

  keys(): Names {
    return this.#list().map(([name]) => name)[Symbol.iterator]() as Names;
  }

  values(): Names {
    return this.#list().map(([, value]) => value)[Symbol.iterator]() as Names;
  }

  [Symbol.iterator](): Entries {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }
}

/** Methods `new Request` writes in capitals, whatever their case (Fetch's method normalization). */
const normalized = new Set(["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"]);
/** Methods `new Request` refuses (Fetch's forbidden methods). */
const forbidden = new Set(["CONNECT", "TRACE", "TRACK"]);

/**
 * The method as `new Request` would have it, or undefined for one it refuses. `method` is a token
 * (./http1.ts checked it).
 */
export function requestMethod(method: string): string | undefined {
  const upper = method.toUpperCase();
  if (forbidden.has(upper)) return undefined;
  return normalized.has(upper) ? upper : method;
}

const empty = new Uint8Array(0);
const utf8 = new TextDecoder();
const encoder = new TextEncoder();

/**
 * A body that is all in memory, read once in any of the ways of Fetch's `Body` (a second read is
 * refused, as `Request`'s and `Response`'s are). `contentType` gives a blob its type and a form
 * its parsing.
 */
abstract class HeldBody {
  #held: Uint8Array<ArrayBuffer> | string | null;
  #read = false;
  #stream: ReadableStream<Uint8Array<ArrayBuffer>> | undefined;

  constructor(body: Uint8Array<ArrayBuffer> | string | null) {
    this.#held = body;
  }

  protected abstract contentType(): string | null;

  /** The bytes, encoded when first asked for (null for no body), whether read or not. */
  protected held(): Uint8Array<ArrayBuffer> | null {
    if (typeof this.#held === "string") this.#held = encoder.encode(this.#held);
    return this.#held;
  }

  /** The body as a stream, made when first asked for. */
  get body(): ReadableStream<Uint8Array<ArrayBuffer>> | null {
    const held = this.held();
    if (held === null) return null;
    if (!this.#stream) {
      const bytes = this.#read ? empty : held;
      // Pulled only when read (no queue of its own): a read takes the body, as Fetch's does.
      this.#stream = new ReadableStream({
        pull: (controller) => {
          this.#read = true;
          if (bytes.length > 0) controller.enqueue(bytes);
          controller.close();
        },
      }, { highWaterMark: 0 });
    }
    return this.#stream;
  }

  get bodyUsed(): boolean {
    return this.#read || (this.#stream?.locked ?? false);
  }

  #take(): Promise<Uint8Array<ArrayBuffer>> {
    if (this.bodyUsed) return Promise.reject(new TypeError("Body already consumed"));
    this.#read = true;
    return Promise.resolve(this.held() ?? empty);
  }

  bytes(): Promise<Uint8Array<ArrayBuffer>> {
    return this.#take();
  }

  async arrayBuffer(): Promise<ArrayBuffer> {
    const bytes = await this.#take();
    return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  }

  async text(): Promise<string> {
    return utf8.decode(await this.#take());
  }

  /** The body as text, as it comes (all at once, here). */
  textStream(): ReadableStream<string> {
    const stream = this.body ?? new ReadableStream({ start: (c) => c.close() });
    return stream.pipeThrough(new TextDecoderStream());
  }

  async json(): Promise<unknown> {
    return JSON.parse(await this.text());
  }

  async blob(): Promise<Blob> {
    return new Blob([await this.#take()], { type: (this.contentType() ?? "").toLowerCase() });
  }

  /** Read as Fetch reads a form (rare here: made through a `Response` of the same bytes). */
  async formData(): Promise<FormData> {
    const body = await this.#take();
    const type = this.contentType();
    return await new Response(body.length > 0 ? body : null, {
      headers: type === null ? {} : { "content-type": type },
    }).formData();
  }
}

/** A copy of `headers`, for a clone. */
function copied(headers: Headers): FieldHeaders {
  const copy = new FieldHeaders();
  headers.forEach((value, name) => copy.append(name, value));
  return copy;
}

/**
 * A request whose body is all here. `url` is an absolute URL, already parsed (its `href`);
 * `method` as {@link requestMethod} gives it; `body` null for none.
 */
export class GuardRequest extends HeldBody implements Request {
  readonly cache: RequestCache = "default";
  readonly credentials: RequestCredentials = "same-origin";
  readonly destination: RequestDestination = "";
  readonly integrity = "";
  readonly keepalive = false;
  readonly mode: RequestMode = "cors";
  readonly redirect: RequestRedirect = "follow";
  readonly referrer = "about:client";
  readonly referrerPolicy: ReferrerPolicy = "";
  readonly isHistoryNavigation = false;
  readonly isReloadNavigation = false;
  #signal: AbortSignal | undefined;

  constructor(
    readonly method: string,
    readonly url: string,
    readonly headers: FieldHeaders,
    body: Uint8Array<ArrayBuffer> | null,
  ) {
    super(body);
  }

  protected contentType(): string | null {
    return this.headers.get("content-type");
  }

  /** A never-aborted signal, as a request made with `new Request` has. */
  get signal(): AbortSignal {
    return this.#signal ??= new AbortController().signal;
  }

  clone(): GuardRequest {
    if (this.bodyUsed) throw new TypeError("Body already consumed");
    return new GuardRequest(this.method, this.url, copied(this.headers), this.held());
  }

  get [Symbol.toStringTag](): string {
    return "Request";
  }
}

/** What a {@link GuardResponse} is made with: a status (200 unless given), and fields. */
export interface AnswerInit {
  status?: number | undefined;
  /** Fields by name, checked as `Headers` checks them; or fields already made. */
  headers?: Record<string, string> | FieldHeaders | undefined;
}

/** The fields `headers` gives: those made already, or made from a record (checked). */
function fieldsOf(headers: AnswerInit["headers"]): FieldHeaders {
  if (headers instanceof FieldHeaders) return headers;
  const fields = new FieldHeaders();
  for (const name in headers) fields.set(name, headers[name]!);
  return fields;
}

/**
 * A response whose body is one string (UTF-8) or one array, or none: what the gateway answers
 * with on its busy paths. ./http1.ts's `responseBytes` writes its body as it is, without a stream
 * read. A `string` body gets `content-type: text/plain;charset=UTF-8` unless the fields name one,
 * as `new Response(string)` does.
 */
export class GuardResponse extends HeldBody implements Response {
  readonly headers: FieldHeaders;
  readonly status: number;
  readonly statusText = "";
  readonly redirected = false;
  readonly type: ResponseType = "default";
  readonly url = "";

  constructor(body: string | Uint8Array<ArrayBuffer> | null, init: AnswerInit = {}) {
    super(body);
    const status = init.status ?? 200;
    if (!Number.isInteger(status) || status < 200 || status > 599) {
      throw new RangeError(`The status ${status} is not in the range 200 to 599`);
    }
    if (body !== null && (status === 204 || status === 304)) {
      throw new TypeError(`A ${status} response cannot have a body`);
    }
    this.status = status;
    this.headers = fieldsOf(init.headers);
    if (typeof body === "string" && !this.headers.has("content-type")) {
      this.headers.set("content-type", "text/plain;charset=UTF-8");
    }
  }

  /** A JSON answer, as `Response.json` makes one. */
  static json(data: unknown, init: AnswerInit = {}): GuardResponse {
    const text = JSON.stringify(data);
    if (text === undefined) throw new TypeError("The data is not JSON-serializable");
    const headers = fieldsOf(init.headers);
    if (!headers.has("content-type")) headers.set("content-type", "application/json");
    return new GuardResponse(text, { status: init.status, headers });
  }

  /** The body's bytes, for the listener that writes it, without reading it as a reader would. */
  static bytesOf(response: GuardResponse): Uint8Array<ArrayBuffer> {
    return response.held() ?? empty;
  }

  protected contentType(): string | null {
    return this.headers.get("content-type");
  }

  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  clone(): GuardResponse {
    if (this.bodyUsed) throw new TypeError("Body already consumed");
    return new GuardResponse(this.held(), { status: this.status, headers: copied(this.headers) });
  }

  get [Symbol.toStringTag](): string {
    return "Response";
  }
}
