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
