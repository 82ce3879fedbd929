// What model servers send in their own shapes (TGI's and Ollama's tool calls, Mistral's content parts, OpenAI's
// refusal field, finish reasons outside OpenAI's enum), read into OpenAI's chat shape: each API then answers in its
// own format, through the official SDKs, with nothing of the answer lost.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { contentOf, finishReasonOf, reasoningOf, ToolCallNumbering, toolCallsOf, usageOf } from "../../src/upstream/normalize";
import { fakeModel, schemaErrors, startSluice, useFakeUpstream, type TestSluice } from "../helpers";

const upstream = useFakeUpstream();
let sluice: TestSluice;

beforeAll(async () => {
  sluice = await startSluice({
    models: [
      fakeModel(upstream.url, "tgi", "tgi-tools"),
      fakeModel(upstream.url, "magistral", "mistral"),
      fakeModel(upstream.url, "ollama", "ollama-tools"),
      fakeModel(upstream.url, "refuses", "refusal"),
      fakeModel(upstream.url, "refuses-badly", "refusal-redline"),
      fakeModel(upstream.url, "custom", "custom-call"),
    ],
    plans: [{ id: "default", models: ["*"] }],
  });
});
afterAll(async () => {
  await sluice.stop();
});

describe("toolCallsOf", () => {
  test("a whole answer's calls: arguments as text, type and name always there, an empty id left for the API to make", () => {
    expect(
      toolCallsOf(
        [
          { id: "0", type: "function", function: { description: null, name: "get_weather", arguments: { city: "Paris" } } },
          { id: "", function: { name: "no_arguments" } },
          { id: "c", type: "function", function: { name: "listed", arguments: [1, 2] } },
          null,
          "call",
        ],
        true,
      ),
    ).toEqual([
      { id: "0", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
      { type: "function", function: { name: "no_arguments", arguments: "{}" } },
      { id: "c", type: "function", function: { name: "listed", arguments: "[1,2]" } },
    ]);
  });

  test("a streamed delta keeps only the parts it has; a lone call not in a list is a list of one", () => {
    expect(toolCallsOf({ index: 0, id: "", type: "function", function: { name: "get_weather", arguments: "" } }, false)).toEqual([
      { index: 0, type: "function", function: { name: "get_weather", arguments: "" } },
    ]);
    expect(toolCallsOf({ index: 0, id: "", type: "function", function: { name: null, arguments: '{"city": ' } }, false)).toEqual([
      { index: 0, function: { arguments: '{"city": ' } },
    ]);
    expect(
      toolCallsOf(
        [
          { id: "x", function: { name: "f", arguments: { a: 1 } } },
          { index: -1, function: { arguments: "}" } },
        ],
        false,
      ),
    ).toEqual([
      { index: 0, id: "x", type: "function", function: { name: "f", arguments: '{"a":1}' } },
      { index: 1, function: { arguments: "}" } },
    ]);
  });

  test("another kind of tool goes on as it came; nothing that is a call gives undefined", () => {
    const custom = { id: "ct_1", type: "custom", custom: { name: "grammar", input: "x" } };
    expect(toolCallsOf([custom], true)).toEqual([custom]);
    for (const nothing of [undefined, null, [], [null, 1, "x"], "calls", 5]) expect(toolCallsOf(nothing, false)).toBeUndefined();
  });
});

test("finishReasonOf: OpenAI's reasons as they are, a cut by the limit as length, any other server's own as stop", () => {
  for (const reason of ["stop", "length", "tool_calls", "content_filter", "function_call"]) expect(finishReasonOf(reason)).toBe(reason);
  expect(finishReasonOf("max_tokens")).toBe("length");
  for (const reason of ["eos_token", "stop_sequence", "abort", "", "STOP"]) expect(finishReasonOf(reason)).toBe("stop");
});

test("usageOf: cached_tokens read from prompt_tokens_details, within the prompt's count; anything but a count is 0", () => {
  const usage = (details: unknown) => usageOf({ prompt_tokens: 100, completion_tokens: 9, prompt_tokens_details: details });
  expect(usage({ cached_tokens: 64 })).toEqual({ promptTokens: 100, completionTokens: 9, reasoningTokens: 0, cachedTokens: 64 });
  expect(usage({ cached_tokens: 101 })?.cachedTokens).toBe(100);
  for (const bad of [-1, 1.5, "64", null, Number.POSITIVE_INFINITY, 2 ** 31]) expect(usage({ cached_tokens: bad })?.cachedTokens).toBe(0);
  for (const bad of [null, "x", 64, [64]]) expect(usage(bad)?.cachedTokens).toBe(0);
  // DeepSeek reports its own fields beside OpenAI's; OpenAI's are read.
  expect(usageOf({ prompt_tokens: 13, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 5 }, prompt_cache_hit_tokens: 5 })?.cachedTokens).toBe(5);
});

describe("TGI's tool calls (arguments as an object; a stream's calls not in a list, with empty ids and null names)", () => {
  const tools = [{ type: "function" as const, function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
  const messages = [{ role: "user" as const, content: "Weather in Paris?" }];
  const arguments_ = { city: "Paris", unit: "celsius" };

  test("chat, whole: OpenAI's shape (valid by its schema: TGI's finish reason eos_token is stop), the arguments as JSON text, the id kept", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "tgi", messages, tools });
    const body = (await response.json()) as OpenAI.ChatCompletion;
    expect(schemaErrors("CreateChatCompletionResponse", body)).toEqual([]);
    const calls = body.choices[0]?.message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
    expect(calls).toEqual([{ id: "0", type: "function", function: { name: "get_weather", arguments: expect.any(String) } }]);
    expect(JSON.parse(calls[0]?.function.arguments as string)).toEqual(arguments_);
    expect(body.choices[0]?.finish_reason).toBe("stop");
  });

  test("chat, streamed: the SDK assembles one call with its name, an id made by Sluice, and the whole arguments", async () => {
    const stream = sluice.client().chat.completions.stream({ model: "tgi", messages, tools });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    for (const chunk of chunks) expect(schemaErrors("CreateChatCompletionStreamResponse", chunk)).toEqual([]);
    const final = await stream.finalChatCompletion();
    const calls = final.choices[0]?.message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
    expect(calls).toHaveLength(1);
    expect(calls[0]?.id).toMatch(/^call_.+_0$/);
    expect(calls[0]?.function.name).toBe("get_weather");
    expect(JSON.parse(calls[0]?.function.arguments as string)).toEqual(arguments_);
    expect(final.choices[0]?.finish_reason).toBe("stop");
  });

  test("Responses, whole and streamed: one function_call item with the arguments as text", async () => {
    const client = sluice.client();
    const responsesTools = [{ type: "function" as const, name: "get_weather", parameters: tools[0]?.function.parameters ?? null, strict: false }];
    const whole = await client.responses.create({ model: "tgi", input: "Weather in Paris?", tools: responsesTools });
    const stream = client.responses.stream({ model: "tgi", input: "Weather in Paris?", tools: responsesTools });
    for await (const _event of stream) {
      // read to the end
    }
    for (const response of [whole, await stream.finalResponse()]) {
      const calls = response.output.filter((item) => item.type === "function_call") as { name: string; status: string; arguments: string }[];
      expect(calls).toHaveLength(1);
      expect(calls[0]).toMatchObject({ name: "get_weather", status: "completed" });
      expect(JSON.parse(calls[0]?.arguments as string)).toEqual(arguments_);
    }
  });

  test("Messages, whole and streamed: one tool_use block with its input, and stop_reason tool_use though TGI said stop", async () => {
    const client = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
    const anthropicTools = [{ name: "get_weather", input_schema: { type: "object" as const, properties: { city: { type: "string" } } } }];
    const request = { model: "tgi", max_tokens: 1024, messages, tools: anthropicTools };
    const whole = await client.messages.create(request);
    const streamed = await client.messages.stream(request).finalMessage();
    for (const message of [whole, streamed]) {
      expect(message.stop_reason).toBe("tool_use");
      const uses = message.content.filter((block) => block.type === "tool_use");
      expect(uses).toHaveLength(1);
      expect(uses[0]).toMatchObject({ name: "get_weather", input: arguments_ });
    }
    expect(sluice.server.admission.inFlight()).toBe(0);
  });
});

describe("contentOf and reasoningOf: content as a list of parts (Mistral's reasoning models)", () => {
  test("text parts are the answer, thinking parts the reasoning; strings and the named reasoning fields as before", () => {
    const message = {
      content: [
        {
          type: "thinking",
          thinking: [
            { type: "text", text: "Two plus two." },
            { type: "text", text: " Four." },
          ],
        },
        { type: "text", text: "2 + 2" },
        { type: "image_url", image_url: { url: "data:" } },
        null,
        { type: "text", text: " = 4." },
      ],
    };
    expect(contentOf(message)).toBe("2 + 2 = 4.");
    expect(reasoningOf(message)).toBe("Two plus two. Four.");
    expect(reasoningOf({ reasoning_content: "Named. ", content: [{ type: "thinking", thinking: "As a string." }] })).toBe("Named. As a string.");
    expect(contentOf({ content: "plain" })).toBe("plain");
    expect(reasoningOf({ reasoning: "vLLM's", content: "plain" })).toBe("vLLM's");
    for (const nothing of [[], [{ type: "thinking", thinking: [] }], [{ type: "text", text: 5 }], "", null, { text: "x" }]) {
      expect(contentOf({ content: nothing })).toBeUndefined();
    }
    expect(reasoningOf({ content: [{ type: "text", text: "only text" }] })).toBeUndefined();
    // Lists within a thinking part's list are no text: an upstream's nesting is never followed down.
    let nested: unknown = [{ type: "text", text: "deep" }];
    for (let depth = 0; depth < 100_000; depth++) nested = [nested];
    expect(reasoningOf({ content: [{ type: "thinking", thinking: [{ type: "text", text: "top" }, nested] }] })).toBe("top");
  });
});

describe("Mistral's content parts through every API", () => {
  const messages = [{ role: "user" as const, content: "What is 2 + 2?" }];
  const reasoning = "Two plus two. Adding them gives four.";

  test("chat, whole and streamed: the answer in content and the thinking in reasoning_content, valid by OpenAI's schemas", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "magistral", messages });
    const body = (await response.json()) as OpenAI.ChatCompletion & { choices: { message: { reasoning_content: string } }[] };
    expect(schemaErrors("CreateChatCompletionResponse", body)).toEqual([]);
    expect(body.choices[0]?.message).toMatchObject({ content: "2 + 2 = 4.", reasoning_content: reasoning });
    const stream = await sluice.client().chat.completions.create({ model: "magistral", messages, stream: true });
    let content = "";
    let thinking = "";
    for await (const chunk of stream) {
      expect(schemaErrors("CreateChatCompletionStreamResponse", chunk)).toEqual([]);
      const delta = chunk.choices[0]?.delta as { content?: string; reasoning_content?: string } | undefined;
      content += delta?.content ?? "";
      thinking += delta?.reasoning_content ?? "";
    }
    expect(content).toBe("2 + 2 = 4.");
    expect(thinking).toBe(reasoning);
  });

  test("Responses and Messages: the answer as text, the thinking as reasoning and thinking blocks", async () => {
    const response = await sluice.client().responses.create({ model: "magistral", input: "What is 2 + 2?" });
    expect(response.output_text).toBe("2 + 2 = 4.");
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
    const request = { model: "magistral", max_tokens: 1024, messages };
    for (const message of [await anthropic.messages.create(request), await anthropic.messages.stream(request).finalMessage()]) {
      expect(message.content).toHaveLength(2);
      expect(message.content).toMatchObject([
        { type: "thinking", thinking: reasoning },
        { type: "text", text: "2 + 2 = 4." },
      ]);
    }
    expect(sluice.server.admission.inFlight()).toBe(0);
  });
});

test("ToolCallNumbering: calls numbered 0, 1, 2 as they open; a new id at a used index opens a new call; a delta without one continues the last", () => {
  const numbering = new ToolCallNumbering();
  const stream = [
    [{ index: 0, id: "a", function: { name: "f", arguments: "" } }],
    [{ index: 0, function: { arguments: "{}" } }],
    // Ollama: the next call at the same index, with its own id.
    [{ index: 0, id: "b", function: { name: "g", arguments: "{" } }],
    [{ index: 0, function: { arguments: "}" } }],
    // A well-numbered server's next call, and a call that repeats its id on every delta.
    [{ index: 5, id: "c", function: { name: "h" } }],
    [{ index: 5, id: "c", function: { arguments: "{}" } }],
    [{ id: "custom", type: "custom", custom: { input: "x" } }],
  ];
  for (const calls of stream) numbering.renumber(calls);
  expect(stream.map((calls) => (calls[0] as { index?: number }).index)).toEqual([0, 0, 1, 1, 2, 2, undefined]);
});

test("Ollama's parallel calls all at index 0: every API gets two calls, each with its own name and arguments", async () => {
  const tools = [{ type: "function" as const, function: { name: "file_write", parameters: { type: "object" } } }];
  const messages = [{ role: "user" as const, content: "Create hello.py and world.py." }];
  const expected = [
    { name: "file_write", arguments: { filePath: "hello.py", content: 'print("hello")' } },
    { name: "file_write", arguments: { filePath: "world.py", content: 'print("world")' } },
  ];
  const stream = sluice.client().chat.completions.stream({ model: "ollama", messages, tools });
  for await (const chunk of stream) expect(schemaErrors("CreateChatCompletionStreamResponse", chunk)).toEqual([]);
  const calls = (await stream.finalChatCompletion()).choices[0]?.message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
  expect(calls.map((call) => ({ name: call.function.name, arguments: JSON.parse(call.function.arguments) }))).toEqual(expected);
  expect(calls.map((call) => call.id)).toEqual(["call_jd8kq2xw", "call_m3v9zt1c"]);
  const responses = sluice.client().responses.stream({
    model: "ollama",
    input: "Create hello.py and world.py.",
    tools: [{ type: "function", name: "file_write", parameters: { type: "object" }, strict: false }],
  });
  for await (const _event of responses) {
    // read to the end
  }
  const items = (await responses.finalResponse()).output.filter((item) => item.type === "function_call") as { name: string; arguments: string }[];
  expect(items.map((item) => ({ name: item.name, arguments: JSON.parse(item.arguments) }))).toEqual(expected);
  const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
  const message = await anthropic.messages
    .stream({ model: "ollama", max_tokens: 1024, messages, tools: [{ name: "file_write", input_schema: { type: "object" } }] })
    .finalMessage();
  const uses = message.content.filter((block) => block.type === "tool_use");
  expect(uses.map((block) => ({ name: block.name, arguments: block.input }))).toEqual(expected);
  expect(message.stop_reason).toBe("tool_use");
});

describe("a refusal given apart from the content (OpenAI's refusal field)", () => {
  const messages = [{ role: "user" as const, content: "Answer in the schema." }];
  const refusal = "I'm sorry, I can't help with that.";

  test("chat, whole and streamed: message.refusal and the refusal deltas, valid by OpenAI's schemas", async () => {
    const body = (await (await sluice.post("/v1/chat/completions", { model: "refuses", messages })).json()) as OpenAI.ChatCompletion;
    expect(schemaErrors("CreateChatCompletionResponse", body)).toEqual([]);
    expect(body.choices[0]?.message).toMatchObject({ content: null, refusal });
    const stream = sluice.client().chat.completions.stream({ model: "refuses", messages });
    for await (const chunk of stream) expect(schemaErrors("CreateChatCompletionStreamResponse", chunk)).toEqual([]);
    expect((await stream.finalChatCompletion()).choices[0]?.message.refusal).toBe(refusal);
  });

  test("Responses, whole and streamed: the message's refusal part, and the refusal's delta and done events", async () => {
    const expected = [{ type: "message", status: "completed", content: [{ type: "refusal", refusal }] }];
    const whole = await sluice.client().responses.create({ model: "refuses", input: "Answer." });
    expect(whole.output).toMatchObject(expected);
    expect(whole.output_text).toBe("");
    const stream = sluice.client().responses.stream({ model: "refuses", input: "Answer." });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect((await stream.finalResponse()).output).toMatchObject(expected);
    const deltas = events.filter((event) => event.type === "response.refusal.delta");
    expect(deltas.map((event) => event.delta).join("")).toBe(refusal);
    expect(deltas.every((event) => event.content_index === 0)).toBe(true);
    expect(events.filter((event) => event.type === "response.refusal.done").map((event) => event.refusal)).toEqual([refusal]);
    const parts = events.filter((event) => event.type === "response.content_part.added" || event.type === "response.content_part.done");
    expect(parts.map((event) => [event.type, event.part])).toEqual([
      ["response.content_part.added", { type: "refusal", refusal: "" }],
      ["response.content_part.done", { type: "refusal", refusal }],
    ]);
    expect(events.some((event) => event.type === "response.output_text.delta")).toBe(false);
  });

  test("Messages, whole and streamed: the refusal is the text, and the stop reason is refusal", async () => {
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
    const request = { model: "refuses", max_tokens: 100, messages };
    for (const message of [await anthropic.messages.create(request), await anthropic.messages.stream(request).finalMessage()]) {
      expect(message.content).toMatchObject([{ type: "text", text: refusal }]);
      expect(message.stop_reason).toBe("refusal");
      expect(message.stop_sequence).toBeNull();
    }
  });

  test("text in the refusal field is held to the red-line rules as content is: whole and streamed, it is stopped", async () => {
    const body = (await (await sluice.post("/v1/chat/completions", { model: "refuses-badly", messages })).json()) as OpenAI.ChatCompletion;
    expect(body.choices[0]?.finish_reason).toBe("content_filter");
    expect(JSON.stringify(body)).not.toContain("sarin");
    const stream = await sluice.client().chat.completions.create({ model: "refuses-badly", messages, stream: true });
    let sent = "";
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string; refusal?: string } | undefined;
      sent += (delta?.content ?? "") + (delta?.refusal ?? "");
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(finish).toBe("content_filter");
    expect(sent).not.toContain("sarin");
    expect(sluice.server.admission.inFlight()).toBe(0);
  });
});

describe("a call of one of OpenAI's custom tools (free text, no function)", () => {
  const input = "*** Begin Patch\n*** End Patch";

  test("chat passes it on as OpenAI's custom tool call, valid by OpenAI's schemas", async () => {
    const body = (await (
      await sluice.post("/v1/chat/completions", { model: "custom", messages: [{ role: "user", content: "Patch it." }] })
    ).json()) as OpenAI.ChatCompletion;
    expect(schemaErrors("CreateChatCompletionResponse", body)).toEqual([]);
    expect(body.choices[0]?.message.tool_calls).toEqual([{ id: "call_custom_1", type: "custom", custom: { name: "apply_patch", input } }]);
  });

  test("Responses and Messages name the tool and carry its input", async () => {
    const response = await sluice.client().responses.create({ model: "custom", input: "Patch it." });
    expect(response.output).toMatchObject([{ type: "function_call", call_id: "call_custom_1", name: "apply_patch", arguments: input }]);
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
    const message = await anthropic.messages.create({ model: "custom", max_tokens: 100, messages: [{ role: "user", content: "Patch it." }] });
    expect(message.content).toMatchObject([{ type: "tool_use", id: "call_custom_1", name: "apply_patch", input: { arguments: input } }]);
    expect(message.content).toHaveLength(1);
    expect(message.stop_reason).toBe("tool_use");
  });
});
