/**
 * The gateway as `deno task start` runs it with DATABASE_URL (one process per component):
 * gateway/main.ts with the development sign-in page (gateway/dev_sign_in.ts). The image and the
 * manifests run gateway/main.ts itself, and tools/ is not in the image (tests/deploy_test.ts).
 *
 * @module
 */

import { run } from "../gateway/main.ts";

if (import.meta.main) Deno.exit(await run({}, { devSignIn: true }));
