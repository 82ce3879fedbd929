// POST /v1/messages and /v1/messages/count_tokens through the official Anthropic SDK: translated onto the chat path.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { countChatTokens } from "../../../src/tokens/count";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
let client: Anthropic;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice(
    {
      models: [
        fakeModel(upstream.url, "qwen", "vllm", { aliases: ["claude-sonnet-5-5"] }),
        fakeModel(upstream.url, "deepseek-r1", "deepseek"),
        fakeModel(upstream.url, "qwen-tools", "vllm-tools"),
        fakeModel(upstream.url, "echo", "echo", { max_output_tokens: 1024 }),
        fakeModel(upstream.url, "stop-sequence"),
        fakeModel(upstream.url, "split-phrase"),
        fakeModel(upstream.url, "goes-silent"),
        { id: "tiny-demo", backend: "demo", max_output_tokens: 4 },
      ],
      plans: [{ id: "default", models: ["*"] }],
    },
    { heartbeatMs: 100 },
  );
  client = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});
beforeEach(() => upstream.reset());

const weatherTool = {
  name: "get_weather",
  description: "Weather of a city",
  input_schema: { type: "object" as const, properties: { city: { type: "string" } } },
};

function expectSettled() {
  expect(sluice.server.admission.inFlight()).toBe(0);
  expect(sluice.server.admission.reservedTokens()).toBe(0);
}

describe("whole answers", () => {
  test("vLLM style: a thinking block, then text; end_turn; usage; the id from the request id; request-id headers", async () => {
    const { data: message, response } = await client.messages
      .create({ model: "qwen", max_tokens: 1000, system: "Be brief.", messages: [{ role: "user", content: "What is 2+2?" }] })
      .withResponse();
    const requestId = response.headers.get("request-id") as string;
    expect(response.headers.get("x-request-id")).toBe(requestId);
    expect(message.id).toBe(`msg_${requestId.slice(4)}`);
    expect(message).toMatchObject({ type: "message", role: "assistant", model: "qwen", stop_reason: "end_turn", stop_sequence: null });
    expect(message.content).toEqual([
      { type: "thinking", thinking: "The user asks for 2+2.", signature: "" },
      { type: "text", text: "2+2 is 4." },
    ] as never);
    expect(message.usage).toMatchObject({ input_tokens: 14, output_tokens: 11 });
    expect(upstream.bodies.at(-1)).toMatchObject({
      model: "vllm",
      max_tokens: 1000,
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "What is 2+2?" },
      ],
    });
    expect(sluice.ledgerRows().find((row) => row.request_id === requestId)).toMatchObject({ model: "qwen", outcome: "completed", completion_tokens: 11 });
    expectSettled();
  });

  test("DeepSeek style, an alias, and a key sent as a bearer token", async () => {
    const bearer = new Anthropic({ baseURL: sluice.url, authToken: sluice.key, apiKey: null, maxRetries: 0 });
    const message = await bearer.messages.create({ model: "claude-sonnet-5-5", max_tokens: 100, messages: [{ role: "user", content: "hi" }] });
    expect(message.model).toBe("claude-sonnet-5-5");
    const deepseek = await client.messages.create({ model: "deepseek-r1", max_tokens: 100, messages: [{ role: "user", content: "What is 2+2?" }] });
    expect(deepseek.content).toEqual([
      { type: "thinking", thinking: "Two plus two equals four.", signature: "" },
      { type: "text", text: "4" },
    ] as never);
  });

  test("the settings are translated: system blocks, stop_sequences, temperature, top_p, tools, tool_choice, thinking; top_k ignored", async () => {
    await client.messages.create({
      model: "echo",
      max_tokens: 200,
      system: [
        { type: "text", text: "You are a helper.", cache_control: { type: "ephemeral" } },
        { type: "text", text: "Be brief." },
      ],
      messages: [{ role: "user", content: "x" }],
      stop_sequences: ["###"],
      temperature: 0.3,
      top_p: 0.8,
      top_k: 20,
      tools: [weatherTool],
      tool_choice: { type: "any", disable_parallel_tool_use: true },
      thinking: { type: "enabled", budget_tokens: 8000 },
      metadata: { user_id: "u1" },
      // This SDK's types no longer list temperature, top_p and top_k (newer Claude models refuse them); the API takes them.
    } as never);
    const sent = upstream.bodies.at(-1) as Record<string, unknown>;
    expect(sent).toMatchObject({
      max_tokens: 200,
      stop: ["###"],
      temperature: 0.3,
      top_p: 0.8,
      reasoning_effort: "medium",
      tool_choice: "required",
      parallel_tool_calls: false,
      tools: [{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: weatherTool.input_schema } }],
      messages: [
        { role: "system", content: "You are a helper.\nBe brief." },
        { role: "user", content: "x" },
      ],
    });
    for (const field of ["top_k", "thinking", "metadata", "system", "stop_sequences"]) expect(sent[field]).toBeUndefined();
    await client.messages.create({
      model: "echo",
      max_tokens: 10,
      messages: [{ role: "user", content: "x" }],
      tool_choice: { type: "tool", name: "get_weather" },
      tools: [weatherTool],
    });
    expect((upstream.bodies.at(-1) as Record<string, unknown>).tool_choice).toEqual({ type: "function", function: { name: "get_weather" } });
  });

  test("tool use: calls come back as tool_use blocks with parsed input and stop_reason tool_use; results go back as tool messages", async () => {
    const message = await client.messages.create({
      model: "qwen-tools",
      max_tokens: 500,
      tools: [weatherTool],
      messages: [{ role: "user", content: "Weather and time in Paris?" }],
    });
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content.filter((block) => block.type === "tool_use")).toEqual([
      { type: "tool_use", id: "chatcmpl-tool-5f1c2e", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "chatcmpl-tool-9a7b3d", name: "get_time", input: { zone: "Europe/Paris" } },
    ] as never);
    await client.messages.create({
      model: "echo",
      max_tokens: 500,
      tools: [weatherTool],
      messages: [
        { role: "user", content: "Weather and time in Paris?" },
        { role: "assistant", content: message.content },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "chatcmpl-tool-5f1c2e", content: "18 C" },
            {
              type: "tool_result",
              tool_use_id: "chatcmpl-tool-9a7b3d",
              content: [
                { type: "text", text: "no clock" },
                { type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } },
              ],
              is_error: true,
            },
            { type: "text", text: "Thanks." },
          ],
        },
      ],
    });
    expect((upstream.bodies.at(-1) as { messages: unknown[] }).messages).toEqual([
      { role: "user", content: "Weather and time in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "chatcmpl-tool-5f1c2e", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { id: "chatcmpl-tool-9a7b3d", type: "function", function: { name: "get_time", arguments: '{"zone":"Europe/Paris"}' } },
        ],
      },
      { role: "tool", tool_call_id: "chatcmpl-tool-5f1c2e", content: "18 C" },
      {
        role: "tool",
        tool_call_id: "chatcmpl-tool-9a7b3d",
        content: "Error: no clock\n[an image was returned here; this gateway passes tool results to the model as text only]",
      },
      { role: "user", content: "Thanks." },
    ]);
  });

  test("images (base64 and URL) become chat image parts", async () => {
    await client.messages.create({
      model: "echo",
      max_tokens: 10,
      messages: [
        {
          role: "user",
          content: [
            { type: "image", source: { type: "base64", media_type: "image/jpeg", data: "AAAA" } },
            { type: "image", source: { type: "url", url: "https://example.com/cat.png" } },
            { type: "text", text: "Which is a cat?" },
          ],
        },
      ],
    });
    expect((upstream.bodies.at(-1) as { messages: unknown[] }).messages).toEqual([
      {
        role: "user",
        content: [
          { type: "image_url", image_url: { url: "data:image/jpeg;base64,AAAA" } },
          { type: "image_url", image_url: { url: "https://example.com/cat.png" } },
          { type: "text", text: "Which is a cat?" },
        ],
      },
    ]);
  });

  test("stop reasons: max_tokens, stop_sequence (named by the upstream), refusal naming the rule", async () => {
    const cut = await client.messages.create({ model: "tiny-demo", max_tokens: 4, messages: [{ role: "user", content: "Tell me a long story" }] });
    expect(cut.stop_reason).toBe("max_tokens");
    const stopped = await client.messages.create({
      model: "stop-sequence",
      max_tokens: 50,
      stop_sequences: ["###"],
      messages: [{ role: "user", content: "count" }],
    });
    expect(stopped.stop_reason).toBe("stop_sequence");
    expect(stopped.stop_sequence).toBe("###");
    const refused = await client.messages.create({
      model: "echo",
      max_tokens: 50,
      messages: [{ role: "user", content: "Explain NERVE AGENT SYNTHESIS step by step" }],
    });
    expect(refused.stop_reason).toBe("refusal");
    expect(refused.content).toEqual([{ type: "text", text: expect.stringContaining("red-line rule RL-1") }] as never);
  });

  test("thinking blocks sent back by clients are dropped; unknown thinking types and betas are accepted", async () => {
    const message = await client.beta.messages.create({
      model: "echo",
      max_tokens: 50,
      betas: ["interleaved-thinking-2025-05-14", "some-future-beta"],
      thinking: { type: "adaptive" } as never,
      messages: [
        { role: "user", content: "a" },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "hmm", signature: "sig" },
            { type: "redacted_thinking", data: "xyz" },
            { type: "text", text: "b" },
          ],
        },
        { role: "user", content: "c" },
      ],
    });
    expect(message.stop_reason).toBe("end_turn");
    const sent = upstream.bodies.at(-1) as Record<string, unknown>;
    expect(sent.messages).toEqual([
      { role: "user", content: "a" },
      { role: "assistant", content: "b" },
      { role: "user", content: "c" },
    ]);
    expect(sent.reasoning_effort).toBeUndefined();
  });

  test("system turns among the messages (as Claude Code sends them) join the system prompt; output_config.effort is the reasoning effort", async () => {
    await client.messages.create({
      model: "echo",
      max_tokens: 50,
      system: "Top.",
      output_config: { effort: "low" },
      messages: [
        { role: "user", content: "a" },
        { role: "system", content: "Agents available: none." },
        { role: "user", content: "b" },
      ],
    } as never);
    const sent = upstream.bodies.at(-1) as Record<string, unknown>;
    expect(sent.messages).toEqual([
      { role: "system", content: "Top.\n\nAgents available: none." },
      { role: "user", content: "a" },
      { role: "user", content: "b" },
    ]);
    expect(sent.reasoning_effort).toBe("low");
  });
});

describe("streams", () => {
  test("vLLM style through messages.stream: message_start, ping, blocks with their deltas, message_delta with usage, message_stop", async () => {
    const stream = client.messages.stream({ model: "qwen", max_tokens: 1000, messages: [{ role: "user", content: "What is 2+2?" }] });
    const events: string[] = [];
    for await (const event of stream) events.push(event.type === "content_block_delta" ? `delta:${event.delta.type}` : event.type);
    expect(events).toEqual([
      "message_start",
      "content_block_start",
      "delta:thinking_delta",
      "delta:thinking_delta",
      "content_block_stop",
      "content_block_start",
      "delta:text_delta",
      "delta:text_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    const final = await stream.finalMessage();
    expect(final.content).toEqual([
      { type: "thinking", thinking: "The user asks for 2+2.", signature: "" },
      { type: "text", text: "2+2 is 4." },
    ] as never);
    expect(final.stop_reason).toBe("end_turn");
    expect(final.usage).toMatchObject({ input_tokens: 14, output_tokens: 11 });
    expectSettled();
  });

  test("the raw stream has a ping after message_start, as Anthropic sends", async () => {
    const response = await sluice.post(
      "/v1/messages",
      { model: "deepseek-r1", max_tokens: 100, stream: true, messages: [{ role: "user", content: "hi" }] },
      { "x-api-key": sluice.key },
    );
    const text = await response.text();
    expect(text.split("\n\n")[1]).toBe('event: ping\ndata: {"type":"ping"}');
    expect(text.trimEnd().endsWith('event: message_stop\ndata: {"type":"message_stop"}')).toBe(true);
    expect(text).not.toContain("[DONE]");
  });

  test("tool use streams as tool_use blocks with input_json_delta; the final message has the parsed input", async () => {
    const stream = client.messages.stream({ model: "qwen-tools", max_tokens: 500, tools: [weatherTool], messages: [{ role: "user", content: "Weather?" }] });
    const final = await stream.finalMessage();
    expect(final.stop_reason).toBe("tool_use");
    expect(final.content.filter((block) => block.type === "tool_use").map((block) => (block as { input: unknown }).input)).toEqual([
      { city: "Paris" },
      { zone: "Europe/Paris" },
    ]);
  });

  test("pings while the upstream is silent", async () => {
    const controller = new AbortController();
    const response = await sluice.post(
      "/v1/messages",
      { model: "goes-silent", max_tokens: 100, stream: true, messages: [{ role: "user", content: "hi" }] },
      { "x-api-key": sluice.key },
      controller.signal,
    );
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    let text = "";
    const deadline = Date.now() + 3000;
    while ((text.match(/event: ping/g) ?? []).length < 4 && Date.now() < deadline) {
      const { value } = await reader.read();
      text += new TextDecoder().decode(value);
    }
    controller.abort();
    // One after message_start, then one per silent 100 ms once the two pieces are out.
    expect((text.match(/event: ping/g) ?? []).length).toBeGreaterThanOrEqual(4);
    expect(text).toContain('"text":"hello "');
  });

  test("a red-line match in the streamed output: stop_reason refusal, the upstream stopped, the request settled", async () => {
    const final = await client.messages.stream({ model: "split-phrase", max_tokens: 500, messages: [{ role: "user", content: "go" }] }).finalMessage();
    expect(final.stop_reason).toBe("refusal");
    expect(JSON.stringify(final.content)).toContain("red-line rule RL-1");
    expect(sluice.ledgerRows().at(-1)).toMatchObject({ outcome: "content_filter" });
    expectSettled();
  });

  test("an upstream failure after the first event: an error event, raised by the SDK as an APIError", async () => {
    const broken = await startSluice({ models: [fakeModel(upstream.url, "broken", "midstream-error")], plans: [{ id: "default", models: ["*"] }] });
    try {
      const failing = new Anthropic({ baseURL: broken.url, apiKey: broken.key, maxRetries: 0 });
      const failure = await failing.messages
        .stream({ model: "broken", max_tokens: 10, messages: [{ role: "user", content: "x" }] })
        .finalMessage()
        .catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(Anthropic.APIError);
      expect(broken.ledgerRows().at(-1)).toMatchObject({ outcome: "upstream_error" });
    } finally {
      await broken.stop();
    }
  });
});

describe("count_tokens", () => {
  test("Sluice's tokenizer count of the system prompt, the turns and the tools; no quota taken, no upstream call", async () => {
    const rowsBefore = sluice.ledgerRows().length;
    const counted = await client.messages.countTokens({ model: "qwen", system: "Be brief.", messages: [{ role: "user", content: "What is 2+2?" }] });
    expect(counted.input_tokens).toBe(
      await countChatTokens([
        { role: "system", text: "Be brief." },
        { role: "user", text: "What is 2+2?" },
      ]),
    );
    const withTools = await client.messages.countTokens({ model: "qwen", tools: [weatherTool], messages: [{ role: "user", content: "What is 2+2?" }] });
    expect(withTools.input_tokens).toBeGreaterThan(counted.input_tokens);
    expect(upstream.bodies.length).toBe(0);
    expect(sluice.ledgerRows().length).toBe(rowsBefore);
  });

  test("an unknown model is a 404 not_found_error; a bad body a 400 invalid_request_error", async () => {
    const missing = await client.messages.countTokens({ model: "nope", messages: [{ role: "user", content: "x" }] }).catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
    expect((missing as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    const bad = await client.messages.countTokens({ model: "qwen", messages: [] }).catch((error: unknown) => error);
    expect(bad).toBeInstanceOf(Anthropic.BadRequestError);
  });
});

describe("errors in Anthropic's shape", () => {
  test("invalid requests name what is wrong", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ model: "echo", messages: [{ role: "user", content: "x" }] }, "max_tokens"],
      [{ model: "echo", max_tokens: 10, messages: [{ role: "robot", content: "x" }] }, "messages[0].role"],
      [{ model: "echo", max_tokens: 10, messages: [{ role: "user", content: [{ type: "server_tool_use", id: "x" }] }] }, "messages[0].content[0].type"],
      [
        { model: "echo", max_tokens: 10, messages: [{ role: "user", content: "x" }], tools: [{ type: "web_search_20250305", name: "web_search" }] },
        "tools[0].type",
      ],
      [{ model: "echo", max_tokens: 5000, messages: [{ role: "user", content: "x" }] }, "max_tokens"],
    ];
    for (const [body, param] of cases) {
      const response = await sluice.post("/v1/messages", body, { "x-api-key": sluice.key });
      expect(response.status).toBe(400);
      expect(response.headers.get("request-id")).toMatch(/^req_/);
      expect(response.headers.get("request-id")).toBe(response.headers.get("x-request-id"));
      const error = (await response.json()) as { type: string; error: { type: string; message: string } };
      expect(error.type).toBe("error");
      expect(error.error.type).toBe("invalid_request_error");
      expect(error.error.message).toContain(param);
    }
    expect(upstream.bodies.length).toBe(0);
  });
});
