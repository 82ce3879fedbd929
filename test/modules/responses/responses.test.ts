// POST /v1/responses through the official openai SDK: translated onto the chat path, answered as OpenAI's Responses API.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { ResponseStreamEvent } from "openai/resources/responses/responses";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
let client: OpenAI;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice({
    models: [
      fakeModel(upstream.url, "qwen", "vllm", { aliases: ["gpt-5-codex"] }),
      fakeModel(upstream.url, "deepseek-r1", "deepseek"),
      fakeModel(upstream.url, "qwen-tools", "vllm-tools"),
      fakeModel(upstream.url, "echo", "echo", { max_output_tokens: 1024 }),
      fakeModel(upstream.url, "split-phrase"),
      fakeModel(upstream.url, "namespaced-call"),
      { id: "tiny-demo", backend: "demo", max_output_tokens: 4 },
    ],
    plans: [{ id: "default", models: ["*"] }],
  });
  client = sluice.client();
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});
beforeEach(() => upstream.reset());

const weatherTool = {
  type: "function" as const,
  name: "get_weather",
  description: "Weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" } } },
  strict: false,
};

function expectSettled() {
  expect(sluice.server.admission.inFlight()).toBe(0);
  expect(sluice.server.admission.reservedTokens()).toBe(0);
}

describe("whole answers", () => {
  test("vLLM style: a reasoning item, then the message; usage with reasoning tokens; id from the request id; the caller's model name", async () => {
    const { data: response, response: raw } = await client.responses.create({ model: "qwen", input: "What is 2+2?", instructions: "Be brief." }).withResponse();
    const requestId = raw.headers.get("x-request-id") as string;
    expect(response.id).toBe(`resp_${requestId.slice(4)}`);
    expect(response.object).toBe("response");
    expect(response.status).toBe("completed");
    expect(response.model).toBe("qwen");
    expect(response.instructions).toBe("Be brief.");
    expect(response.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    const reasoning = response.output[0] as { content: { type: string; text: string }[] };
    expect(reasoning.content).toEqual([{ type: "reasoning_text", text: "The user asks for 2+2." }]);
    expect(response.output_text).toBe("2+2 is 4.");
    expect(response.usage).toMatchObject({ input_tokens: 14, output_tokens: 11, total_tokens: 25 });
    expect(response.usage?.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    const sent = upstream.bodies.at(-1) as { messages: unknown[]; max_tokens: number; model: string };
    expect(sent.model).toBe("vllm");
    expect(sent.messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "What is 2+2?" },
    ]);
    expect(sent.max_tokens).toBe(8192);
    const row = sluice.ledgerRows().find((entry) => entry.request_id === requestId);
    expect(row).toMatchObject({ model: "qwen", outcome: "completed", prompt_tokens: 14, completion_tokens: 11 });
    expectSettled();
  });

  test("DeepSeek style, and an alias: the answer carries the name the caller used, the ledger the model's id", async () => {
    const response = await client.responses.create({
      model: "deepseek-r1",
      input: [{ role: "user", content: [{ type: "input_text", text: "What is 2+2?" }] }],
    });
    expect(response.output_text).toBe("4");
    expect((response.output[0] as { content: { text: string }[] }).content[0]?.text).toBe("Two plus two equals four.");
    const { data: aliased, response: raw } = await client.responses.create({ model: "gpt-5-codex", input: "hi" }).withResponse();
    expect(aliased.model).toBe("gpt-5-codex");
    const row = sluice.ledgerRows().find((entry) => entry.request_id === raw.headers.get("x-request-id"));
    expect(row?.model).toBe("qwen");
    const models = await client.models.list();
    expect(models.data.map((model) => model.id)).not.toContain("gpt-5-codex");
  });

  test("the settings are translated: max_output_tokens, temperature, top_p, reasoning.effort, text.format, tool_choice", async () => {
    await client.responses.create({
      model: "echo",
      input: "x",
      max_output_tokens: 100,
      temperature: 0.2,
      top_p: 0.9,
      reasoning: { effort: "high" },
      text: { format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true } },
      tools: [weatherTool],
      tool_choice: { type: "function", name: "get_weather" },
      parallel_tool_calls: false,
      store: false,
      metadata: { team: "a" },
      user: "u1",
    });
    expect(upstream.bodies.at(-1)).toMatchObject({
      max_tokens: 100,
      temperature: 0.2,
      top_p: 0.9,
      reasoning_effort: "high",
      response_format: { type: "json_schema", json_schema: { name: "answer", schema: { type: "object" }, strict: true } },
      tools: [{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: weatherTool.parameters, strict: false } }],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
    });
    const sent = upstream.bodies.at(-1) as Record<string, unknown>;
    for (const field of ["store", "metadata", "user", "input", "text", "reasoning"]) expect(sent[field]).toBeUndefined();
  });

  test("function tools: calls come back as function_call items; a second turn sends the calls and their outputs as chat messages", async () => {
    const response = await client.responses.create({ model: "qwen-tools", input: "Weather and time in Paris?", tools: [weatherTool] });
    const calls = response.output.filter((item) => item.type === "function_call");
    expect(calls).toMatchObject([
      { type: "function_call", call_id: "chatcmpl-tool-5f1c2e", name: "get_weather", arguments: '{"city": "Paris"}', status: "completed" },
      { type: "function_call", call_id: "chatcmpl-tool-9a7b3d", name: "get_time", arguments: '{"zone": "Europe/Paris"}', status: "completed" },
    ]);
    await client.responses.create({
      model: "echo",
      tools: [weatherTool],
      input: [
        { role: "user", content: "Weather in Paris?" },
        ...(response.output as never[]),
        { type: "function_call_output", call_id: "chatcmpl-tool-5f1c2e", output: "18 C, sunny" },
        { type: "function_call_output", call_id: "chatcmpl-tool-9a7b3d", output: [{ type: "input_text", text: "14:00" }] },
      ],
    });
    const sent = upstream.bodies.at(-1) as { messages: unknown[] };
    expect(sent.messages).toEqual([
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "chatcmpl-tool-5f1c2e", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
          { id: "chatcmpl-tool-9a7b3d", type: "function", function: { name: "get_time", arguments: '{"zone": "Europe/Paris"}' } },
        ],
      },
      { role: "tool", tool_call_id: "chatcmpl-tool-5f1c2e", content: "18 C, sunny" },
      { role: "tool", tool_call_id: "chatcmpl-tool-9a7b3d", content: "14:00" },
    ]);
  });

  test("namespace tools (as Codex sends them) become chat functions named namespace__name; calls come back in their namespace", async () => {
    const namespaced = {
      type: "namespace",
      name: "weather",
      description: "Weather tools",
      tools: [{ type: "function", name: "get_weather", parameters: weatherTool.parameters }],
    };
    await client.responses.create({
      model: "echo",
      tools: [namespaced] as never,
      input: [
        { role: "user", content: "x" },
        { type: "function_call", call_id: "c1", name: "get_weather", namespace: "weather", arguments: "{}" } as never,
        { type: "function_call_output", call_id: "c1", output: "sunny" },
      ],
    });
    const sent = upstream.bodies.at(-1) as { tools: { function: { name: string } }[]; messages: { tool_calls?: { function: { name: string } }[] }[] };
    expect(sent.tools.map((tool) => tool.function.name)).toEqual(["weather__get_weather"]);
    expect(sent.messages[1]?.tool_calls?.[0]?.function.name).toBe("weather__get_weather");
    const whole = await client.responses.create({ model: "namespaced-call", input: "x", tools: [namespaced] as never });
    const streamed = await client.responses.stream({ model: "namespaced-call", input: "x", tools: [namespaced] as never }).finalResponse();
    for (const response of [whole, streamed]) {
      expect(response.output.find((item) => item.type === "function_call")).toMatchObject({
        name: "get_weather",
        namespace: "weather",
        arguments: '{"city":"Oslo"}',
      });
    }
    const nested = await client.responses
      .create({ model: "echo", input: "x", tools: [{ ...namespaced, tools: [{ type: "custom", name: "patch" }] }] as never })
      .catch((error: unknown) => error);
    expect((nested as { param: string }).param).toBe("tools[0].tools[0].type");
  });

  test("images are sent as chat image parts; an assistant's output_text becomes its content", async () => {
    await client.responses.create({
      model: "echo",
      input: [
        {
          role: "user",
          content: [
            { type: "input_text", text: "What is this?" },
            { type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "low" },
          ],
        },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "A cat.", annotations: [] }], id: "msg_1", status: "completed" },
        { role: "developer", content: "Answer in French." },
      ],
    });
    expect((upstream.bodies.at(-1) as { messages: unknown[] }).messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "What is this?" },
          { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } },
        ],
      },
      { role: "assistant", content: "A cat." },
      { role: "developer", content: "Answer in French." },
    ]);
  });

  test("the output limit reached: status incomplete, reason max_output_tokens", async () => {
    const response = await client.responses.create({ model: "tiny-demo", input: "Tell me a long story" });
    expect(response.status).toBe("incomplete");
    expect(response.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(response.usage?.output_tokens).toBeLessThanOrEqual(4);
  });

  test("a red-line refusal: HTTP 200, incomplete with reason content_filter, a message naming the rule; the upstream is never called", async () => {
    const response = await client.responses.create({ model: "echo", input: "Explain NERVE AGENT SYNTHESIS step by step" });
    expect(response.status).toBe("incomplete");
    expect(response.incomplete_details).toEqual({ reason: "content_filter" });
    expect(response.output_text).toContain("red-line rule RL-1");
    expect(upstream.bodies.length).toBe(0);
    expect(sluice.ledgerRows().at(-1)).toMatchObject({ outcome: "content_filter" });
  });
});

describe("streams", () => {
  async function collect(stream: AsyncIterable<ResponseStreamEvent>): Promise<ResponseStreamEvent[]> {
    const events: ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    return events;
  }

  test("vLLM style through responses.stream: the event sequence the SDK parses, numbered from 0, usage at the end", async () => {
    const stream = client.responses.stream({ model: "qwen", input: "What is 2+2?" });
    const events = await collect(stream);
    expect(events.map((event) => event.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.reasoning_text.delta",
      "response.reasoning_text.delta",
      "response.reasoning_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe("2+2 is 4.");
    expect(final.status).toBe("completed");
    expect(final.usage).toMatchObject({ input_tokens: 14, output_tokens: 11 });
    expect(final.id).toBe((events[0] as { response: { id: string } }).response.id);
    expectSettled();
  });

  test("DeepSeek style with stream: true on create", async () => {
    const stream = await client.responses.create({ model: "deepseek-r1", input: "What is 2+2?", stream: true });
    let text = "";
    let reasoning = "";
    for await (const event of stream) {
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.reasoning_text.delta") reasoning += event.delta;
    }
    expect(text).toBe("4");
    expect(reasoning).toBe("Two plus two equals four.");
  });

  test("function calls stream as items with argument deltas; the final response holds both calls", async () => {
    const stream = client.responses.stream({ model: "qwen-tools", input: "Weather and time?", tools: [weatherTool] });
    const events = await collect(stream);
    const deltas = events.filter((event) => event.type === "response.function_call_arguments.delta");
    expect(deltas.length).toBe(3);
    const final = await stream.finalResponse();
    expect(final.output.filter((item) => item.type === "function_call").map((item) => (item as { arguments: string }).arguments)).toEqual([
      '{"city": "Paris"}',
      '{"zone": "Europe/Paris"}',
    ]);
  });

  test("the output limit reached: response.incomplete", async () => {
    const stream = client.responses.stream({ model: "tiny-demo", input: "Tell me a long story" });
    const events = await collect(stream);
    const last = events.at(-1) as { type: string; response: { incomplete_details: unknown } };
    expect(last.type).toBe("response.incomplete");
    expect(last.response.incomplete_details).toEqual({ reason: "max_output_tokens" });
  });

  test("a red-line match in the streamed output: the upstream is stopped, response.incomplete with content_filter", async () => {
    const stream = client.responses.stream({ model: "split-phrase", input: "go" });
    const events = await collect(stream);
    const last = events.at(-1) as { type: string; response: { incomplete_details: unknown } };
    expect(last.type).toBe("response.incomplete");
    expect(last.response.incomplete_details).toEqual({ reason: "content_filter" });
    expect((await stream.finalResponse()).output_text).toContain("red-line rule RL-1");
    expect(sluice.ledgerRows().at(-1)).toMatchObject({ outcome: "content_filter" });
    expectSettled();
  });

  test("an upstream failure after the first event: a final error event, raised by the SDK as an APIError", async () => {
    const broken = await startSluice({ models: [fakeModel(upstream.url, "broken", "midstream-error")], plans: [{ id: "default", models: ["*"] }] });
    try {
      const stream = broken.client().responses.stream({ model: "broken", input: "x" });
      const seen: string[] = [];
      const failure = await (async () => {
        for await (const event of stream) seen.push(event.type);
      })().catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OpenAI.APIError);
      expect(seen).toContain("response.output_text.delta");
      expect(broken.ledgerRows().at(-1)).toMatchObject({ outcome: "upstream_error" });
    } finally {
      await broken.stop();
    }
  });
});

describe("what cannot be honoured is a 400 naming the parameter", () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ["a built-in tool", { input: "x", tools: [{ type: "web_search" }] }, "tools[0].type"],
    ["background", { input: "x", background: true }, "background"],
    ["previous_response_id", { input: "x", previous_response_id: "resp_123" }, "previous_response_id"],
    ["conversation", { input: "x", conversation: "conv_123" }, "conversation"],
    ["an item reference", { input: [{ type: "item_reference", id: "msg_1" }] }, "input[0].type"],
    ["an unknown role", { input: [{ role: "robot", content: "x" }] }, "input[0].role"],
    ["a file", { input: [{ role: "user", content: [{ type: "input_file", file_id: "file_1" }] }] }, "input[0].content[0].type"],
    ["max_output_tokens above the model's maximum", { input: "x", max_output_tokens: 5000 }, "max_output_tokens"],
    ["max_output_tokens of the wrong type", { input: "x", max_output_tokens: "many" }, "max_output_tokens"],
    ["no input", {}, "input"],
    ["input of the wrong type", { input: 42 }, "input"],
    ["a text format of an unknown type", { input: "x", text: { format: { type: "yaml" } } }, "text.format.type"],
  ];
  for (const [name, body, param] of cases) {
    test(name, async () => {
      const failure = await client.responses.create({ model: "echo", ...body } as never).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OpenAI.BadRequestError);
      const error = failure as InstanceType<typeof OpenAI.BadRequestError>;
      expect(error.code).toBe("invalid_request");
      expect(error.param).toBe(param);
      if (param === "max_output_tokens") expect(error.message).toContain("max_output_tokens");
      expect(upstream.bodies.length).toBe(0);
    });
  }

  test("the messages say why: nothing is stored", async () => {
    const failure = (await client.responses.create({ model: "echo", input: "x", previous_response_id: "resp_1" }).catch((error: unknown) => error)) as Error;
    expect(failure.message).toContain("stores no prompts and no answers");
  });

  test("the routes over stored responses and completions are 404 saying nothing is stored: retrieve, input items, cancel, delete", async () => {
    const calls: [string, () => Promise<unknown>][] = [
      ["retrieve", () => client.responses.retrieve("resp_1")],
      ["input items", () => client.responses.inputItems.list("resp_1")],
      ["cancel", () => client.responses.cancel("resp_1")],
      ["delete", () => client.responses.delete("resp_1")],
      ["a stored chat completion", () => client.chat.completions.retrieve("chatcmpl-1")],
    ];
    for (const [name, call] of calls) {
      const failure = await call().catch((error: unknown) => error);
      expect([name, failure]).toMatchObject([name, { status: 404, code: "not_found" }]);
      expect((failure as Error).message).toContain("Sluice stores no responses or completions");
    }
    const other = await fetch(`${sluice.url}/v1/audio/speech`, { method: "POST", headers: { authorization: `Bearer ${sluice.key}` } });
    expect(((await other.json()) as { error: { message: string } }).error.message).toBe("Unknown route: POST /v1/audio/speech.");
  });

  test("store and reasoning items sent back are accepted (and dropped)", async () => {
    const response = await client.responses.create({
      model: "echo",
      store: true,
      input: [
        { type: "reasoning", id: "rs_1", summary: [], content: [{ type: "reasoning_text", text: "earlier thoughts" }] },
        { role: "user", content: "x" },
      ],
    });
    expect(response.status).toBe("completed");
    expect((upstream.bodies.at(-1) as { messages: unknown[] }).messages).toEqual([{ role: "user", content: "x" }]);
  });
});
