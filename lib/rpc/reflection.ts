/**
 * gRPC server reflection, so that grpcurl and similar tools can list and describe the services
 * without .proto files. Served under both names clients use: `grpc.reflection.v1` and the older
 * `grpc.reflection.v1alpha` (older grpcurl and many language clients ask only for that one). The
 * two protos differ only in their package name, so one implementation answers both.
 *
 * Built on a protobuf-es file registry of the services' files and all their dependencies; file
 * answers carry the requested file and its transitive dependencies, and unknown names are answered
 * with an `error_response` (NOT_FOUND).
 *
 * @module
 */

import {
  create,
  createFileRegistry,
  type DescExtension,
  type DescFile,
  type DescService,
  toBinary,
} from "@bufbuild/protobuf";
import { nestedTypes } from "@bufbuild/protobuf/reflect";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import {
  ServerReflection,
  type ServerReflectionRequest,
} from "../../gen/grpc/reflection/v1/reflection_pb.ts";
import {
  ServerReflection as ServerReflectionV1alpha,
  type ServerReflectionRequest as ServerReflectionRequestV1alpha,
} from "../../gen/grpc/reflection/v1alpha/reflection_pb.ts";

/**
 * A `message_response`, as plain fields without a message type: the same value initialises the
 * v1 and the v1alpha response.
 */
type Answer =
  | { case: "fileDescriptorResponse"; value: { fileDescriptorProto: Uint8Array[] } }
  | {
    case: "allExtensionNumbersResponse";
    value: { baseTypeName: string; extensionNumber: number[] };
  }
  | { case: "listServicesResponse"; value: { service: { name: string }[] } }
  | { case: "errorResponse"; value: { errorCode: number; errorMessage: string } };

/** The reflection service under each of its names. */
export interface ReflectionImpls {
  /** `grpc.reflection.v1.ServerReflection`. */
  v1: ServiceImpl<typeof ServerReflection>;
  /** `grpc.reflection.v1alpha.ServerReflection`: the same answers, under the older package. */
  v1alpha: ServiceImpl<typeof ServerReflectionV1alpha>;
}

/**
 * Creates the reflection implementation (`grpc.reflection.v1`) describing `sources` and every file
 * they depend on. `list_services` answers the given services, or all services of the given files.
 */
export function createReflectionImpl(
  sources: ReadonlyArray<DescFile | DescService>,
): ServiceImpl<typeof ServerReflection> {
  return createReflectionImpls(sources).v1;
}

/**
 * Creates reflection under both names, `grpc.reflection.v1` and `grpc.reflection.v1alpha`, from
 * one index of `sources` and every file they depend on. `list_services` answers the given
 * services, or all services of the given files; to have reflection list itself, include both
 * reflection services in `sources`.
 */
export function createReflectionImpls(
  sources: ReadonlyArray<DescFile | DescService>,
): ReflectionImpls {
  const services = [
    ...new Set(
      sources.flatMap((s) => s.kind === "file" ? s.services.map((x) => x.typeName) : s.typeName),
    ),
  ];
  // Every file reachable from the sources, dependencies first.
  const seen = new Set<string>();
  const ordered: DescFile[] = [];
  const visit = (file: DescFile) => {
    if (seen.has(file.proto.name)) return;
    seen.add(file.proto.name);
    file.dependencies.forEach(visit);
    ordered.push(file);
  };
  sources.forEach((s) => visit(s.kind === "file" ? s : s.file));
  const registry = createFileRegistry(
    create(FileDescriptorSetSchema, { file: ordered.map((f) => f.proto) }),
  );

  // Fully-qualified symbol -> file declaring it (types, methods, fields, oneofs, enum values).
  const symbols = new Map<string, DescFile>();
  for (const file of registry.files) {
    for (const type of nestedTypes(file)) {
      symbols.set(type.typeName, file);
      if (type.kind === "service") {
        for (const m of type.methods) symbols.set(`${type.typeName}.${m.name}`, file);
      } else if (type.kind === "message") {
        for (const f of type.fields) symbols.set(`${type.typeName}.${f.name}`, file);
        for (const o of type.oneofs) symbols.set(`${type.typeName}.${o.name}`, file);
      } else if (type.kind === "enum") {
        const scope = type.typeName.slice(0, type.typeName.lastIndexOf(".") + 1);
        for (const v of type.values) symbols.set(scope + v.name, file);
      }
    }
  }

  const encoded = new Map<DescFile, Uint8Array>();
  const files = (file: DescFile): Answer => {
    const out: Uint8Array[] = [];
    const added = new Set<DescFile>();
    const add = (f: DescFile) => {
      if (added.has(f)) return;
      added.add(f);
      let bytes = encoded.get(f);
      if (!bytes) encoded.set(f, bytes = toBinary(FileDescriptorProtoSchema, f.proto));
      out.push(bytes);
      f.dependencies.forEach(add);
    };
    add(file);
    return { case: "fileDescriptorResponse", value: { fileDescriptorProto: out } };
  };
  const notFound = (what: string): Answer => ({
    case: "errorResponse",
    value: { errorCode: Code.NotFound, errorMessage: `${what} not found` },
  });
  const extensionsOf = (typeName: string) =>
    [...registry].filter((t): t is DescExtension =>
      t.kind === "extension" && t.extendee.typeName === typeName.replace(/^\./, "")
    );

  // The v1alpha request is the v1 request under another package name: the same fields and cases.
  const answer = (req: ServerReflectionRequest | ServerReflectionRequestV1alpha): Answer => {
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return {
          case: "listServicesResponse",
          value: { service: services.map((name) => ({ name })) },
        };
      case "fileByFilename": {
        const file = registry.getFile(r.value);
        return file ? files(file) : notFound(`File ${r.value}`);
      }
      case "fileContainingSymbol": {
        const file = symbols.get(r.value.replace(/^\./, ""));
        return file ? files(file) : notFound(`Symbol ${r.value}`);
      }
      case "fileContainingExtension": {
        const { containingType, extensionNumber } = r.value;
        const ext = extensionsOf(containingType).find((t) => t.number === extensionNumber);
        return ext
          ? files(ext.file)
          : notFound(`Extension ${extensionNumber} of ${containingType}`);
      }
      case "allExtensionNumbersOfType": {
        const type = registry.getMessage(r.value.replace(/^\./, ""));
        return type
          ? {
            case: "allExtensionNumbersResponse",
            value: {
              baseTypeName: type.typeName,
              extensionNumber: extensionsOf(type.typeName).map((t) => t.number),
            },
          }
          : notFound(`Message type ${r.value}`);
      }
      default:
        return {
          case: "errorResponse",
          value: { errorCode: Code.InvalidArgument, errorMessage: "no message_request set" },
        };
    }
  };

  return {
    v1: {
      async *serverReflectionInfo(requests) {
        for await (const req of requests) {
          yield { validHost: req.host, originalRequest: req, messageResponse: answer(req) };
        }
      },
    },
    v1alpha: {
      async *serverReflectionInfo(requests) {
        for await (const req of requests) {
          yield { validHost: req.host, originalRequest: req, messageResponse: answer(req) };
        }
      },
    },
  };
}
