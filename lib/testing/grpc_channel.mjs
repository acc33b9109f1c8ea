/**
 * One stock @grpc/grpc-js channel on Node.js, driven over stdin and stdout by
 * lib/testing/grpc_client.ts: the tests' gRPC client.
 *
 * Why Node: under Deno, grpc-js runs on Deno's node:http2 client, which now and then aborts its
 * whole process (nghttp2's assertion `stream->closed_next == NULL` in find_stream_on_goaway_func,
 * or SIGSEGV), and the test file with it. The servers under test are ours; the client is the
 * stock one, on the runtime it is made for.
 *
 * Usage: `node grpc_channel.mjs host:port`. Each line on stdin is one call, as JSON:
 *
 *     {"id": 1, "kind": "unary", "path": "/pkg.Service/Method", "requests": ["<base64>"],
 *      "metadata": {"authorization": ["Bearer x"], "x-bin": ["<base64>"]},
 *      "timeoutMs": 10000, "cancelAfter": 1}
 *
 * `kind` is unary, server_streaming, client_streaming or bidi_streaming; `requests` are the
 * serialized messages (one for unary and server streaming); metadata keys ending in `-bin` carry
 * base64; `timeoutMs` (a deadline that far from now) and `cancelAfter` (cancel the call once that
 * many responses arrived) are optional. Each call is answered by one line:
 *
 *     {"id": 1, "responses": ["<base64>"], "code": 0, "details": "", "metadata": {...}}
 *
 * with the status and its metadata (the trailers; `-bin` values in base64), or
 * `{"id": 1, "error": "..."}` when the call could not be made. At the end of stdin the channel is
 * closed, and the process exits once the calls under way have their answers.
 *
 * @module
 */
import * as grpc from "@grpc/grpc-js";
import { createInterface } from "node:readline";

const address = process.argv[2];
if (!address) {
  process.stderr.write("usage: node grpc_channel.mjs host:port\n");
  process.exit(2);
}
const client = new grpc.Client(address, grpc.credentials.createInsecure());
const identity = (b) => b;
let pending = 0;
let closing = false;

function toMetadata(plain = {}) {
  const md = new grpc.Metadata();
  for (const [key, values] of Object.entries(plain)) {
    for (const value of Array.isArray(values) ? values : [values]) {
      md.add(key, key.endsWith("-bin") ? Buffer.from(value, "base64") : String(value));
    }
  }
  return md;
}

function fromMetadata(md) {
  const out = {};
  for (const [key, values] of Object.entries(md?.toJSON() ?? {})) {
    out[key] = values.map((v) => (Buffer.isBuffer(v) ? v.toString("base64") : String(v)));
  }
  return out;
}

/** Resolves with the call's status once it arrived (the `status` event fires for every call). */
function statusOf(call) {
  return new Promise((resolve) => call.once("status", resolve));
}

/** Reads a response stream to its end; a failed call ends it with an error, which is fine. */
async function readAll(call, responses, cancelAfter) {
  try {
    for await (const message of call) {
      responses.push(message);
      if (cancelAfter !== undefined && responses.length >= cancelAfter) call.cancel();
    }
  } catch {
    // The status says what happened.
  }
}

async function run(req) {
  const requests = (req.requests ?? []).map((b) => Buffer.from(b, "base64"));
  const md = toMetadata(req.metadata);
  const options = req.timeoutMs === undefined ? {} : { deadline: Date.now() + req.timeoutMs };
  const responses = [];
  let status;
  let failed;
  const settle = (err, res) => {
    if (err) return err;
    if (res !== undefined) responses.push(res);
    return undefined;
  };
  switch (req.kind ?? "unary") {
    case "unary": {
      // The callback's error, when there is one, is the status the caller sees (grpc-js turns
      // an OK without a message into UNIMPLEMENTED there, not in the status event).
      let call;
      const answered = new Promise((resolve) => {
        call = client.makeUnaryRequest(
          req.path,
          identity,
          identity,
          requests[0] ?? Buffer.alloc(0),
          md,
          options,
          (err, res) => resolve(settle(err, res)),
        );
      });
      status = statusOf(call);
      failed = await answered;
      break;
    }
    case "server_streaming": {
      const call = client.makeServerStreamRequest(
        req.path,
        identity,
        identity,
        requests[0] ?? Buffer.alloc(0),
        md,
        options,
      );
      status = statusOf(call);
      await readAll(call, responses, req.cancelAfter);
      break;
    }
    case "client_streaming": {
      let call;
      const answered = new Promise((resolve) => {
        call = client.makeClientStreamRequest(
          req.path,
          identity,
          identity,
          md,
          options,
          (err, res) => resolve(settle(err, res)),
        );
      });
      status = statusOf(call);
      for (const message of requests) call.write(message);
      call.end();
      failed = await answered;
      break;
    }
    case "bidi_streaming": {
      const call = client.makeBidiStreamRequest(req.path, identity, identity, md, options);
      status = statusOf(call);
      for (const message of requests) call.write(message);
      call.end();
      await readAll(call, responses, req.cancelAfter);
      break;
    }
    default:
      throw new Error(`unknown kind ${req.kind}`);
  }
  const { code, details, metadata } = failed ?? await status;
  return {
    id: req.id,
    responses: responses.map((b) => b.toString("base64")),
    code,
    details,
    metadata: fromMetadata(metadata),
  };
}

function answer(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

function maybeExit() {
  if (closing && pending === 0) {
    // Exit once stdout has been flushed.
    process.stdout.write("", () => process.exit(0));
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (line.trim() === "") return;
  let req;
  try {
    req = JSON.parse(line);
  } catch (error) {
    answer({ id: null, error: `not JSON: ${error.message}` });
    return;
  }
  pending++;
  run(req).then(answer, (error) => answer({ id: req.id, error: String(error?.stack ?? error) }))
    .finally(() => {
      pending--;
      maybeExit();
    });
});
lines.on("close", () => {
  closing = true;
  client.close();
  maybeExit();
});
