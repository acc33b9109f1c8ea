/**
 * Connection churn from stock @grpc/grpc-js on Node.js: `clients` channels at a time, each making
 * `calls` unary calls one after another and then closing, for `rounds` rounds. Reads its settings
 * as JSON on stdin; writes `{"calls": n, "codes": {"<grpc code>": count}}` on stdout.
 *
 * Why Node: Deno's node:http2 client (which grpc-js uses under Deno) sometimes aborts the whole
 * process in nghttp2 (`stream->closed_next == NULL` in find_stream_on_goaway_func) when many
 * channels close; that took the test runner down with it. The servers under test are ours, the
 * client is the stock one on its own runtime.
 */
import * as grpc from "@grpc/grpc-js";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const settings = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const { address, path, requestBase64, metadata = {}, rounds, clients, calls } = settings;
const request = Buffer.from(requestBase64, "base64");

const codes = {};
let done = 0;
function call(client) {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      path,
      (b) => b,
      (b) => b,
      request,
      md,
      { deadline: Date.now() + 10_000 },
      (err) => {
        const code = err ? err.code : 0;
        codes[code] = (codes[code] ?? 0) + 1;
        done++;
        resolve();
      },
    );
  });
}

for (let round = 0; round < rounds; round++) {
  const channels = Array.from(
    { length: clients },
    () => new grpc.Client(address, grpc.credentials.createInsecure()),
  );
  await Promise.all(channels.map(async (client) => {
    for (let i = 0; i < calls; i++) await call(client);
    client.close();
  }));
}
process.stdout.write(JSON.stringify({ calls: done, codes }) + "\n");
