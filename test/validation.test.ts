import { expect, test } from "bun:test";
import { SluiceError } from "../src/errors";
import { validateChatRequest } from "../src/modules/chat/model";

/** A chat body `levels` levels deep, itself included: its response_format is `levels - 1` objects (or arrays) one in another. */
function bodyNested(levels: number, inArrays = false): unknown {
  let value: unknown = 1;
  for (let level = 1; level < levels; level++) value = inArrays ? [value] : { a: value };
  return { model: "m", messages: [{ role: "user", content: "x" }], response_format: value };
}

test("a body may nest 64 levels deep, objects or arrays, and not one more", () => {
  expect(validateChatRequest(bodyNested(64))).not.toBeInstanceOf(SluiceError);
  expect(validateChatRequest(bodyNested(64, true))).not.toBeInstanceOf(SluiceError);
  for (const inArrays of [false, true]) {
    const refused = validateChatRequest(bodyNested(65, inArrays));
    expect(refused).toBeInstanceOf(SluiceError);
    expect((refused as SluiceError).message).toBe("The request body nests deeper than 64 levels.");
  }
  const deep = validateChatRequest(bodyNested(100_000));
  expect(deep).toBeInstanceOf(SluiceError);
});
