/**
 * grpc.reflection.v1.ServerReflection, so that grpcurl and similar tools can list and describe
 * the services without .proto files. Built on a protobuf-es file registry of the services' files
 * and all their dependencies; file answers carry the requested file and its transitive
 * dependencies, and unknown names are answered with an `error_response` (NOT_FOUND).
 *
 * @module
 */

import {
  create,
  createFileRegistry,
  type DescExtension,
  type DescFile,
  type DescService,
  type MessageInitShape,
  toBinary,
} from "@bufbuild/protobuf";
import { nestedTypes } from "@bufbuild/protobuf/reflect";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import {
  ServerReflection,
  type ServerReflectionRequest,
  type ServerReflectionResponseSchema,
} from "../gen/grpc/reflection/v1/reflection_pb.ts";

type Answer = NonNullable<
  MessageInitShape<typeof ServerReflectionResponseSchema>["messageResponse"]
>;

/**
 * Creates the reflection implementation describing `sources` and every file they depend on.
 * `list_services` answers the given services, or all services of the given files.
 */
export function createReflectionImpl(
  sources: ReadonlyArray<DescFile | DescService>,
): ServiceImpl<typeof ServerReflection> {
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

  const answer = (req: ServerReflectionRequest): Answer => {
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
    async *serverReflectionInfo(requests) {
      for await (const req of requests) {
        yield { validHost: req.host, originalRequest: req, messageResponse: answer(req) };
      }
    },
  };
}
