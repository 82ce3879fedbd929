// The property-based checks of hostile-input.test.ts, for the Responses and Messages APIs that coding agents speak
// (and chat's nested parts and tools): nested items of every kind with wrong types anywhere get a 4xx, never a 5xx.
// A server of its own, with the default idle timeout: hostile-input.test.ts's 2 s one can close a keep-alive
// connection just as the client reuses it, which a long run of requests meets now and then.
import { afterAll, beforeAll, expect, test } from "bun:test";
import fc from "fast-check";
import { startFakeUpstream, type FakeUpstream } from "../fake-upstream";
import { anyFieldValue, expectStillServes, fakeModel, startSluice, type TestSluice } from "../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")], plans: [{ id: "default", models: ["*"], tokens_per_5h: 1_000_000_000 }] });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

/** A content block, part or input item of any known type (or none), its fields of any type. */
const block = fc.oneof(
  anyFieldValue,
  fc.record(
    {
      type: fc.constantFrom(
        "text",
        "image",
        "tool_use",
        "tool_result",
        "thinking",
        "input_text",
        "output_text",
        "input_image",
        "function_call",
        "function_call_output",
        "message",
        "image_url",
      ),
      text: anyFieldValue,
      content: anyFieldValue,
      id: anyFieldValue,
      input: anyFieldValue,
      tool_use_id: anyFieldValue,
      call_id: anyFieldValue,
      output: anyFieldValue,
      name: anyFieldValue,
      arguments: anyFieldValue,
      image_url: anyFieldValue,
    },
    { requiredKeys: ["type"] },
  ),
);
const blocks = fc.oneof(anyFieldValue, fc.array(block, { maxLength: 3 }));
const statuses = new Map<number, number>();

/** Posts `body`, stream on or off, and fails on a 5xx; the body is consumed, streamed or not. */
async function expectNo5xx(path: string, body: unknown): Promise<void> {
  const response = await sluice.post(path, body, path === "/v1/messages" ? { "x-api-key": sluice.key } : {});
  const text = await response.text();
  statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
  if (response.status >= 500) throw new Error(`${response.status} for ${JSON.stringify(body).slice(0, 300)}: ${text.slice(0, 300)}`);
}

test("Responses: wrong types in every field, and input items of every kind with wrong fields", async () => {
  const fields = [
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "text",
    "reasoning",
    "store",
    "metadata",
    "include",
    "user",
  ];
  await fc.assert(
    fc.asyncProperty(fc.constantFrom(...fields), anyFieldValue, fc.boolean(), (field, value, stream) =>
      expectNo5xx("/v1/responses", { model: "m", input: "hi", stream, [field]: value }),
    ),
    { numRuns: 400 },
  );
  const item = fc.oneof(
    block,
    fc.record(
      {
        role: fc.constantFrom("user", "assistant", "system", "developer", "tool"),
        content: blocks,
        type: fc.constantFrom("message", "function_call", "function_call_output", "reasoning"),
      },
      { requiredKeys: [] },
    ),
  );
  await fc.assert(
    fc.asyncProperty(fc.array(item, { maxLength: 4 }), fc.boolean(), (input, stream) => expectNo5xx("/v1/responses", { model: "m", input, stream })),
    { numRuns: 400 },
  );
  await expectStillServes(sluice);
}, 60_000);

test("Messages: wrong types in every field, and turns and system blocks of every kind with wrong fields", async () => {
  const fields = [
    "model",
    "max_tokens",
    "messages",
    "system",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "tools",
    "tool_choice",
    "metadata",
    "thinking",
  ];
  const good = { model: "m", max_tokens: 50, messages: [{ role: "user", content: "hi" }] };
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(...fields),
      anyFieldValue,
      fc.constantFrom("role", "content", "0"),
      anyFieldValue,
      fc.boolean(),
      (field, value, turnField, turnValue, stream) =>
        expectNo5xx("/v1/messages", { ...good, stream, messages: [{ role: "user", content: "hi", [turnField]: turnValue }], [field]: value }),
    ),
    { numRuns: 400 },
  );
  const turn = fc.record({ role: fc.oneof(fc.constantFrom("user", "assistant"), anyFieldValue), content: blocks }, { requiredKeys: [] });
  await fc.assert(
    fc.asyncProperty(fc.array(turn, { maxLength: 4 }), fc.boolean(), blocks, (messages, stream, system) =>
      expectNo5xx("/v1/messages", { ...good, stream, messages, system }),
    ),
    { numRuns: 400 },
  );
  await expectStillServes(sluice);
}, 60_000);

test("chat: messages with parts and tool calls of every kind, and tools, with wrong fields", async () => {
  const toolCall = fc.record(
    {
      id: anyFieldValue,
      type: fc.constantFrom("function", "x"),
      function: fc.oneof(anyFieldValue, fc.record({ name: anyFieldValue, arguments: anyFieldValue })),
    },
    { requiredKeys: [] },
  );
  const message = fc.record(
    {
      role: fc.oneof(fc.constantFrom("user", "assistant", "system", "developer", "tool"), anyFieldValue),
      content: blocks,
      tool_calls: fc.oneof(anyFieldValue, fc.array(toolCall, { maxLength: 2 })),
      tool_call_id: anyFieldValue,
      name: anyFieldValue,
    },
    { requiredKeys: ["role"] },
  );
  const tool = fc.oneof(
    anyFieldValue,
    fc.record({
      type: fc.constant("function"),
      function: fc.oneof(anyFieldValue, fc.record({ name: anyFieldValue, parameters: anyFieldValue, description: anyFieldValue })),
    }),
  );
  await fc.assert(
    fc.asyncProperty(
      fc.array(message, { minLength: 1, maxLength: 4 }),
      fc.boolean(),
      fc.oneof(anyFieldValue, fc.array(tool, { maxLength: 2 })),
      (messages, stream, tools) => expectNo5xx("/v1/chat/completions", { model: "m", stream, messages, tools }),
    ),
    { numRuns: 500 },
  );
  await expectStillServes(sluice);
  // Some of the bodies were valid and answered: the properties reached past validation, not only into it.
  expect(statuses.get(200) ?? 0).toBeGreaterThan(50);
  expect(statuses.get(400) ?? 0).toBeGreaterThan(500);
}, 60_000);
