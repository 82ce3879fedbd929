import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, readSse, type StreamChunk, schemaErrors, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice(
    {
      models: [
        fakeModel(upstream.url, "qwen3", "vllm", { api_key_env: "FAKE_UPSTREAM_KEY" }),
        fakeModel(upstream.url, "deepseek-r1", "deepseek"),
        fakeModel(upstream.url, "echo", "echo", { context_window: 4096, max_output_tokens: 1000 }),
        fakeModel(upstream.url, "no-usage"),
        { id: "sluice-demo", backend: "demo", stream_delay_ms: 0 },
      ],
      plans: [{ id: "default", models: ["*"] }],
    },
    { environment: { FAKE_UPSTREAM_KEY: "upstream-secret" } },
  );
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});
beforeEach(() => upstream.reset());

const messages = [{ role: "user" as const, content: "What is 2+2?" }];

describe("whole answers", () => {
  test("vLLM-style reasoning comes back as reasoning_content, with the caller's model id and OpenAI's schema", async () => {
    const completion = await sluice.client().chat.completions.create({ model: "qwen3", messages });
    expect(schemaErrors("CreateChatCompletionResponse", completion)).toEqual([]);
    expect(completion.model).toBe("qwen3");
    expect(completion.object).toBe("chat.completion");
    const message = completion.choices[0]!.message as (typeof completion.choices)[0]["message"] & { reasoning_content?: string };
    expect(message.content).toBe("2+2 is 4.");
    expect(message.reasoning_content).toBe("The user asks for 2+2.");
    expect(message.refusal).toBeNull();
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    expect(completion.usage).toMatchObject({ prompt_tokens: 14, completion_tokens: 11, total_tokens: 25 });
    // vLLM reports no reasoning_tokens: Sluice counts the reasoning it saw.
    expect(completion.usage?.completion_tokens_details?.reasoning_tokens).toBeGreaterThan(0);
    expect(completion.usage!.completion_tokens_details!.reasoning_tokens!).toBeLessThanOrEqual(11);
  });

  test("DeepSeek-style reasoning_content passes through with its reasoning_tokens", async () => {
    const completion = await sluice.client().chat.completions.create({ model: "deepseek-r1", messages });
    expect(schemaErrors("CreateChatCompletionResponse", completion)).toEqual([]);
    expect((completion.choices[0]!.message as unknown as { reasoning_content: string }).reasoning_content).toBe("Two plus two equals four.");
    expect(completion.usage?.completion_tokens_details?.reasoning_tokens).toBe(7);
  });

  test("the upstream gets its own model name, its key, the effective max_tokens, forwarded fields and nothing unnamed", async () => {
    await sluice.post("/v1/chat/completions", {
      model: "qwen3",
      messages,
      temperature: 0.5,
      top_p: 0.9,
      seed: 7,
      stop: ["\n"],
      reasoning_effort: "low",
      response_format: { type: "text" },
      tools: [{ type: "function", function: { name: "f", parameters: {} } }],
      tool_choice: "auto",
      parallel_tool_calls: false,
      logprobs: false,
      presence_penalty: 0.1,
      frequency_penalty: 0.2,
      user: "someone",
      metadata: { a: 1 },
      made_up_field: true,
    });
    const sent = upstream.bodies[0]!;
    expect(upstream.authorizations[0]).toBe("Bearer upstream-secret");
    expect(sent.model).toBe("vllm");
    expect(sent.max_tokens).toBe(8192);
    expect(sent).toMatchObject({
      temperature: 0.5,
      top_p: 0.9,
      seed: 7,
      stop: ["\n"],
      reasoning_effort: "low",
      tool_choice: "auto",
      parallel_tool_calls: false,
      logprobs: false,
      presence_penalty: 0.1,
      frequency_penalty: 0.2,
    });
    expect(sent.response_format).toEqual({ type: "text" });
    expect(sent).not.toHaveProperty("user");
    expect(sent).not.toHaveProperty("metadata");
    expect(sent).not.toHaveProperty("made_up_field");
  });

  test("the default max_tokens is lowered to the model's max_output_tokens, and to what fits the context", async () => {
    await sluice.post("/v1/chat/completions", { model: "echo", messages });
    expect(upstream.bodies[0]!.max_tokens).toBe(1000);
    const long = "lorem ipsum ".repeat(1700); // ~3400 tokens of a 4096 window
    await sluice.post("/v1/chat/completions", { model: "echo", messages: [{ role: "user", content: long }] });
    const sent = upstream.bodies[1]!.max_tokens as number;
    expect(sent).toBeLessThan(1000);
    expect(sent).toBeGreaterThan(0);
  });

  test("max_completion_tokens is honoured under its own name; both names with the same value are fine", async () => {
    await sluice.post("/v1/chat/completions", { model: "echo", messages, max_completion_tokens: 77 });
    expect(upstream.bodies[0]!.max_completion_tokens).toBe(77);
    expect(upstream.bodies[0]).not.toHaveProperty("max_tokens");
    const response = await sluice.post("/v1/chat/completions", { model: "echo", messages, max_tokens: 50, max_completion_tokens: 50 });
    expect(response.status).toBe(200);
  });

  test("an upstream without usage is counted with the tokenizer", async () => {
    const completion = await sluice.client().chat.completions.create({ model: "no-usage", messages });
    expect(completion.usage!.prompt_tokens).toBeGreaterThan(0);
    expect(completion.usage!.completion_tokens).toBeGreaterThan(completion.usage!.completion_tokens_details!.reasoning_tokens!);
    expect(completion.usage!.completion_tokens_details!.reasoning_tokens).toBe(2); // "thinking hard"
    const row = sluice.ledgerRows().at(-1)!;
    expect(row.usage_source).toBe("tokenizer");
  });

  test("a message that names a special token (<|endoftext|>) is counted as text: answered, billed and recorded", async () => {
    const special = [{ role: "user" as const, content: "What does <|endoftext|> mean?" }];
    const rowsBefore = sluice.ledgerRows().length;
    const whole = await sluice.client().chat.completions.create({ model: "no-usage", messages: special });
    // "What does <|endoftext|> mean?" is 10 tokens as text; "user" 1, the message 3 and the reply 3 more.
    expect(whole.usage!.prompt_tokens).toBe(17);
    const stream = await sluice
      .client()
      .chat.completions.create({ model: "no-usage", messages: special, stream: true, stream_options: { include_usage: true } });
    let usage: { prompt_tokens: number } | undefined | null;
    for await (const chunk of stream) usage = chunk.usage ?? usage;
    expect(usage!.prompt_tokens).toBe(17);
    // A prompt long enough to be tokenized for the context check.
    const long = await sluice.post("/v1/chat/completions", { model: "echo", messages: [{ role: "user", content: "<|endoftext|> ".repeat(400) }] });
    expect(long.status).toBe(200);
    const rows = sluice.ledgerRows().slice(rowsBefore);
    expect(rows.map((row) => [row.outcome, row.usage_source])).toEqual([
      ["completed", "tokenizer"],
      ["completed", "tokenizer"],
      ["completed", "upstream"],
    ]);
  });

  test("every response carries x-request-id, and the ledger row has the same id", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "qwen3", messages });
    const requestId = response.headers.get("x-request-id");
    expect(requestId).toMatch(/^req_[0-9a-f]{32}$/);
    const row = sluice.ledgerRows().find((candidate) => candidate.request_id === requestId);
    expect(row).toMatchObject({ model: "qwen3", prompt_tokens: 14, completion_tokens: 11, outcome: "completed", usage_source: "upstream" });
  });

  test("the demo model answers with honest usage", async () => {
    const completion = await sluice.client().chat.completions.create({ model: "sluice-demo", messages });
    expect(completion.choices[0]!.message.content).toContain("3 words");
    expect(completion.usage!.completion_tokens).toBeGreaterThan(completion.usage!.completion_tokens_details!.reasoning_tokens!);
    const limited = await sluice.client().chat.completions.create({ model: "sluice-demo", messages, max_tokens: 5 });
    expect(limited.usage!.completion_tokens).toBeLessThanOrEqual(5);
    expect(limited.choices[0]!.finish_reason).toBe("length");
  });
});

describe("streams", () => {
  test("vLLM-style stream through the SDK: role first, reasoning_content deltas, finish, no usage unless asked", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "qwen3", messages, stream: true });
    expect(response.headers.get("content-type")).toContain("text/event-stream");
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    const events = await readSse(response);
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1) as StreamChunk[];
    for (const chunk of chunks) {
      expect(schemaErrors("CreateChatCompletionStreamResponse", chunk)).toEqual([]);
      expect(chunk.model).toBe("qwen3");
      expect(chunk.usage).toBeNull();
    }
    expect(chunks[0]!.choices[0]?.delta.role).toBe("assistant");
    const reasoning = chunks.map((chunk) => chunk.choices[0]?.delta.reasoning_content ?? "").join("");
    const content = chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("");
    expect(reasoning).toBe("The user asks for 2+2.");
    expect(content).toBe("2+2 is 4.");
    expect(chunks.some((chunk) => "reasoning" in (chunk.choices[0]?.delta ?? {}))).toBe(false);
    expect(chunks.at(-1)!.choices[0]?.finish_reason).toBe("stop");
    // Sluice always asks the upstream for usage.
    expect(upstream.bodies[0]!.stream_options).toEqual({ include_usage: true });
  });

  test("include_usage adds one usage chunk with no choices before [DONE]", async () => {
    const stream = await sluice.client().chat.completions.create({ model: "deepseek-r1", messages, stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: 13, completion_tokens: 9, total_tokens: 22, completion_tokens_details: { reasoning_tokens: 7 } });
    expect(chunks.slice(0, -1).every((chunk) => chunk.usage === null)).toBe(true);
    const reasoning = chunks.map((chunk) => (chunk.choices[0]?.delta as { reasoning_content?: string } | undefined)?.reasoning_content ?? "").join("");
    expect(reasoning).toBe("Two plus two equals four.");
    expect(chunks.find((chunk) => chunk.choices[0]?.finish_reason)?.choices[0]?.finish_reason).toBe("stop");
  });

  test("the demo model streams token by token and the ledger records it", async () => {
    const stream = await sluice.client().chat.completions.create({ model: "sluice-demo", messages, stream: true, stream_options: { include_usage: true } });
    let pieces = 0;
    let usage: { completion_tokens: number } | undefined;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) pieces++;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(pieces).toBeGreaterThan(5);
    expect(usage!.completion_tokens).toBeGreaterThan(0);
    expect(sluice.ledgerRows().at(-1)).toMatchObject({ model: "sluice-demo", outcome: "completed", completion_tokens: usage!.completion_tokens });
  });
});
