import { describe, expect, test } from "bun:test";
import type { AnswerEvent } from "../../../src/modules/chat/format";
import { ChunkEncoder, completionText } from "../../../src/modules/chat/response";
import type { Completion } from "../../../src/upstream/types";
import { schemaErrors, type StreamChunk } from "../../helpers";

const identity = { requestId: "req_0193a5b2c3d4e5f6", created: 1_763_800_000, model: "caller-model" };

/** The payloads of a batch's frames, as a client reads the bytes the response writes one piece after the other. */
function payloads(batch: string[]): StreamChunk[] {
  const text = batch.join("");
  expect(text.endsWith("\n\n")).toBe(true);
  return text
    .slice(0, -2)
    .split("\n\n")
    .map((frame) => {
      expect(frame.startsWith("data: ")).toBe(true);
      return JSON.parse(frame.slice(6)) as StreamChunk;
    });
}

describe("ChunkEncoder", () => {
  const awkward = 'a "quoted" line\nthen \\ a backslash, </script> and 漢字 😀';
  const call = { index: 0, id: "call_1", type: "function", function: { name: "lookup", arguments: '{"q":"x"}' } };
  const cases: [string, AnswerEvent, Record<string, unknown>][] = [
    ["content", { type: "delta", content: awkward }, { content: awkward }],
    ["reasoning", { type: "delta", reasoning: awkward }, { reasoning_content: awkward }],
    ["tool calls", { type: "delta", toolCalls: [call] }, { tool_calls: [call] }],
    ["reasoning and content", { type: "delta", reasoning: "think", content: "say" }, { reasoning_content: "think", content: "say" }],
    ["content and tool calls", { type: "delta", content: "say", toolCalls: [call] }, { content: "say", tool_calls: [call] }],
    ["all three", { type: "delta", reasoning: "think", content: "say", toolCalls: [call] }, { reasoning_content: "think", content: "say", tool_calls: [call] }],
  ];

  for (const [name, event, delta] of cases) {
    test(`a delta with ${name} is one chunk in OpenAI's schema, whatever pieces it is written in`, () => {
      const batch: string[] = [];
      new ChunkEncoder(identity, { includeUsage: false, promptTokens: 1 }).event(event, batch);
      const [chunk, ...rest] = payloads(batch);
      expect(rest).toEqual([]);
      expect(schemaErrors("CreateChatCompletionStreamResponse", chunk)).toEqual([]);
      expect(chunk?.id).toBe("chatcmpl-0193a5b2c3d4e5f6");
      expect(chunk?.model).toBe("caller-model");
      expect(chunk?.choices[0]?.delta).toEqual(delta);
      expect(chunk?.choices[0]?.finish_reason).toBeNull();
    });
  }

  test("a read's batch of several events ends on a frame boundary and keeps their order", () => {
    const encoder = new ChunkEncoder(identity, { includeUsage: true, promptTokens: 3 });
    const batch: string[] = [];
    encoder.start(batch);
    for (const piece of ["one ", "two ", "three"]) encoder.event({ type: "delta", content: piece }, batch);
    encoder.event({ type: "finish", reason: "stop" }, batch);
    encoder.end({ promptTokens: 3, completionTokens: 3, reasoningTokens: 0, cachedTokens: 0 }, batch);
    expect(batch.at(-1)).toBe("data: [DONE]\n\n");
    const chunks = payloads(batch.slice(0, -1));
    for (const chunk of chunks) expect(schemaErrors("CreateChatCompletionStreamResponse", chunk)).toEqual([]);
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? null)).toEqual(["", "one ", "two ", "three", null, null]);
    expect(chunks[4]?.choices[0]?.finish_reason).toBe("stop");
    expect(chunks[5]?.choices).toEqual([]);
    expect(chunks[5]?.usage?.total_tokens).toBe(6);
  });
});

describe("completionText", () => {
  const awkward = 'a "quoted" line\nthen \\ a backslash, </script>, \u2028 and 漢字 😀';
  const call = { id: "call_1", type: "function", function: { name: "lookup", arguments: '{"q":"x"}' } };
  const usage = { promptTokens: 12, completionTokens: 7, reasoningTokens: 3, cachedTokens: 4 };
  const cases: [string, Completion, Record<string, unknown>][] = [
    [
      "content and reasoning",
      { content: awkward, reasoning: awkward, toolCalls: null, finishReason: "stop", usage: undefined },
      { role: "assistant", content: awkward, reasoning_content: awkward, refusal: null },
    ],
    [
      "tool calls and no content",
      { content: null, reasoning: null, toolCalls: [call], finishReason: "tool_calls", usage: undefined },
      { role: "assistant", content: null, reasoning_content: null, refusal: null, tool_calls: [call] },
    ],
  ];

  for (const [name, completion, message] of cases) {
    test(`a whole answer with ${name} is JSON text of OpenAI's chat.completion, fields in its order`, () => {
      const text = completionText({ ...identity, model: 'a "model"' }, completion, usage);
      const body = JSON.parse(text) as Record<string, unknown>;
      // Written in OpenAI's order: toEqual below ignores the order of keys, the text compared with this does not.
      const expected = {
        id: "chatcmpl-0193a5b2c3d4e5f6",
        object: "chat.completion",
        created: identity.created,
        model: 'a "model"',
        choices: [{ index: 0, message, logprobs: null, finish_reason: completion.finishReason }],
        usage: {
          prompt_tokens: 12,
          completion_tokens: 7,
          total_tokens: 19,
          prompt_tokens_details: { cached_tokens: 4 },
          completion_tokens_details: { reasoning_tokens: 3 },
        },
      };
      expect(body).toEqual(expected);
      // As OpenAI's own bodies are written: its keys in this order, no spaces.
      expect(text).toBe(JSON.stringify(expected));
      expect(schemaErrors("CreateChatCompletionResponse", body)).toEqual([]);
    });
  }
});
