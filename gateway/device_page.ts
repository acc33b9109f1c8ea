/**
 * The device flow's verification page (RFC 8628 3.3), `GET /oauth2/device` and its form's
 * `POST /oauth2/device`, for the user signed in with the `session` cookie (as the consent page):
 *
 * 1. the code form: one text field ("Code from your device", pre-filled from `?user_code=`) and
 *    **Continue**, with a CSRF token bound to the session (StartDeviceVerification);
 * 2. posted, the code is looked up (LookupDeviceCode, which counts wrong codes: RFC 8628 5.1) and
 *    the consent page of ./consent_page.ts is shown for the device's client, with the code to
 *    compare with the device's, **Allow** and **Deny**; its form posts back here with the user
 *    code and a CSRF token bound to the session and the code;
 * 3. the choice (DecideDeviceCode), then a page saying to return to the device.
 *
 * Every page is ./consent_page.ts's `htmlPage`: no script, one style sheet by its hash,
 * `default-src 'none'`, `form-action 'self'`, no framing, `no-store`, `no-referrer`.
 *
 * @module
 */

import { type Client, Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.ts";
import type { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import { type Logger, oauthPaths } from "../lib/platform/mod.ts";
import {
  consentPage,
  decisionOf,
  errorPage,
  escapeHtml,
  htmlPage,
  pageMethods,
  serviceFailurePage,
} from "./consent_page.ts";
import { methodNotAllowed } from "./http_errors.ts";

/** What the page needs from ./oauth.ts. */
export interface DevicePageDeps {
  tokens: Client<typeof TokenService>;
  rpcTimeoutMs: number;
  log: Logger;
  /** The form of a POST (throws an error with `status` and `message` when it is bad). */
  readForm(req: Request): Promise<Map<string, string>>;
  /** The answer for a user without a valid session (a redirect to LOGIN_URL for a GET). */
  notSignedIn(req: Request, url: URL): Promise<Response>;
  /** The user's session token (the `session` cookie), when it looks like one. */
  session(req: Request): string | undefined;
}

/** What the request carries along (./oauth.ts's correlation, and the client's address). */
export interface DeviceCorrelation {
  requestId: string;
  traceparent: string;
  clientAddress?: string | undefined;
}

/** The parameters the page's forms send. */
export const devicePageParams = new Set(["user_code", "csrf_token", "decision"]);

const style = `
label{display:block;font-weight:600;margin:1.25rem 0 .375rem}
.code{width:100%;min-height:3rem;padding:.5rem .75rem;font:600 1.375rem ui-monospace,SFMono-Regular,Menlo,monospace;letter-spacing:.12em;text-transform:uppercase;color:#1f1f1f;background:#fff;border:1px solid #6b7280;border-radius:8px}
.code:focus-visible{outline:3px solid #1d4ed8;outline-offset:2px}
.code[aria-invalid=true]{border:2px solid #b91c1c}
.hint{margin:.375rem 0 0;color:#374151;font-size:.9375rem}
.error{margin:1rem 0 0;padding:.75rem 1rem;border:2px solid #b91c1c;border-radius:8px;background:#fef2f2;color:#7f1d1d}
`.trim();

/** The code form, with an error when the last code was refused. */
async function codeForm(
  csrf: string,
  accountId: string,
  value: string,
  error?: string,
  status = 200,
): Promise<Response> {
  const described = error ? "code-hint code-error" : "code-hint";
  const body = `<header>
<h1>Connect a device</h1>
<p class="account">Signed in as <strong>${escapeHtml(accountId)}</strong></p>
</header>
<p>Enter the code your device shows to let it use your account.</p>
${error ? `<p class="error" id="code-error" role="alert">${escapeHtml(error)}</p>` : ""}
<form method="post" action="${oauthPaths.device}">
<input type="hidden" name="csrf_token" value="${escapeHtml(csrf)}">
<label for="user_code">Code from your device</label>
<input class="code" id="user_code" name="user_code" type="text" value="${
    escapeHtml(value)
  }" required maxlength="16" autocomplete="off" autocapitalize="characters" spellcheck="false" aria-describedby="${described}"${
    error ? ' aria-invalid="true"' : ""
  }>
<p class="hint" id="code-hint">8 letters, like BCDF-GHJK. Capitals and the hyphen are optional.</p>
<div class="buttons">
<button type="submit" class="allow">Continue</button>
</div>
</form>`;
  return await htmlPage("Connect a device", body, { status, extraStyle: style });
}

/** The last page: the decision is recorded; the device learns it at its next poll. */
async function donePage(allowed: boolean, applicationName: string): Promise<Response> {
  const app = escapeHtml(applicationName);
  const body = allowed
    ? `<h1>You can return to your device</h1>
<p>${app} can now use your account on the device. You can close this page.</p>`
    : `<h1>You can return to your device</h1>
<p>You denied ${app} access: the device gets nothing. You can close this page.</p>`;
  return await htmlPage("You can return to your device", body);
}

/** Creates the page's handler. */
export function createDevicePage(deps: DevicePageDeps) {
  return async (req: Request, url: URL, c: DeviceCorrelation): Promise<Response> => {
    // A HEAD is answered as the GET would be, its body left out by the caller.
    const get = req.method === "GET" || req.method === "HEAD";
    if (!get && req.method !== "POST") return methodNotAllowed(req.method, pageMethods);
    let params: Map<string, string>;
    if (get) {
      params = new Map();
      const typed = url.searchParams.get("user_code");
      if (typed !== null && typed.length <= 16) params.set("user_code", typed);
    } else {
      try {
        params = await deps.readForm(req);
      } catch (error) {
        const e = error as { status?: number; message: string };
        return await errorPage(e.status ?? 400, "This request cannot be completed", e.message);
      }
    }
    const session = deps.session(req);
    if (session === undefined) return await deps.notSignedIn(req, url);
    const call = {
      timeoutMs: deps.rpcTimeoutMs,
      headers: {
        "x-request-id": c.requestId,
        traceparent: c.traceparent,
        authorization: `Bearer ${session}`,
      },
    };
    const typed = params.get("user_code") ?? "";
    const clientAddress = c.clientAddress ?? "";
    /** The code form again, with a new CSRF token. */
    const again = async (error?: string, status?: number) => {
      const start = await deps.tokens.startDeviceVerification({}, call);
      return await codeForm(start.csrfToken, start.accountId, typed, error, status);
    };
    try {
      if (get) return await again();
      const decision = params.get("decision");
      if (decision === undefined) {
        const res = await deps.tokens.lookupDeviceCode({
          userCode: typed,
          csrfToken: params.get("csrf_token") ?? "",
          clientAddress,
        }, call);
        if (!res.consent) throw new ConnectError("no consent screen", Code.Internal);
        return await consentPage(res.consent, { user_code: res.userCode }, oauthPaths.device, {
          userCode: res.userCode,
        });
      }
      const res = await deps.tokens.decideDeviceCode({
        userCode: typed,
        decision: decisionOf(decision),
        csrfToken: params.get("csrf_token") ?? "",
        clientAddress,
      }, call);
      return await donePage(decision === "allow", res.applicationName);
    } catch (error) {
      const err = ConnectError.from(error);
      const reason = err.findDetails(ErrorInfoSchema).find((d) => d.domain === "oauth2")?.reason;
      try {
        if (reason === "slow_down") {
          const res = await errorPage(
            429,
            "Too many wrong codes",
            "Too many wrong codes were entered. Wait 5 minutes, then enter the code your device " +
              "shows again.",
          );
          res.headers.set("retry-after", "300");
          return res;
        }
        if (reason === "invalid_grant" && err.code === Code.FailedPrecondition) {
          // The consent form posted again (a double click, Back): the first answer stands.
          return await errorPage(
            400,
            "This code was answered already",
            "Your first answer for this code stands, and the device has it. You can close this " +
              "page.",
          );
        }
        if (reason === "invalid_grant") {
          return await again(
            "That code is not valid. Check the code on your device: it may have expired or " +
              "been used already.",
            400,
          );
        }
        if (reason === "invalid_request" && params.get("decision") === undefined) {
          return await again("This page expired. Enter the code again.", 400);
        }
        if (reason !== undefined) {
          return await errorPage(
            reason === "access_denied" ? 403 : 400,
            "This device cannot be connected",
            reason === "access_denied"
              ? "This application is only for the users of its project."
              : "The page expired or was not shown to you. Start again on your device.",
          );
        }
      } catch (inner) {
        return await failed(deps, ConnectError.from(inner), req, url, c);
      }
      return await failed(deps, err, req, url, c);
    }
  };
}

/** A failure of the token service (or of the user's session). */
async function failed(
  deps: DevicePageDeps,
  err: ConnectError,
  req: Request,
  url: URL,
  c: DeviceCorrelation,
): Promise<Response> {
  if (err.code === Code.Unauthenticated) return await deps.notSignedIn(req, url);
  return await serviceFailurePage(err, deps.log, "device verification", c.requestId);
}
