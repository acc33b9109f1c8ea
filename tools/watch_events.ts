/**
 * Follows a project's audit events with the stock grpc-js client: `WatchEvents` of the
 * oauth-registry over gRPC, one JSON line per event, from the cursor given. Reconnects with the
 * last id it printed when the stream ends or fails, so it misses nothing and prints nothing twice.
 *
 *   deno task watch-events --project demo [--after 0] [--token $TOKEN] [--address 127.0.0.1:50051]
 *
 * @module
 */

import { fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import {
  OAuthRegistryService,
  WatchEventsRequestSchema,
  WatchEventsResponseSchema,
} from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { EventSchema } from "../gen/registry/audit/v1/event_pb.ts";
import { parseCommandLine, usageError } from "./cli.ts";

const usage = `Usage: deno task watch-events --project <id> [options]

Prints the project's audit events as JSON lines: those after --after, then each new one as it
commits, until interrupted.

Options:
  --project <id>      the project (required)
  --after <id>        the last event id already seen (0: from the oldest kept)
  --token <jwt>       a bearer token of a project admin (else $TOKEN)
  --address <h:p>     the oauth-registry's gRPC address (127.0.0.1:$OAUTH_GRPC_PORT, 50051)
  -h, --help          this text`;

const values = parseCommandLine("watch-events", usage, {
  project: { type: "string" },
  after: { type: "string", default: "0" },
  token: { type: "string" },
  address: { type: "string" },
});
if (!values.project) usageError("watch-events", usage, "--project is required");
const token = values.token ?? Deno.env.get("TOKEN");
if (!token) usageError("watch-events", usage, "--token (or $TOKEN) is required");
const address = values.address ?? `127.0.0.1:${Deno.env.get("OAUTH_GRPC_PORT") ?? "50051"}`;

const method = OAuthRegistryService.method.watchEvents;
const client = new grpc.Client(address, grpc.credentials.createInsecure());
let after = values.after ?? "0";
for (;;) {
  await new Promise<void>((resolve) => {
    const metadata = new grpc.Metadata();
    metadata.set("authorization", `Bearer ${token}`);
    const call = client.makeServerStreamRequest(
      `/${OAuthRegistryService.typeName}/${method.name}`,
      (req: Uint8Array) => Buffer.from(req),
      (bytes: Buffer) => fromBinary(WatchEventsResponseSchema, bytes),
      toBinary(WatchEventsRequestSchema, {
        $typeName: WatchEventsRequestSchema.typeName,
        projectId: values.project!,
        after,
      } as never),
      metadata,
    );
    call.on("data", (m: ReturnType<typeof fromBinary<typeof WatchEventsResponseSchema>>) => {
      if (!m.event) return;
      after = m.event.id;
      // deno-lint-ignore no-console
      console.log(JSON.stringify(toJson(EventSchema, m.event)));
    });
    call.on("error", (e: grpc.ServiceError) => {
      // A refusal is final; a lost stream is resumed from the last id printed.
      if ([grpc.status.PERMISSION_DENIED, grpc.status.UNAUTHENTICATED].includes(e.code)) {
        // deno-lint-ignore no-console
        console.error(`watch-events: ${e.details}`);
        Deno.exit(1);
      }
      // deno-lint-ignore no-console
      console.error(`watch-events: ${e.details || e.message}; reconnecting after ${after}`);
      setTimeout(resolve, 1000);
    });
    call.on("end", () => setTimeout(resolve, 1000));
  });
}
