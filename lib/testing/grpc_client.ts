/**
 * Unary calls with a stock @grpc/grpc-js client over HTTP/2 cleartext, using the protobuf-es
 * schemas as (de)serializers: what an internal caller in any language would do.
 *
 * @module
 */

import {
  create,
  type DescMessage,
  type DescMethodUnary,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";

/** A gRPC failure: the status code, message and trailing metadata. */
export interface GrpcFailure {
  /** The gRPC status code. */
  code: number;
  /** The status message. */
  details: string;
  /** Trailers, including `grpc-status-details-bin` when the server sent details. */
  metadata: grpc.Metadata;
}

/** Makes unary calls to one server. */
export interface GrpcTestClient {
  /** Calls a method; resolves with the response or rejects with a {@link GrpcFailure}. */
  call<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    request: MessageInitShape<I>,
    metadata?: Record<string, string>,
  ): Promise<MessageShape<O>>;
  /** Closes the channel. */
  close(): void;
}

/** Connects to `host:port` without TLS. */
export function grpcTestClient(address: string): GrpcTestClient {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  return {
    call(method, request, metadata = {}) {
      const md = new grpc.Metadata();
      for (const [k, v] of Object.entries(metadata)) md.set(k, v);
      return new Promise((resolve, reject) => {
        client.makeUnaryRequest(
          `/${method.parent.typeName}/${method.name}`,
          (m: MessageShape<typeof method.input>) => Buffer.from(toBinary(method.input, m)),
          (b: Buffer) => fromBinary(method.output, b),
          create(method.input, request),
          md,
          { deadline: Date.now() + 10_000 },
          (err, res) => (err ? reject(err as unknown as GrpcFailure) : resolve(res!)),
        );
      });
    },
    close() {
      client.close();
    },
  };
}

/** What {@link grpcChurn} does: channels opened, used and closed, round after round. */
export interface ChurnOptions<I extends DescMessage> {
  /** `host:port`. */
  address: string;
  /** The method called. */
  method: DescMethodUnary<I, DescMessage>;
  /** Its request. */
  request: MessageInitShape<I>;
  /** Metadata sent with every call. */
  metadata?: Record<string, string>;
  /** Rounds. */
  rounds: number;
  /** Channels per round, all at once. */
  clients: number;
  /** Calls per channel, one after another, before it closes. */
  calls: number;
}

/**
 * Connection churn from stock @grpc/grpc-js running on Node.js (lib/testing/grpc_churn.mjs, see
 * there why not in this process): resolves with the number of calls answered and their codes.
 */
export async function grpcChurn<I extends DescMessage>(
  options: ChurnOptions<I>,
): Promise<{ calls: number; codes: Record<string, number> }> {
  const child = new Deno.Command("node", {
    args: [new URL("./grpc_churn.mjs", import.meta.url).pathname],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify({
    address: options.address,
    path: `/${options.method.parent.typeName}/${options.method.name}`,
    requestBase64: Buffer.from(
      toBinary(options.method.input, create(options.method.input, options.request)),
    )
      .toString("base64"),
    metadata: options.metadata ?? {},
    rounds: options.rounds,
    clients: options.clients,
    calls: options.calls,
  })));
  await writer.close();
  const out = await child.output();
  if (!out.success) {
    throw new Error(`grpc_churn.mjs failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return JSON.parse(new TextDecoder().decode(out.stdout));
}
