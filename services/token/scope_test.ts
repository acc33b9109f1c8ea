import assert from "node:assert/strict";
import { ConnectError } from "@connectrpc/connect";
import { checkDeclared, describeScopes, parsePrompt } from "./scope.ts";

const declared = {
  scopes: [
    { name: "photos.read", description: "See your photos", sensitive: false },
    { name: "photos.delete", description: "Delete your photos", sensitive: true },
  ],
};

function reason(fn: () => void): string | undefined {
  try {
    fn();
    return undefined;
  } catch (error) {
    return (error as ConnectError).rawMessage;
  }
}

Deno.test("checkDeclared: any scope without declarations, only declared ones with", () => {
  assert.equal(reason(() => checkDeclared(undefined, ["anything"])), undefined);
  assert.equal(reason(() => checkDeclared({ scopes: [] }, ["anything", "else"])), undefined);
  assert.equal(reason(() => checkDeclared(declared, ["photos.read", "photos.delete"])), undefined);
  assert.equal(reason(() => checkDeclared(declared, [])), undefined);
  const refused = reason(() => checkDeclared(declared, ["photos.read", "photos.write"]));
  assert.equal(refused, "A scope asked for is not one the application declares");
  // Names are compared exactly: case matters, as RFC 6749 3.3 says.
  assert.notEqual(reason(() => checkDeclared(declared, ["Photos.read"])), undefined);
});

Deno.test("describeScopes: the project's words, else the name", () => {
  assert.deepEqual(describeScopes(declared, ["photos.delete", "other"]), [
    { name: "photos.delete", description: "Delete your photos", sensitive: true },
    { name: "other", description: "other", sensitive: false },
  ]);
  assert.deepEqual(describeScopes(undefined, ["a"]), [
    { name: "a", description: "a", sensitive: false },
  ]);
});

Deno.test("parsePrompt: none alone, login and consent, nothing unknown or repeated", () => {
  assert.deepEqual([...parsePrompt("")!], []);
  assert.deepEqual([...parsePrompt("none")!], ["none"]);
  assert.deepEqual([...parsePrompt("consent")!], ["consent"]);
  assert.deepEqual([...parsePrompt("login consent")!].sort(), ["consent", "login"]);
  for (const bad of ["select_account", "none consent", "consent consent", " consent", "NONE"]) {
    assert.equal(parsePrompt(bad), undefined, bad);
  }
});
