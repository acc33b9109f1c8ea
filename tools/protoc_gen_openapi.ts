/**
 * protoc-gen-openapi: the protoc plugin that `buf generate` runs (buf.gen.yaml) to write
 * `gen/openapi/openapi.json`, the OpenAPI 3.1 description of the gateway's `/v1` API. The document
 * itself is built by gateway/openapi.ts from the services' descriptors; this plugin adds what only
 * exists at generation time, the comments of the .proto files, the API version (plugin option
 * `version=`), and the limits the services' valibot rules enforce on each request field (read from
 * the rules themselves, so the document cannot state another limit than the one enforced).
 *
 * @module
 */

import type { DescField, DescService } from "@bufbuild/protobuf";
import { createEcmaScriptPlugin, getComments, runNodeJs } from "@bufbuild/protoplugin";
import { describeApi } from "../gateway/openapi.ts";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { jsonSchemaLimits, pageLimit } from "../lib/resource/mod.ts";
import {
  journeyInput,
  roleFilter,
  roleInput,
  unitFilter,
  unitInput,
} from "../services/core/validation.ts";
import {
  clientFields,
  configFields,
  consentSchema,
  createClientSchema,
  createSecretFields,
  projectId,
} from "../services/oauth/validation.ts";
import { eventsProjectId } from "../services/token/security_events.ts";

/** The services' rules of the fields of each message a request carries, by property name. */
const rules: Record<string, Record<string, unknown>> = {
  "registry.oauth.v1.OAuthConfig": configFields,
  "registry.oauth.v1.Client": clientFields(ClientType.WEB),
  "registry.oauth.v1.ConsentInstallationRequest": consentSchema.entries,
  "registry.oauth.v1.CreateClientSecretRequest": createSecretFields.entries,
  "registry.core.v1.Role": roleInput.entries,
  "registry.core.v1.Journey": journeyInput.entries,
  "registry.core.v1.Unit": unitInput.entries,
  "registry.core.v1.ListRolesRequest": roleFilter.entries,
  "registry.core.v1.ListUnitsRequest": unitFilter.entries,
  "registry.token.v1.ListEventsRequest": { projectId: eventsProjectId },
};

/** Rules every request shares, by field: the page size, and a project id wherever it is. */
const shared: Record<string, unknown> = { limit: pageLimit, projectId };

/** The fields of a create request's message that the create itself refuses (a `v.literal`). */
const refusedOnCreate: Record<string, Record<string, unknown>> = {
  "registry.oauth.v1.Client": createClientSchema(ClientType.WEB).entries.client.entries,
};

function limits(field: DescField, use: "input" | "patch" | "parameter") {
  const refused = refusedOnCreate[field.parent.typeName]?.[field.localName] as
    | { type?: string }
    | undefined;
  if (use === "input" && refused?.type === "literal") return false;
  const rule = rules[field.parent.typeName]?.[field.localName] ?? shared[field.localName];
  return rule === undefined ? {} : jsonSchemaLimits(rule);
}

interface Options {
  version: string;
}

const plugin = createEcmaScriptPlugin<Options>({
  name: "protoc-gen-openapi",
  version: "v1",
  parseOptions(raw) {
    let version = "";
    for (const { key, value } of raw) {
      if (key === "version") version = value;
      else throw new Error(`unknown option ${key}`);
    }
    if (version === "") throw new Error("the option version=<API version> is required");
    return { version };
  },
  generateTs(schema) {
    const services: DescService[] = schema.files.flatMap((file) => file.services);
    const document = describeApi(services, {
      version: schema.options.version,
      comments: (desc) => getComments(desc).leading ?? "",
      limits,
    });
    const file = schema.generateFile("openapi.json");
    file.print(JSON.stringify(document, null, 2));
  },
});

runNodeJs(plugin);
