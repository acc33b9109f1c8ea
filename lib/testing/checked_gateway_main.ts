/**
 * The gateway as the tests run it: gateway/main.ts with every exchange checked against the
 * committed OpenAPI document (./openapi_check.ts). Each response must match the document; and a
 * request the document refuses (a bad parameter or body) must not succeed: answered 2xx, it means
 * the document is stricter than the gateway, or the gateway laxer than the document. Violations are
 * appended as JSON lines to the file named by OPENAPI_VIOLATIONS_FILE, the counts to the same name
 * plus `.counts`; the stack (./stack.ts) fails its `stop()` when a violation was written.
 *
 * Request bodies are kept for the check up to 64 KiB of declared length; larger ones (the tests'
 * floods) and bodies of unknown length are not, and their requests' parameters only are checked.
 *
 * @module
 */

import document from "../../gen/openapi/openapi.json" with { type: "json" };
import { run } from "../../gateway/main.ts";
import { createOpenApiChecker, type RequestVerdict, type Violation } from "./openapi_check.ts";

const file = Deno.env.get("OPENAPI_VIOLATIONS_FILE");
if (file === undefined) throw new Error("OPENAPI_VIOLATIONS_FILE is not set");
const checker = createOpenApiChecker(document);
const keptBodyBytes = 64 * 1024;
const counts = { checked: 0, outside: 0, violations: 0, refused: 0 };
let dirty = false;
const flush = () => {
  if (!dirty) return;
  dirty = false;
  Deno.writeTextFileSync(`${file}.counts`, JSON.stringify(counts));
};
Deno.unrefTimer(setInterval(flush, 200));

function record(violation: Violation): void {
  counts.violations++;
  Deno.writeTextFileSync(file!, JSON.stringify(violation) + "\n", { append: true });
}

/** The request's body text, when it is small and of declared length; else undefined. */
async function keptBody(req: Request): Promise<string | undefined> {
  const length = req.headers.get("content-length");
  if (req.body === null) return "";
  if (length === null || !/^[0-9]+$/.test(length) || Number(length) > keptBodyBytes) {
    return undefined;
  }
  try {
    return await req.clone().text();
  } catch {
    return undefined;
  }
}

const code = await run({
  observe(req, url) {
    const verdict: Promise<RequestVerdict> = keptBody(req).then((body) =>
      checker.checkRequest({ method: req.method, url, headers: req.headers, body })
    );
    return (res) => {
      const copy = res.clone();
      Promise.all([copy.text(), verdict]).then(([body, request]) => {
        dirty = true;
        const outcome = checker.check(req.method, url.pathname, {
          status: res.status,
          headers: res.headers,
          body,
        });
        if (outcome === "checked" || outcome === "outside") counts[outcome]++;
        else record(outcome);
        if (request === "unchecked" || request.refused === undefined) return;
        if (res.status >= 200 && res.status < 300) {
          record({
            request: `${req.method} ${url.pathname}${url.search}`,
            status: res.status,
            problem: `the document refuses this request (${request.refused}), the gateway did not`,
          });
        } else counts.refused++;
      }, () => {/* a body's stream failed: nothing was sent to check */});
    };
  },
});
flush();
Deno.exit(code);
