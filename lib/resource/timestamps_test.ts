import assert from "node:assert/strict";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { timestampOf } from "./timestamps.ts";

Deno.test("timestampOf(): protobuf-es's timestampFromDate, before 1970 and after", () => {
  for (const ms of [0, 1, 999, 1000, -1, -999, -1001, 1_796_000_000_123, -62_135_596_800_000]) {
    assert.deepEqual(timestampOf(new Date(ms)), timestampFromDate(new Date(ms)));
  }
});
