// The Responses stream encoder's content parts: a message's text and a refusal after it are two parts of one item,
// each opened, filled and closed at its own content_index, as OpenAI's stream gives them.
import { expect, test } from "bun:test";
import { responsesFormat } from "../../../src/modules/responses/format";
import type { ResponsesRequest } from "../../../src/modules/responses/model";

/** The events a stream encoder writes, parsed. */
function eventsOf(frames: string[]): Record<string, unknown>[] {
  return frames
    .join("")
    .split("\n\n")
    .filter((frame) => frame.includes("data: "))
    .map((frame) => JSON.parse(frame.slice(frame.indexOf("data: ") + 6)) as Record<string, unknown>);
}

test("text, then a refusal: parts 0 and 1 of one message, and the completed response holds both", () => {
  const encoder = responsesFormat({ model: "m", input: "Hi" } as ResponsesRequest).stream(
    { requestId: "req_abc", created: 1, model: "m" },
    { includeUsage: false, promptTokens: 1 },
  );
  const out: string[] = [];
  encoder.start(out);
  encoder.event({ type: "delta", content: "Let me see. " }, out);
  encoder.event({ type: "delta", refusal: "I can't" }, out);
  encoder.event({ type: "delta", refusal: " help." }, out);
  encoder.event({ type: "finish", reason: "stop" }, out);
  encoder.end({ promptTokens: 1, completionTokens: 5, reasoningTokens: 0, cachedTokens: 0 }, out);
  const events = eventsOf(out);
  expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index));
  const place = (event: Record<string, unknown>) => `${event.type}@${event.content_index}`;
  expect(events.filter((event) => "content_index" in event).map(place)).toEqual([
    "response.content_part.added@0",
    "response.output_text.delta@0",
    "response.output_text.done@0",
    "response.content_part.done@0",
    "response.content_part.added@1",
    "response.refusal.delta@1",
    "response.refusal.delta@1",
    "response.refusal.done@1",
    "response.content_part.done@1",
  ]);
  const content = [
    { type: "output_text", text: "Let me see. ", annotations: [], logprobs: [] },
    { type: "refusal", refusal: "I can't help." },
  ];
  const completed = events.at(-1) as { type: string; response: { output: unknown[] } };
  expect(completed.type).toBe("response.completed");
  expect(completed.response.output).toEqual([{ type: "message", id: "msg_abc", status: "completed", role: "assistant", content }]);
  expect(events.filter((event) => event.type === "response.output_item.added")).toHaveLength(1);
});

test("a whole answer with text and a refusal: both parts, in that order", () => {
  const body = responsesFormat({ model: "m", input: "Hi" } as ResponsesRequest).whole(
    { requestId: "req_abc", created: 1, model: "m" },
    { content: "Let me see. ", reasoning: null, toolCalls: null, refusal: "I can't help.", finishReason: "stop", usage: undefined },
    { promptTokens: 1, completionTokens: 5, reasoningTokens: 0, cachedTokens: 0 },
  );
  expect(JSON.parse(body).output[0].content).toEqual([
    { type: "output_text", text: "Let me see. ", annotations: [], logprobs: [] },
    { type: "refusal", refusal: "I can't help." },
  ]);
});
