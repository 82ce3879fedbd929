import { Type } from "@sinclair/typebox";
import { expect, test } from "bun:test";
import { SluiceError } from "../src/errors";
import { validateChatRequest } from "../src/modules/chat/model";
import { translateMessagesRequest } from "../src/modules/messages/model";
import { translateResponsesRequest } from "../src/modules/responses/model";
import { validateBody } from "../src/validation";

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

test("a wrong field inside a union's array is named, not the union: content parts and blocks without a type", () => {
  const chat = validateChatRequest({ model: "m", messages: [{ role: "user", content: [{ type: "text", text: "a" }, {}] }] });
  expect(chat).toBeInstanceOf(SluiceError);
  expect((chat as SluiceError).message).toBe("Missing required parameter: 'messages[0].content[1].type'.");
  expect((chat as SluiceError).param).toBe("messages[0].content[1].type");
  const messages = translateMessagesRequest({ model: "m", max_tokens: 5, messages: [{ role: "user", content: [{}] }] });
  expect((messages as SluiceError).message).toBe("Missing required parameter: 'messages[0].content[0].type'.");
  const responses = translateResponsesRequest({ model: "m", input: [{ role: "user", content: [{ type: "" }] }] });
  expect((responses as SluiceError).message).toBe(
    "Invalid 'input[0].content[0].type': string too short. Expected a string with minimum length 1, but got an empty string instead.",
  );
  // A value of no variant's kind still gets the union's own words.
  const wrongKind = validateChatRequest({ model: "m", messages: [{ role: "user", content: 5 }] });
  expect((wrongKind as SluiceError).message).toBe(
    "Invalid type for 'messages[0].content': expected a string, an array of content parts, or null, but got an integer instead.",
  );
});

test("a number outside the one numeric variant of a union is told by its bound", () => {
  const model = Type.Object({ cap: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()], { expected: "a whole number of at least 1, or null for none" }) });
  expect((validateBody(model, { cap: 0 }, []) as SluiceError).message).toBe("Invalid 'cap': expected a value >= 1, but got 0 instead.");
  expect((validateBody(model, { cap: 1.5 }, []) as SluiceError).message).toBe("Invalid type for 'cap': expected an integer, but got a number instead.");
  expect((validateBody(model, { cap: "x" }, []) as SluiceError).message).toBe(
    "Invalid type for 'cap': expected a whole number of at least 1, or null for none, but got a string instead.",
  );
});
