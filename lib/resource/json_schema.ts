/**
 * The JSON Schema form of the limits a valibot rule states: lengths (in code points, as JSON
 * Schema counts them), patterns, item counts, uniqueness (`v.metadata({ uniqueItems: true })`,
 * which {@link uniqueList} adds), numeric ranges and unions (`anyOf`, a literal as `const`). The API description (gen/openapi/) shows them
 * on each field, so what a client reads there is what the services enforce. Checks written as code
 * (a URI's rules, a hostname's) have no JSON Schema form; their fields' descriptions say them.
 *
 * @module
 */

/** JSON Schema keywords. */
export type JsonSchemaLimits = Record<string, unknown>;

interface Node {
  kind?: string;
  type?: string;
  options?: Node[];
  literal?: unknown;
  pipe?: Node[];
  wrapped?: Node;
  item?: Node;
  requirement?: unknown;
  metadata?: Record<string, unknown>;
}

const actions: Record<string, (requirement: unknown) => JsonSchemaLimits> = {
  min_code_points: (n) => (n === 0 ? {} : { minLength: n }),
  max_code_points: (n) => ({ maxLength: n }),
  regex: (re) => ({ pattern: (re as RegExp).source }),
  min_value: (n) => ({ minimum: n }),
  max_value: (n) => ({ maximum: n }),
};

/** The limits of a valibot schema (optional wrappers and nested pipes looked through). */
export function jsonSchemaLimits(schema: unknown): JsonSchemaLimits {
  const out: JsonSchemaLimits = {};
  const walk = (node: Node | undefined, isArray: boolean) => {
    if (node === undefined) return;
    if (node.type === "optional" || node.type === "nullish" || node.type === "nullable") {
      return walk(node.wrapped, isArray);
    }
    if (node.type === "union") {
      // One of: a literal is its `const`, another schema its own limits.
      out.anyOf = (node.options ?? []).map((o) =>
        o.type === "literal" ? { const: o.literal } : jsonSchemaLimits(o)
      );
      return;
    }
    if (node.type === "array" && node.kind === "schema") {
      isArray = true;
      const items = jsonSchemaLimits(node.item);
      if (Object.keys(items).length > 0) out.items = items;
    }
    for (const item of node.pipe ?? []) {
      if (item.kind === "schema") walk(item, isArray); // the piped schema, or a nested pipe
      else if (item.kind === "metadata") Object.assign(out, item.metadata);
      else if (item.type === "min_length" && typeof item.requirement === "number") {
        if (item.requirement > 0) out[isArray ? "minItems" : "minLength"] = item.requirement;
      } else if (item.type === "max_length" && typeof item.requirement === "number") {
        out[isArray ? "maxItems" : "maxLength"] = item.requirement;
      } else if (item.type !== undefined && item.type in actions) {
        Object.assign(out, actions[item.type]!(item.requirement));
      }
    }
  };
  walk(schema as Node, false);
  return out;
}
