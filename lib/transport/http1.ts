/**
 * HTTP/1.1 messages (RFC 9112) as the guarded listeners (./http_guard.ts) read requests and write
 * responses: {@link RequestParser} follows what a client sends, request after request, and says
 * where each deadline stands; {@link responseBytes} writes a `Response` as bytes.
 *
 * Strict where leniency lets one request be read two ways (request smuggling): a request line is
 * `method SP target SP HTTP/1.x` with single spaces; a field name is a token directly followed by
 * its colon; a field value holds no control character but HTAB; a line folded onto the next
 * (obs-fold) is refused; `Content-Length` is digits only, and two that differ are refused;
 * `Transfer-Encoding` is answered 411 (bodies of declared length only); an HTTP/1.1 request needs
 * exactly one `Host`; a head has at most 64 KiB and {@link maxFields} fields. What is refused is answered by the listener and the connection closed, since
 * nothing after a request that cannot be framed can be trusted. Lines may end in a bare LF, as RFC
 * 9112 2.2 allows a recipient to read them; blank lines before a request line are skipped.
 *
 * @module
 */

import { GuardResponse } from "./guard_messages.ts";

/** Why a request is answered by the listener itself instead of its handler. */
export type Refusal = "length-required" | "bad-request" | "head-too-large" | "uri-too-long";

/** The largest request head read, in bytes. */
export const maxHeadBytes = 64 * 1024;
/** The most fields a request head may have (hyper's limit, which `Deno.serve` applies). */
export const maxFields = 100;

/** A request head, read and checked. */
export interface RequestHead {
  method: string;
  /** The request-target as sent: origin form (`/path?query`) or absolute form. */
  target: string;
  /** 1 for HTTP/1.1, 0 for HTTP/1.0. */
  minor: number;
  /** Field names and values in order: name, value, name, value... */
  fields: string[];
  /** The `Host` field, when sent once. */
  host: string | undefined;
  /** The body's declared length (0 without one). */
  length: number;
  /** Whether the connection ends after this request (`Connection: close`, or HTTP/1.0 without keep-alive). */
  close: boolean;
  /** Whether the client waits for `100 Continue` before sending its body. */
  expectContinue: boolean;
}

const CR = 13;
const LF = 10;
const latin1 = new TextDecoder("latin1");
const token = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const requestLine = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([\x21-\x7e]+) HTTP\/1\.([01])$/;
/** Control characters a field value may not hold (HTAB it may). */
// deno-lint-ignore no-control-regex
const badValue = /[\x00-\x08\x0a-\x1f\x7f]/;
/** A character outside ASCII. */
const nonAscii = /[^\x20-\x7e\t\r\n]/;

const enum State {
  /** Between requests, or inside a request head. */
  Head,
  /** Inside a body of known length. */
  Body,
  /** Refused: nothing more is read. */
  Refused,
}

/** What {@link RequestParser.next} found in the bytes pushed so far. */
export type Parsed =
  | { kind: "head"; head: RequestHead }
  /** Bytes of the current body: a view, valid until the next `push` or `keep`. */
  | { kind: "body"; bytes: Uint8Array }
  /** The current request's last byte was read. */
  | { kind: "end" }
  /** More bytes are needed. */
  | { kind: "more" }
  | { kind: "refused"; refusal: Refusal };

const more: Parsed = { kind: "more" };
const empty = new Uint8Array(0);
const end: Parsed = { kind: "end" };

/**
 * Follows a client's bytes, request after request: `push` the bytes of each read, then call
 * `next` until it asks for more. Exported for its tests.
 */
export class RequestParser {
  #state: State = State.Head;
  /**
   * Bytes pushed and not yet parsed: `#bytes[#at..#end]`, a view of the last read's bytes or, once
   * some are kept across reads, this parser's own buffer (`#owned`), which later reads append to.
   */
  #bytes: Uint8Array = empty;
  #at = 0;
  #end = 0;
  #owned = false;
  /** Where the scan for the current head's end stopped, and how the bytes before it ended. */
  #scanned = 0;
  /** 1 after LF, 2 after LF CR (a head ends at LF [CR] LF). */
  #tail = 0;
  /** Whether the current head has begun (a byte other than blank lines). */
  #inHead = false;
  /** How much of the current body is still to come, and its length. */
  #remaining = 0;
  #length = 0;
  /** Requests whose last byte was read. */
  completed = 0;
  /** Set once a head is refused; nothing more is read then. */
  refusal: Refusal | undefined;
  /**
   * The path of the request-target of the last head refused, or read with a body (which the
   * listener may refuse for want of budget), "" when unknown: read only to shape a refusal.
   */
  path = "";

  /** Which deadline applies: the first head (from the accept), between requests, a head, a body. */
  get phase(): Phase {
    if (this.#state === State.Body) return "body";
    if (this.completed === 0) return "first";
    return this.#inHead ? "head" : "idle";
  }

  /** Bytes of the current body read so far. */
  get bodyReceived(): number {
    return this.#length - this.#remaining;
  }

  /** Bytes held that are not parsed yet (a head still incomplete, or pipelined requests). */
  get buffered(): number {
    return this.#end - this.#at;
  }

  /** Adds the bytes of a read; `bytes` must stay unchanged until the next `push` or `keep`. */
  push(bytes: Uint8Array): void {
    if (this.#at === this.#end) {
      // Nothing kept: the read's bytes are parsed where they are, without a copy.
      this.#bytes = bytes;
      this.#at = this.#scanned = 0;
      this.#end = bytes.length;
      this.#owned = false;
      return;
    }
    // Bytes kept from earlier reads (`keep` made them this parser's own): the new ones are
    // appended, in a buffer that doubles when full, and the scan for a head's end goes on from
    // where it stopped, so a head sent a byte at a time costs O(n), not O(n²).
    this.#reserve(bytes.length);
    this.#bytes.set(bytes, this.#end);
    this.#end += bytes.length;
  }

  /** Copies what is not parsed yet out of the pushed bytes (before their buffer is read into again). */
  keep(): void {
    if (this.#at === this.#end) {
      this.#bytes = empty;
      this.#at = this.#end = this.#scanned = 0;
      this.#owned = false;
    } else if (!this.#owned) this.#reserve(0);
  }

  /** Makes `#bytes` this parser's own, its unparsed bytes first, with room for `more` after them. */
  #reserve(more: number): void {
    if (this.#owned && this.#end + more <= this.#bytes.length) return;
    const length = this.#end - this.#at;
    const into = this.#owned && length + more <= this.#bytes.length
      ? this.#bytes
      : new Uint8Array(Math.max(1024, 2 * (length + more)));
    if (into === this.#bytes) into.copyWithin(0, this.#at, this.#end);
    else into.set(this.#bytes.subarray(this.#at, this.#end));
    this.#scanned -= this.#at;
    this.#at = 0;
    this.#end = length;
    this.#bytes = into;
    this.#owned = true;
  }

  /** The next thing in the bytes pushed so far. */
  next(): Parsed {
    if (this.#state === State.Refused) return more;
    if (this.#state === State.Body) {
      if (this.#remaining === 0) {
        this.#state = State.Head;
        this.completed++;
        return end;
      }
      const available = this.#end - this.#at;
      if (available === 0) return more;
      const n = Math.min(available, this.#remaining);
      const bytes = this.#bytes.subarray(this.#at, this.#at + n);
      this.#at += n;
      this.#remaining -= n;
      return { kind: "body", bytes };
    }
    return this.#head();
  }

  #head(): Parsed {
    const bytes = this.#bytes;
    if (!this.#inHead) {
      // Blank lines before a request line are skipped (RFC 9112 2.2); they start no head.
      let s = this.#at;
      while (s < this.#end && (bytes[s] === CR || bytes[s] === LF)) s++;
      this.#at = s;
      if (s === this.#end) return more;
      this.#inHead = true;
      this.#scanned = s;
      this.#tail = 0;
    }
    // The head ends at an empty line: LF [CR] LF, #tail keeping how the bytes scanned ended.
    let tail = this.#tail;
    let stop = -1;
    const end = this.#end;
    for (let i = Math.max(this.#scanned, this.#at); i < end; i++) {
      const b = bytes[i];
      if (b === LF) {
        if (tail !== 0) {
          stop = i + 1;
          break;
        }
        tail = 1;
      } else tail = b === CR && tail === 1 ? 2 : 0;
    }
    if ((stop === -1 ? end : stop) - this.#at > maxHeadBytes) {
      // A request line that alone is over the limit is a target too long to read: 414, not the
      // 431 of too many or too large fields (RFC 9112 3, RFC 9110 15.5.15).
      const line = bytes.subarray(this.#at, this.#at + maxHeadBytes).indexOf(LF);
      return this.#refuse(
        line === -1 ? "uri-too-long" : "head-too-large",
        latin1.decode(bytes.subarray(this.#at, this.#at + 8192)),
      );
    }
    if (stop === -1) {
      this.#scanned = end;
      this.#tail = tail;
      return more;
    }
    const text = latin1.decode(bytes.subarray(this.#at, stop));
    this.#at = stop;
    this.#inHead = false;
    const head = readHead(text);
    if (typeof head === "string") return this.#refuse(head, text);
    if (head.length > 0) {
      this.path = pathOf(head.target);
      this.#state = State.Body;
      this.#length = this.#remaining = head.length;
    } else {
      this.completed++;
      this.#length = this.#remaining = 0;
    }
    return { kind: "head", head };
  }

  #refuse(refusal: Refusal, text: string): Parsed {
    const line = text.slice(0, text.indexOf("\n") >>> 0);
    this.path = pathOf(line.split(" ")[1] ?? "");
    this.#state = State.Refused;
    this.refusal = refusal;
    this.#bytes = empty;
    this.#at = this.#end = 0;
    this.#owned = false;
    return { kind: "refused", refusal };
  }
}

/** Where a client is in its requests. */
export type Phase = "first" | "idle" | "head" | "body";

/** Reads a whole head (its text through the empty line); a refusal when it cannot be. */
function readHead(text: string): RequestHead | Refusal {
  let lineEnd = text.indexOf("\n");
  const first = text.slice(0, text.charCodeAt(lineEnd - 1) === CR ? lineEnd - 1 : lineEnd);
  const m = requestLine.exec(first);
  if (!m) return "bad-request";
  const head: RequestHead = {
    method: m[1]!,
    target: m[2]!,
    minor: m[3] === "1" ? 1 : 0,
    fields: [],
    host: undefined,
    length: 0,
    close: m[3] !== "1",
    expectContinue: false,
  };
  let hosts = 0;
  let length: number | undefined;
  for (let at = lineEnd + 1; at < text.length; at = lineEnd + 1) {
    lineEnd = text.indexOf("\n", at);
    const stop = text.charCodeAt(lineEnd - 1) === CR ? lineEnd - 1 : lineEnd;
    if (stop === at) break; // the empty line
    const colon = text.indexOf(":", at);
    if (colon <= at || colon >= stop) return "bad-request"; // no name, or obs-fold
    const name = text.slice(at, colon);
    if (!token.test(name)) return "bad-request";
    let from = colon + 1;
    let to = stop;
    while (from < to && (text.charCodeAt(from) === 32 || text.charCodeAt(from) === 9)) from++;
    while (to > from && (text.charCodeAt(to - 1) === 32 || text.charCodeAt(to - 1) === 9)) to--;
    const value = text.slice(from, to);
    if (badValue.test(value)) return "bad-request";
    if (head.fields.push(name, value) > 2 * maxFields) return "head-too-large";
    switch (name.length) {
      case 4:
        if (name.toLowerCase() === "host") {
          hosts++;
          head.host = value;
        }
        break;
      case 6:
        if (name.toLowerCase() === "expect" && value.toLowerCase() === "100-continue") {
          head.expectContinue = head.minor === 1;
        }
        break;
      case 10:
        if (name.toLowerCase() === "connection") {
          for (const option of value.toLowerCase().split(",")) {
            const o = option.trim();
            if (o === "close") head.close = true;
            else if (o === "keep-alive" && head.minor === 0) head.close = false;
          }
        }
        break;
      case 14:
        if (name.toLowerCase() === "content-length") {
          const n = Number(value);
          if (!/^\d+$/.test(value) || n > Number.MAX_SAFE_INTEGER) return "bad-request";
          if (length !== undefined && length !== n) return "bad-request";
          length = n;
        }
        break;
      case 17:
        if (name.toLowerCase() === "transfer-encoding") return "length-required";
        break;
    }
  }
  // RFC 9112 3.2: an HTTP/1.1 request without Host, or with more than one, is answered 400.
  if (head.minor === 1 ? hosts !== 1 : hosts > 1) return "bad-request";
  head.length = length ?? 0;
  return head;
}

/**
 * The path of a request-target (origin form, or absolute form), without its query; "" when it
 * is neither.
 */
export function pathOf(target: string): string {
  if (target.startsWith("/")) {
    const q = target.indexOf("?");
    return q === -1 ? target : target.slice(0, q);
  }
  try {
    return new URL(target).pathname;
  } catch {
    return "";
  }
}

/** The reason phrases of the statuses the handlers answer with; others get none. */
const reasons: Record<number, string> = {
  100: "Continue",
  200: "OK",
  201: "Created",
  202: "Accepted",
  204: "No Content",
  301: "Moved Permanently",
  302: "Found",
  303: "See Other",
  304: "Not Modified",
  307: "Temporary Redirect",
  308: "Permanent Redirect",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  406: "Not Acceptable",
  409: "Conflict",
  411: "Length Required",
  412: "Precondition Failed",
  413: "Content Too Large",
  414: "URI Too Long",
  415: "Unsupported Media Type",
  429: "Too Many Requests",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};

/** Fields a handler may not set: the listener frames the message itself. */
const framingFields = new Set(["content-length", "transfer-encoding", "connection", "keep-alive"]);

/** `Date` as RFC 9110 5.6.7 writes it, made once a second. */
let dateLine = "";
let dateSecond = -1;
function date(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateLine = `date: ${new Date(second * 1000).toUTCString()}\r\n`;
  }
  return dateLine;
}

const encoder = new TextEncoder();

/**
 * A response as the bytes of one write: its status line, the handler's fields (but those that
 * frame the message), `date`, `content-length` (the body's; for a HEAD request, the handler's when
 * it gives one), `connection: close` when `close`, and the body unless `head` (a HEAD request) or
 * the status has none.
 */
export async function responseBytes(
  response: Response,
  options: { head: boolean; close: boolean },
): Promise<Uint8Array> {
  const status = response.status;
  // A GuardResponse's body is in memory: written as it is, not read through a stream.
  const body = response instanceof GuardResponse
    ? GuardResponse.bytesOf(response)
    : await response.bytes();
  let text = `HTTP/1.1 ${status} ${reasons[status] ?? response.statusText}\r\n`;
  // forEach, not for-of: Deno's Headers iterator cost 6 to 9 us a response of 5 fields (its
  // WebIDL iterator objects), forEach 1.4 (a loop of 100,000 here).
  response.headers.forEach((value, name) => {
    if (!framingFields.has(name)) text += `${name}: ${value}\r\n`;
  });
  text += date();
  const bodiless = status === 204 || status === 304 || status < 200;
  // A HEAD's answer may give the length its GET's body would have.
  const given = options.head ? response.headers.get("content-length") : null;
  const length = given !== null && /^\d+$/.test(given) ? given : body.length;
  if (!bodiless) text += `content-length: ${length}\r\n`;
  if (options.close) text += "connection: close\r\n";
  text += "\r\n";
  const sent = bodiless || options.head ? 0 : body.length;
  const out = new Uint8Array(text.length + sent);
  const written = writeLatin1(text, out);
  if (sent > 0) out.set(body, written);
  return out;
}

/** Writes `text` as Latin-1 (field values are byte strings: one byte a character). */
function writeLatin1(text: string, out: Uint8Array): number {
  // Nearly always printable ASCII, which the encoder writes as Latin-1; else byte by byte.
  if (!nonAscii.test(text)) return encoder.encodeInto(text, out).written;
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return text.length;
}

/** `100 Continue`, for a client that waits for it before sending its body. */
export const continueBytes: Uint8Array = encoder.encode("HTTP/1.1 100 Continue\r\n\r\n");
