/**
 * Follows a project's audit events with the stock grpc-js client: `WatchEvents` of the
 * oauth-registry over gRPC, one JSON line per event, from the cursor given. Reconnects with the
 * last id it printed when the stream ends or fails, so it misses nothing and prints nothing twice.
 *
 *   deno task watch-events --project demo [--after 0] [--token $TOKEN] [--address 127.0.0.1:50051]
 *
 * @module
 */

import { create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import {
  OAuthRegistryService,
  WatchEventsRequestSchema,
  type WatchEventsResponse,
  WatchEventsResponseSchema,
} from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { type Event, EventSchema } from "../gen/registry/audit/v1/event_pb.ts";
import { parseCommandLine, positiveNumber, usageError } from "./cli.ts";

const usage = `Usage: deno task watch-events --project <id> [options]

Prints the project's audit events as JSON lines: those after --after, then each new one as it
commits, until interrupted (or --count events).

Options:
  --project <id>      the project (required)
  --after <id>        the last event id already seen (0: from the oldest kept)
  --token <jwt>       a bearer token of a project admin (else $TOKEN)
  --address <h:p>     the oauth-registry's gRPC address (127.0.0.1:$OAUTH_GRPC_PORT, 50051)
  --count <n>         stop after this many events
  -h, --help          this text`;

/** What {@link followEvents} needs. */
export interface FollowOptions {
  /** The oauth-registry's gRPC address, `host:port`. */
  address: string;
  /** A project admin's bearer token. */
  token: string;
  /** The project. */
  project: string;
  /** The last event id already seen ("0": from the oldest kept). */
  after: string;
  /** Called with each event, in order. */
  onEvent(event: Event): void;
  /** Called when a stream ends or fails; return false to stop following. */
  onEnd(error: grpc.ServiceError | undefined, after: string): boolean;
  /** Stops following (the stream in progress is cancelled). */
  signal?: AbortSignal;
}

/**
 * Follows a project's events with grpc-js's generic client (protobuf-es for the messages), one
 * stream at a time, resuming from the last id seen after each end until `onEnd` says stop.
 */
export async function followEvents(o: FollowOptions): Promise<void> {
  const method = OAuthRegistryService.method.watchEvents;
  const client = new grpc.Client(o.address, grpc.credentials.createInsecure());
  let after = o.after;
  try {
    for (let going = true; going;) {
      going = await new Promise<boolean>((resolve) => {
        const metadata = new grpc.Metadata();
        metadata.set("authorization", `Bearer ${o.token}`);
        const call = client.makeServerStreamRequest(
          `/${OAuthRegistryService.typeName}/${method.name}`,
          (req: Uint8Array) => Buffer.from(req),
          (bytes: Buffer) => fromBinary(WatchEventsResponseSchema, bytes),
          toBinary(
            WatchEventsRequestSchema,
            create(WatchEventsRequestSchema, {
              projectId: o.project,
              after,
            }),
          ),
          metadata,
        );
        const cancel = () => call.cancel();
        o.signal?.addEventListener("abort", cancel, { once: true });
        call.on("close", () => o.signal?.removeEventListener("abort", cancel));
        call.on("data", (m: WatchEventsResponse) => {
          if (!m.event) return;
          after = m.event.id;
          o.onEvent(m.event);
        });
        const end = (e?: grpc.ServiceError) => resolve(!o.signal?.aborted && o.onEnd(e, after));
        call.on("error", end);
        call.on("end", () => end());
      });
      // A second before trying again: a server that is down is not hammered.
      if (going) await new Promise((r) => setTimeout(r, 1000));
    }
  } finally {
    client.close();
  }
}

if (import.meta.main) {
  const values = parseCommandLine("watch-events", usage, {
    project: { type: "string" },
    after: { type: "string", default: "0" },
    token: { type: "string" },
    address: { type: "string" },
    count: { type: "string" },
  });
  if (!values.project) usageError("watch-events", usage, "--project is required");
  const token = values.token ?? Deno.env.get("TOKEN");
  if (!token) usageError("watch-events", usage, "--token (or $TOKEN) is required");
  const address = values.address ?? `127.0.0.1:${Deno.env.get("OAUTH_GRPC_PORT") ?? "50051"}`;
  const count = values.count === undefined
    ? Infinity
    : positiveNumber("watch-events", usage, "count", values.count, true);
  const done = new AbortController();
  let printed = 0;

  await followEvents({
    address,
    token,
    project: values.project!,
    after: values.after ?? "0",
    signal: done.signal,
    onEvent: (event) => {
      if (printed >= count) return;
      // deno-lint-ignore no-console
      console.log(JSON.stringify(toJson(EventSchema, event)));
      if (++printed >= count) done.abort();
    },
    onEnd: (error, after) => {
      // A refusal is final; a lost stream is resumed from the last id printed.
      if (
        error && [grpc.status.PERMISSION_DENIED, grpc.status.UNAUTHENTICATED].includes(error.code)
      ) {
        // deno-lint-ignore no-console
        console.error(`watch-events: ${error.details}`);
        Deno.exit(1);
      }
      // deno-lint-ignore no-console
      console.error(
        `watch-events: ${error?.details || "the stream ended"}; resuming after ${after}`,
      );
      return true;
    },
  });
}
