/**
 * Structured logging: one JSON object per line on stderr, with a time, a level, the component
 * and a message. Callers must never pass secrets or tokens as fields.
 *
 * Lines are written together: debug and info lines (the access log, one per request) wait in
 * memory for at most 5 ms, or until 64 KiB wait, and then go out in one write; a warning or an error goes out at once, with everything before it, and whatever waits is
 * written when the process exits. One write per line cost the oauth-registry a fifth of its CPU
 * at info under load (the write itself, `op_write_sync` and V8's `writeBuffer`, in its profile).
 *
 * @module
 */

/** Severity of a log line. */
export type Level = "debug" | "info" | "warn" | "error";

const order: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
const encoder = new TextEncoder();

/** A logger bound to one component. */
export interface Logger {
  /** Writes a debug line. */
  debug(message: string, fields?: Record<string, unknown>): void;
  /** Writes an info line. */
  info(message: string, fields?: Record<string, unknown>): void;
  /** Writes a warning line. */
  warn(message: string, fields?: Record<string, unknown>): void;
  /** Writes an error line. */
  error(message: string, fields?: Record<string, unknown>): void;
  /** Whether lines of this level are written (to skip building fields that would be dropped). */
  enabled(level: Level): boolean;
}

/** The longest error message a line keeps, in UTF-16 code units. */
const maxErrorMessage = 1024;

/**
 * An error's message as a line shows it. Postgres quotes the value it refused in the message of a
 * data exception (SQLSTATE class 22: `invalid input syntax for type uuid: "..."`), and that value
 * is a query parameter, whatever a request carried: it is left out. Any message is cut at
 * {@link maxErrorMessage} (a parser's message may quote its whole input).
 */
function errorMessage(message: string, code: unknown): string {
  const text = typeof code === "string" && /^22[0-9A-Z]{3}$/.test(code)
    ? message.replace(/"[\s\S]*"/, '"(not logged)"')
    : message;
  return text.length <= maxErrorMessage
    ? text
    : `${text.slice(0, maxErrorMessage).toWellFormed()}... (cut)`;
}

function describe(value: unknown, depth = 0): unknown {
  if (value instanceof Error) {
    const code = (value as { code?: unknown }).code;
    const out: Record<string, unknown> = {
      name: value.name,
      message: errorMessage(value.message, code),
    };
    if (code !== undefined) out.code = code;
    // Causes are followed a few deep: a chain can be long, and one that loops never ends.
    if (value.cause !== undefined) {
      out.cause = depth < maxCauses ? describe(value.cause, depth + 1) : "(more causes not logged)";
    }
    return out;
  }
  return value;
}

/** How many causes of an error a line follows. */
const maxCauses = 8;

/** Lines waiting to be written, of every logger of the process (they share stderr). */
let waiting = "";
let flushTimer: ReturnType<typeof setTimeout> | undefined;
const flushAtChars = 64 * 1024;
const flushAfterMs = 5;

/** Writes every waiting line now. */
function flushLogs(): void {
  if (flushTimer !== undefined) clearTimeout(flushTimer);
  flushTimer = undefined;
  if (waiting === "") return;
  let bytes = encoder.encode(waiting);
  waiting = "";
  while (bytes.length > 0) bytes = bytes.subarray(Deno.stderr.writeSync(bytes));
}
globalThis.addEventListener("unload", flushLogs);

function emit(line: string, now: boolean): void {
  waiting += line;
  if (now || waiting.length >= flushAtChars) return flushLogs();
  if (flushTimer === undefined) {
    flushTimer = setTimeout(flushLogs, flushAfterMs);
    Deno.unrefTimer(flushTimer);
  }
}

/** The time of a line: ISO 8601, made once per millisecond (a busy process writes several). */
let lastMs = -1;
let lastTime = "";
function timeNow(): string {
  const ms = Date.now();
  if (ms !== lastMs) {
    lastMs = ms;
    lastTime = new Date(ms).toISOString();
  }
  return lastTime;
}

/** The members every line begins with; fields of these names take their place. */
const lineMembers = ["time", "level", "component", "msg"];

/**
 * A line's text: `{"time","level","component","msg", ...fields}` as JSON, an Error field as its
 * name, message, code and cause. The usual line (fields of plain values, none named as a line's
 * own member) is the head's text and the fields' JSON, without a merged object per line.
 */
export function formatLine(
  component: string,
  level: Level,
  message: string,
  fields?: Record<string, unknown>,
  componentJson = JSON.stringify(component),
): string {
  let plain = true;
  if (fields) {
    for (const k in fields) {
      if (fields[k] instanceof Error || lineMembers.includes(k)) {
        plain = false;
        break;
      }
    }
  }
  if (plain) {
    const head = `{"time":"${timeNow()}","level":"${level}","component":${componentJson},"msg":${
      JSON.stringify(message)
    }`;
    const rest = fields === undefined ? "{}" : JSON.stringify(fields);
    return rest === "{}" ? `${head}}\n` : `${head},${rest.slice(1)}\n`;
  }
  const line: Record<string, unknown> = { time: timeNow(), level, component, msg: message };
  for (const [k, v] of Object.entries(fields!)) line[k] = describe(v);
  return JSON.stringify(line) + "\n";
}

/** Creates a logger for a component; lines below `LOG_LEVEL` (default `info`) are dropped. */
export function createLogger(component: string, level: Level = "info"): Logger {
  const min = order[level];
  const componentJson = JSON.stringify(component);
  const write = (lvl: Level, message: string, fields?: Record<string, unknown>) => {
    if (order[lvl] < min) return;
    emit(formatLine(component, lvl, message, fields, componentJson), order[lvl] >= order.warn);
  };
  return {
    debug: (m, f) => write("debug", m, f),
    info: (m, f) => write("info", m, f),
    warn: (m, f) => write("warn", m, f),
    error: (m, f) => write("error", m, f),
    enabled: (lvl) => order[lvl] >= min,
  };
}
