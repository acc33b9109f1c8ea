/**
 * Handler contexts for calling a service's handlers in-process, as a signed-in caller, without a
 * server: what the authentication interceptor leaves on a call, for tests that drive handlers or
 * the functions behind them directly.
 *
 * @module
 */

import type { DescMethod } from "@bufbuild/protobuf";
import { createHandlerContext, type HandlerContext } from "@connectrpc/connect";
import { authentication, type Caller } from "../policy/mod.ts";

/**
 * A call of `method` by `caller` (by default the user `u-1` of account `acct-1`, administering no
 * project), with the bearer token `authorization` in its request headers, authenticated.
 */
export async function signedInCall(
  method: DescMethod,
  caller: Caller = { subject: "u-1", accountId: "acct-1", projects: new Set(), space: undefined },
  authorization = "Bearer session-of-u-1",
): Promise<HandlerContext> {
  const ctx = createHandlerContext({
    service: method.parent,
    method,
    protocolName: "test",
    requestMethod: "POST",
    url: `/${method.parent.typeName}/${method.name}`,
    requestHeader: { authorization },
  });
  await authentication(() => Promise.resolve(caller))(() => Promise.resolve({} as never))(
    { header: ctx.requestHeader, contextValues: ctx.values } as never,
  );
  return ctx;
}
