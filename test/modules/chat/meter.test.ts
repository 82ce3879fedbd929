import { describe, expect, test } from "bun:test";
import { UsageMeter } from "../../../src/modules/chat/meter";
import { countChatTokens, countTextTokens } from "../../../src/tokens/count";
import type { Completion } from "../../../src/upstream/types";

const messages = [{ role: "user", text: "What is the weather in Paris?" }];
const call = { index: 0, id: "call_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } };

function completion(fields: Partial<Completion>): Completion {
  return { content: null, reasoning: null, toolCalls: null, finishReason: "stop", usage: undefined, ...fields };
}

describe("UsageMeter", () => {
  test("an upstream's usage is billed as it came, without waiting for the tokenizer", () => {
    const meter = new UsageMeter();
    const usage = { promptTokens: 12, completionTokens: 5, reasoningTokens: 0, cachedTokens: 0 };
    meter.observeCompletion(completion({ content: "Sunny.", usage }));
    const measured = meter.usage(messages, undefined);
    expect(measured).not.toBeInstanceOf(Promise);
    expect(measured).toEqual({ usage, source: "upstream" });
  });

  test("a whole answer without usage is counted: prompt, content, reasoning and its tool calls", async () => {
    const meter = new UsageMeter();
    meter.observeCompletion(completion({ content: "Let me look.", reasoning: "The user wants weather.", toolCalls: [call] }));
    expect(meter.producedAnything()).toBe(true);
    const reasoningTokens = await countTextTokens("The user wants weather.");
    expect(await meter.usage(messages, undefined)).toEqual({
      usage: {
        promptTokens: await countChatTokens(messages),
        completionTokens: reasoningTokens + (await countTextTokens("Let me look.")) + (await countTextTokens(JSON.stringify([call]))),
        reasoningTokens,
        cachedTokens: 0,
      },
      source: "tokenizer",
    });
  });

  test("a stream's pieces count as the whole answer they make, however many blocks they fill", async () => {
    const streamed = new UsageMeter();
    const words = Array.from({ length: 150 }, (_, index) => `word${index} `);
    for (const word of words) streamed.observe({ type: "delta", content: word });
    streamed.observe({ type: "delta", toolCalls: [call] });
    const whole = new UsageMeter();
    whole.observeCompletion(completion({ content: words.join(""), toolCalls: [call] }));
    const expected = await whole.usage(messages, 7);
    expect(expected.usage.promptTokens).toBe(7);
    expect(await streamed.usage(messages, 7)).toEqual(expected);
  });

  test("reasoning the upstream streamed but did not report is counted, within its completion tokens", async () => {
    const meter = new UsageMeter();
    meter.observe({ type: "delta", reasoning: "thinking hard about it" });
    meter.observe({ type: "usage", usage: { promptTokens: 9, completionTokens: 2, reasoningTokens: 0, cachedTokens: 0 } });
    const measured = meter.usage(messages, undefined);
    expect(measured).toBeInstanceOf(Promise);
    expect(await measured).toEqual({ usage: { promptTokens: 9, completionTokens: 2, reasoningTokens: 2, cachedTokens: 0 }, source: "upstream" });
  });

  test("a meter that saw nothing says so, and one that saw only tool calls does not", () => {
    expect(new UsageMeter().producedAnything()).toBe(false);
    const meter = new UsageMeter();
    meter.observeCompletion(completion({ toolCalls: [call], finishReason: "tool_calls" }));
    expect(meter.producedAnything()).toBe(true);
  });
});
