// The prompt tokens an upstream read from its cache (vLLM's prefix cache, OpenAI's prompt caching) reach the caller in
// each API's own terms: coding agents resend a long, mostly unchanged prompt every turn, and show what the cache saved.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { usageReport } from "../../../src/modules/usage/report";
import { eventually, fakeModel, schemaErrors, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice({
    models: [
      fakeModel(upstream.url, "cached", "cached-1000-20-700"),
      // An upstream that claims more cached tokens than the prompt had.
      fakeModel(upstream.url, "overclaimed", "cached-10-5-99"),
      fakeModel(upstream.url, "plain", "usage-1000-20"),
    ],
    plans: [{ id: "default", models: ["*"] }],
  });
  openai = sluice.client();
  anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});
beforeEach(() => upstream.reset());

const messages = [{ role: "user" as const, content: "Refactor the parser." }];

describe("Chat Completions: usage.prompt_tokens_details.cached_tokens", () => {
  test("a whole answer carries the upstream's count, and prompt_tokens still include it", async () => {
    const completion = await openai.chat.completions.create({ model: "cached", messages });
    expect(completion.usage).toMatchObject({ prompt_tokens: 1000, completion_tokens: 20, total_tokens: 1020, prompt_tokens_details: { cached_tokens: 700 } });
    expect(schemaErrors("CreateChatCompletionResponse", completion)).toEqual([]);
  });

  test("a stream's usage chunk carries it", async () => {
    const stream = await openai.chat.completions.create({ model: "cached", messages, stream: true, stream_options: { include_usage: true } });
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    expect(usage?.prompt_tokens_details?.cached_tokens).toBe(700);
    expect(usage?.prompt_tokens).toBe(1000);
  });

  test("an upstream that said nothing of its cache: 0", async () => {
    const completion = await openai.chat.completions.create({ model: "plain", messages });
    expect(completion.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
  });

  test("more cached tokens than the prompt had are cut to the prompt", async () => {
    const completion = await openai.chat.completions.create({ model: "overclaimed", messages });
    expect(completion.usage?.prompt_tokens).toBe(10);
    expect(completion.usage?.prompt_tokens_details?.cached_tokens).toBe(10);
  });
});

describe("Responses: usage.input_tokens_details.cached_tokens", () => {
  test("whole and streamed", async () => {
    const response = await openai.responses.create({ model: "cached", input: "Refactor the parser." });
    expect(response.usage).toMatchObject({ input_tokens: 1000, output_tokens: 20, total_tokens: 1020, input_tokens_details: { cached_tokens: 700 } });
    const stream = await openai.responses.create({ model: "cached", input: "Refactor the parser.", stream: true });
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) if (event.type === "response.completed") completed = event.response;
    expect(completed?.usage?.input_tokens_details.cached_tokens).toBe(700);
  });
});

describe("Messages: cache_read_input_tokens, apart from input_tokens as Anthropic counts them", () => {
  test("whole: the prompt's 1,000 tokens are 300 read fresh and 700 from the cache", async () => {
    const message = await anthropic.messages.create({ model: "cached", max_tokens: 64, messages });
    expect(message.usage).toMatchObject({ input_tokens: 300, cache_read_input_tokens: 700, cache_creation_input_tokens: 0, output_tokens: 20 });
  });

  test("streamed: message_delta's usage", async () => {
    const stream = anthropic.messages.stream({ model: "cached", max_tokens: 64, messages });
    const final = await stream.finalMessage();
    expect(final.usage.cache_read_input_tokens).toBe(700);
    expect(final.usage.input_tokens).toBe(300);
    expect(final.usage.output_tokens).toBe(20);
  });

  test("an upstream that said nothing of its cache: every prompt token is input", async () => {
    const message = await anthropic.messages.create({ model: "plain", max_tokens: 64, messages });
    expect(message.usage).toMatchObject({ input_tokens: 1000, cache_read_input_tokens: 0 });
  });
});

test("cached tokens are prompt tokens for quotas, and the ledger holds both: the whole prompt and what the cache served", async () => {
  const before = sluice.ledgerRows().length;
  await openai.chat.completions.create({ model: "cached", messages });
  await anthropic.messages.create({ model: "cached", max_tokens: 64, messages, stream: false });
  await eventually(() => sluice.ledgerRows().length === before + 2);
  for (const row of sluice.ledgerRows().slice(-2)) {
    expect(row).toMatchObject({ model: "cached", prompt_tokens: 1000, completion_tokens: 20, cached_tokens: 700, usage_source: "upstream" });
  }
  // The month's report (rows staged or moved alike): the prompt tokens, of which cached, and the completion tokens.
  const report = await usageReport(sluice.storage.usage, {}, Date.now());
  const cachedModel = report.rows.find((row) => row.group === "cached");
  expect(cachedModel?.cachedTokens).toBe((700 * (cachedModel?.promptTokens ?? 0)) / 1000);
  expect(cachedModel?.promptTokens).toBeGreaterThanOrEqual(2000);
  const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
  const counted = (kind: string) => Number(new RegExp(`sluice_tokens_total\\{model="cached",kind="${kind}"\\} (\\d+)`).exec(metrics)?.[1]);
  expect(counted("cached") / counted("prompt")).toBe(0.7);
});
