/**
 * The gateway as the tests run it: gateway/main.ts with every response it sends checked against
 * the committed OpenAPI document (./openapi_check.ts). Each violation is appended as a JSON line to
 * the file named by OPENAPI_VIOLATIONS_FILE, and the counts of responses checked, outside the
 * document, and in violation go to the same name plus `.counts`; the stack (./stack.ts) fails its
 * `stop()` when a violation was written.
 *
 * @module
 */

import document from "../../gen/openapi/openapi.json" with { type: "json" };
import { run } from "../../gateway/main.ts";
import { createOpenApiChecker } from "./openapi_check.ts";

const file = Deno.env.get("OPENAPI_VIOLATIONS_FILE");
if (file === undefined) throw new Error("OPENAPI_VIOLATIONS_FILE is not set");
const checker = createOpenApiChecker(document);
const counts = { checked: 0, outside: 0, violations: 0 };
let dirty = false;
const flush = () => {
  if (!dirty) return;
  dirty = false;
  Deno.writeTextFileSync(`${file}.counts`, JSON.stringify(counts));
};
Deno.unrefTimer(setInterval(flush, 200));

const code = await run({
  onResponse(req, url, res) {
    const copy = res.clone();
    copy.text().then((body) => {
      const outcome = checker.check(req.method, url.pathname, {
        status: res.status,
        headers: res.headers,
        body,
      });
      dirty = true;
      if (outcome === "checked" || outcome === "outside") counts[outcome]++;
      else {
        counts.violations++;
        Deno.writeTextFileSync(file, JSON.stringify(outcome) + "\n", { append: true });
      }
    }, () => {/* the body's stream failed: nothing was sent to check */});
  },
});
flush();
Deno.exit(code);
