// The output limit's name upstream: OpenAI's reasoning models refuse max_tokens and take only max_completion_tokens.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { committedRowsSql, fakeModel, startSluice, useFakeUpstream, type TestSluice } from "../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });
let sluice: TestSluice;
const messages = [{ role: "user" as const, content: "Hello" }];

beforeAll(async () => {
  sluice = await startSluice({
    models: [
      fakeModel(upstream.url, "learns", "completion-tokens-only"),
      fakeModel(upstream.url, "learns-too", "completion-tokens-only"),
      fakeModel(upstream.url, "learns-at-once", "completion-tokens-only"),
      fakeModel(upstream.url, "configured", "completion-tokens-only", { max_tokens_field: "max_completion_tokens" }),
      fakeModel(upstream.url, "old-name", "echo", { max_tokens_field: "max_tokens" }),
      fakeModel(upstream.url, "echo"),
      fakeModel(upstream.url, "bad", "bad-400"),
    ],
    plans: [{ id: "default", models: ["*"] }],
  });
});
afterAll(async () => {
  await sluice.stop();
});

/** The output limit each upstream request carried, by name. */
function limitsSent(): Record<string, unknown>[] {
  return upstream.bodies.map((body) => Object.fromEntries(Object.entries(body).filter(([name]) => name === "max_tokens" || name === "max_completion_tokens")));
}

describe("an upstream that refuses max_tokens for max_completion_tokens", () => {
  test("the first request is sent again with the limit renamed and answered; from then on the limit goes renamed at once, streams too", async () => {
    const first = await sluice.client().chat.completions.create({ model: "learns", messages, max_tokens: 300 });
    expect(first.choices[0]?.message.content).toBe("limit 300");
    expect(limitsSent()).toEqual([{ max_tokens: 300 }, { max_completion_tokens: 300 }]);
    upstream.reset();
    const stream = await sluice.client().chat.completions.create({ model: "learns", messages, stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toMatch(/^limit \d+$/);
    expect(limitsSent()).toEqual([{ max_completion_tokens: expect.any(Number) }]);
    // One ledger row a request, nothing left held.
    const rows = sluice.database.sqlite.query<{ request_id: string; model: string }, []>(committedRowsSql).all();
    expect(rows.filter((row) => row.model === "learns")).toHaveLength(2);
    expect(sluice.server.admission.inFlight()).toBe(0);
  });

  test("a stream is the first request: the same, and through the Responses and Messages APIs", async () => {
    const stream = await sluice.client().chat.completions.create({ model: "learns-too", messages, stream: true, max_tokens: 50 });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe("limit 50");
    expect(limitsSent()).toEqual([{ max_tokens: 50 }, { max_completion_tokens: 50 }]);
    const response = await sluice.client().responses.create({ model: "learns-too", input: "Hello", max_output_tokens: 40 });
    expect(response.output_text).toBe("limit 40");
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
    const message = await anthropic.messages.create({ model: "learns-too", max_tokens: 30, messages });
    expect(message.content).toMatchObject([{ type: "text", text: "limit 30" }]);
    expect(limitsSent().slice(2)).toEqual([{ max_completion_tokens: 40 }, { max_completion_tokens: 30 }]);
  });

  test("requests sent before the first refusal came back are each sent again renamed, not failed: 40 at once, all answered", async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, () => sluice.post("/v1/chat/completions", { model: "learns-at-once", messages, max_tokens: 9 })),
    );
    expect(answers.map((answer) => answer.status)).toEqual(Array.from({ length: 40 }, () => 200));
    // Each at most twice: once as max_tokens, once renamed.
    const sent = limitsSent();
    expect(sent.filter((limit) => "max_completion_tokens" in limit)).toHaveLength(40);
    expect(sent.length).toBeLessThanOrEqual(80);
    await Promise.all(answers.map((answer) => answer.arrayBuffer()));
    expect(sluice.server.admission.inFlight()).toBe(0);
  });

  test("max_tokens_field names the limit from the first request, whatever name the caller used", async () => {
    const answer = await sluice.client().chat.completions.create({ model: "configured", messages, max_tokens: 20 });
    expect(answer.choices[0]?.message.content).toBe("limit 20");
    await sluice.client().chat.completions.create({ model: "old-name", messages, max_completion_tokens: 10 });
    expect(limitsSent()).toEqual([{ max_completion_tokens: 20 }, { max_tokens: 10 }]);
  });

  test("any other 400 is answered as before, sent once; an upstream that takes max_tokens gets it", async () => {
    const refused = await sluice.post("/v1/chat/completions", { model: "bad", messages, max_tokens: 5 });
    expect(refused.status).toBe(400);
    expect(upstream.bodies).toHaveLength(1);
    await sluice.client().chat.completions.create({ model: "echo", messages, max_tokens: 7 });
    expect(limitsSent().at(-1)).toEqual({ max_tokens: 7 });
  });
});
