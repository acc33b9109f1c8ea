/**
 * The browser's part of the authorization code flow, played with fetch: the consent page's form.
 *
 * @module
 */

/** The hidden fields of the consent page's form, which a browser posts back with the choice. */
export function consentFormFields(html: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of html.matchAll(/<input type="hidden" name="([a-z_]+)" value="([^"]*)">/g)) {
    out[m[1]!] = m[2]!.replaceAll("&quot;", '"').replaceAll("&#39;", "'").replaceAll("&lt;", "<")
      .replaceAll("&gt;", ">").replaceAll("&amp;", "&");
  }
  return out;
}

/**
 * A signed-in browser at the authorization endpoint: `GET` with `query` must show the consent page
 * (200), and its Allow must send the browser back (303); the URL it is sent back to.
 */
export async function allowOnConsentPage(
  authorizationEndpoint: string,
  query: Record<string, string>,
  session: string,
): Promise<URL> {
  const page = await fetch(`${authorizationEndpoint}?${new URLSearchParams(query)}`, {
    headers: { cookie: `session=${session}` },
  });
  const html = await page.text();
  if (page.status !== 200) throw new Error(`the consent page answered ${page.status}: ${html}`);
  const back = await fetch(authorizationEndpoint, {
    method: "POST",
    redirect: "manual",
    headers: { cookie: `session=${session}`, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ ...consentFormFields(html), decision: "allow" }),
  });
  const text = await back.text();
  if (back.status !== 303) throw new Error(`Allow answered ${back.status}: ${text}`);
  return new URL(back.headers.get("location")!);
}
