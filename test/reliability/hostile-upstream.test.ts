// A model server is trusted to speak the OpenAI wire format, not to speak it well. Whatever a broken or hostile
// upstream answers (wrong types anywhere in an answer or a chunk, usage that is negative, fractional, past 2^31 - 1
// or past a double, tool calls that are not objects, lines that never end), every API answers its client with valid
// JSON or a clean 502, ends every stream properly, bills only whole token counts in range, and frees every slot.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { anyFieldValue, eventually, startSluice, type TestSluice } from "../helpers";

/** What the scripted upstream answers next: a whole body as text, or a stream's events as `data:` payloads. */
let whole = "{}";
let events: string[] = [];
/** The Accept-Encoding of the latest request the upstream received. */
let lastAcceptEncoding: string | null = null;
/** When set, answers in place of the script above (see `withAnswer`). */
let answer: (() => Response) | undefined;

/** Runs `body` while the upstream answers every request with `respond`. */
async function withAnswer(respond: () => Response, body: () => Promise<void>): Promise<void> {
  answer = respond;
  try {
    await body();
  } finally {
    answer = undefined;
  }
}

const upstream = Bun.serve({
  port: 0,
  async fetch(request) {
    const body = (await request.json()) as { stream?: boolean };
    lastAcceptEncoding = request.headers.get("accept-encoding");
    if (answer) return answer();
    if (!body.stream) return new Response(whole, { headers: { "content-type": "application/json" } });
    const text = `${events.map((data) => `data: ${data}\n\n`).join("")}data: [DONE]\n\n`;
    return new Response(text, { headers: { "content-type": "text/event-stream" } });
  },
});

let sluice: TestSluice;

beforeAll(async () => {
  sluice = await startSluice({
    models: [
      {
        id: "h",
        backend: "openai",
        base_url: `http://127.0.0.1:${upstream.port}/v1`,
        upstream_model: "h",
        max_concurrency: 4,
        queue_size: 64,
        breaker_failures: 1_000_000,
      },
    ],
    plans: [{ id: "default", models: ["*"], tokens_per_5h: 1e12, tokens_per_month: 1e13, max_concurrency: 4 }],
  });
});
afterAll(async () => {
  await sluice.stop();
  upstream.stop(true);
});

type Api = "chat" | "responses" | "messages";
const paths: Record<Api, string> = { chat: "/v1/chat/completions", responses: "/v1/responses", messages: "/v1/messages" };

/** Requests sent to model h so far: each must have its ledger row. */
let requestsSent = 0;

/** Sends an API's request for model h, with a plain prompt. */
function call(api: Api, stream: boolean): Promise<Response> {
  requestsSent++;
  return sluice.post(paths[api], requestBody(api, stream));
}

function requestBody(api: Api, stream: boolean): Record<string, unknown> {
  if (api === "chat") return { model: "h", messages: [{ role: "user", content: "hi" }], stream, stream_options: stream ? { include_usage: true } : undefined };
  if (api === "responses") return { model: "h", input: "hi", stream };
  return { model: "h", max_tokens: 100, messages: [{ role: "user", content: "hi" }], stream };
}

/** Sets `value` at `path` inside `target` (creating objects on the way); a path of [] replaces nothing. */
function setAt(target: Record<string, unknown>, path: (string | number)[], value: unknown): void {
  let cursor: Record<string | number, unknown> = target;
  for (const step of path.slice(0, -1)) {
    const next = cursor[step];
    if (typeof next !== "object" || next === null) cursor[step] = {};
    cursor = cursor[step] as Record<string | number, unknown>;
  }
  const last = path.at(-1);
  if (last !== undefined) cursor[last] = value;
}

/** A number as the upstream's JSON text writes it, past what JSON.stringify can write (1e400 parses to Infinity). */
const oddNumber = fc.constantFrom("-5", "0.5", "1e400", "-1e400", "9007199254740993", "2147483648", "2147483647", "1e21", "-0");

/** A value for a field: anything JSON can hold, or an odd number written as text. */
const fieldValue = fc.oneof(
  anyFieldValue.map((value) => JSON.stringify(value) ?? "null"),
  oddNumber,
);

const usagePaths: (string | number)[][] = [
  ["usage"],
  ["usage", "prompt_tokens"],
  ["usage", "completion_tokens"],
  ["usage", "completion_tokens_details"],
  ["usage", "completion_tokens_details", "reasoning_tokens"],
];

const wholePaths: (string | number)[][] = [
  ...usagePaths,
  ["choices"],
  ["choices", 0],
  ["choices", 0, "message"],
  ["choices", 0, "message", "content"],
  ["choices", 0, "message", "reasoning_content"],
  ["choices", 0, "message", "reasoning"],
  ["choices", 0, "message", "tool_calls"],
  ["choices", 0, "message", "tool_calls", 0],
  ["choices", 0, "message", "tool_calls", 0, "id"],
  ["choices", 0, "message", "tool_calls", 0, "function"],
  ["choices", 0, "message", "tool_calls", 0, "function", "name"],
  ["choices", 0, "message", "tool_calls", 0, "function", "arguments"],
  ["choices", 0, "finish_reason"],
  ["choices", 0, "stop_reason"],
];

const chunkPaths: (string | number)[][] = [
  ...usagePaths,
  ["choices"],
  ["choices", 0],
  ["choices", 0, "delta"],
  ["choices", 0, "delta", "content"],
  ["choices", 0, "delta", "reasoning_content"],
  ["choices", 0, "delta", "tool_calls"],
  ["choices", 0, "delta", "tool_calls", 0],
  ["choices", 0, "delta", "tool_calls", 0, "index"],
  ["choices", 0, "delta", "tool_calls", 0, "id"],
  ["choices", 0, "delta", "tool_calls", 0, "function"],
  ["choices", 0, "delta", "tool_calls", 0, "function", "arguments"],
  ["choices", 0, "finish_reason"],
];

function goodWhole(): Record<string, unknown> {
  return {
    id: "x",
    object: "chat.completion",
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: "hello", tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }] },
        finish_reason: "stop",
      },
    ],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5, completion_tokens_details: { reasoning_tokens: 1 } },
  };
}

function goodChunks(): Record<string, unknown>[] {
  return [
    { choices: [{ index: 0, delta: { role: "assistant", reasoning_content: "hm" } }] },
    { choices: [{ index: 0, delta: { content: "hel" } }] },
    { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_1", function: { name: "f", arguments: "{" } }] } }] },
    { choices: [{ index: 0, delta: { content: "lo" }, finish_reason: "stop" }] },
    { choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } },
  ];
}

/** JSON text of `body` with the placeholder string written as `raw` (so that 1e400 reaches Sluice as written). */
function withRaw(body: Record<string, unknown>, path: (string | number)[], raw: string): string {
  const placeholder = "\u0000raw\u0000";
  setAt(body, path, placeholder);
  return JSON.stringify(body).replace(JSON.stringify(placeholder), raw);
}

/** Fails unless the response is an API's answer as its client could read it: valid JSON or events, whole counts. */
async function expectReadable(api: Api, response: Response, stream: boolean, what: string): Promise<void> {
  const text = await response.text();
  if (response.status !== 200) {
    expect({ what, status: response.status, text }).toMatchObject({ status: 502 });
    const body = JSON.parse(text) as { error: { type: string } };
    expect(typeof body.error.type).toBe("string");
    return;
  }
  if (!stream) {
    const body = JSON.parse(text) as { usage: Record<string, number> };
    expectWholeCounts(body.usage, what);
    return;
  }
  const frames = text.split("\n\n").filter((frame) => frame.trim() !== "");
  const payloads: unknown[] = [];
  for (const frame of frames) {
    const data = frame
      .split("\n")
      .filter((line) => line.startsWith("data: "))
      .map((line) => line.slice(6))
      .join("\n");
    if (data === "" || data === "[DONE]") continue;
    try {
      payloads.push(JSON.parse(data));
    } catch {
      throw new Error(`${what}: a frame that is not JSON: ${data}`);
    }
  }
  const last = JSON.stringify(payloads.at(-1));
  if (api === "chat") {
    expect(frames.at(-1)).toBe("data: [DONE]");
    const usage = (payloads.at(-1) as { usage?: Record<string, number> | null; error?: unknown }).usage;
    if (usage) expectWholeCounts(usage, what);
  } else if (api === "responses") {
    expect(last).toMatch(/"type":"(response\.completed|response\.incomplete|response\.failed|error)"/);
  } else {
    expect(last).toMatch(/"type":"(message_stop|error)"/);
  }
}

function expectWholeCounts(usage: Record<string, unknown>, what: string): void {
  for (const [name, value] of Object.entries(usage)) {
    if (typeof value === "object" && value !== null) {
      expectWholeCounts(value as Record<string, unknown>, what);
      continue;
    }
    if (!Number.isSafeInteger(value) || (value as number) < 0) throw new Error(`${what}: usage ${name} = ${value}`);
  }
}

describe("what Sluice makes of an upstream's nonsense", () => {
  test("usage past a double, negative, fractional or past 2^31 - 1 is not billed as sent: the tokenizer counts the answer", async () => {
    for (const raw of ["1e400", "-5", "0.5", "9007199254740993", "2147483648"]) {
      whole = withRaw(goodWhole(), ["usage", "prompt_tokens"], raw);
      const response = await call("chat", false);
      expect(response.status).toBe(200);
      const requestId = response.headers.get("x-request-id");
      const body = (await response.json()) as { usage: { prompt_tokens: number } };
      const row = sluice.ledgerRows().find((candidate) => candidate.request_id === requestId);
      expect({ raw, source: row?.usage_source, prompt: row?.prompt_tokens }).toEqual({ raw, source: "tokenizer", prompt: body.usage.prompt_tokens });
      expectWholeCounts(body.usage, raw);
    }
    // Reasoning is part of the completion's tokens, never more than them.
    whole = withRaw(goodWhole(), ["usage", "completion_tokens_details", "reasoning_tokens"], "7");
    const response = await call("chat", false);
    const body = (await response.json()) as { usage: { completion_tokens: number; completion_tokens_details: { reasoning_tokens: number } } };
    expect(body.usage).toMatchObject({ completion_tokens: 2, completion_tokens_details: { reasoning_tokens: 2 } });
  });

  test("tool calls that are not objects are left out; a call's index that is not a whole number gives way to its place", async () => {
    for (const index of ["-1", "1e400", "0.5", '"x"']) {
      const calls = `[null, 5, {"index": ${index}, "type": "function", "function": {"name": "f", "arguments": "{}"}}]`;
      whole = withRaw(goodWhole(), ["choices", 0, "message", "tool_calls"], calls);
      const chat = (await (await call("chat", false)).json()) as { choices: { message: { tool_calls: unknown[] } }[] };
      expect(chat.choices[0]?.message.tool_calls).toHaveLength(1);
      const responses = (await (await call("responses", false)).json()) as { output: { type: string }[] };
      expect(responses.output.filter((item) => item.type === "function_call")).toHaveLength(1);
      const messages = (await (await call("messages", false)).json()) as { content: { type: string; id?: string }[] };
      const uses = messages.content.filter((block) => block.type === "tool_use");
      expect(uses).toHaveLength(1);
      // Named by its place in the answer, as an upstream that sends no index gets.
      expect(uses[0]?.id).toMatch(/^toolu_[0-9a-f]+_0$/);
    }
  });
});

/**
 * A body of `first`, then `chunks` reads of `chunk` each, sent without a Content-Length; counts how many were pulled.
 */
function endless(chunk: string, chunks: number, pulled: { count: number }, first = ""): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const bytes = encoder.encode(chunk);
  return new ReadableStream({
    start(controller) {
      if (first) controller.enqueue(encoder.encode(first));
    },
    pull(controller) {
      if (pulled.count++ === chunks) controller.close();
      else controller.enqueue(bytes);
    },
  });
}

/** The first chunk of a stream, so that the stream has begun when the upstream goes wrong. */
const firstChunk = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: "hel" } }] })}\n\n`;

describe("an upstream that nests without end", () => {
  // JSON.parse takes 100,000 levels; JSON.stringify and any recursion over them run out of stack. The two tool-call
  // tests passed on the code before them too: they guard that such an answer stays a 502 (an answer that cannot be
  // written), never a 500.
  const deep = `${"[".repeat(100_000)}${"]".repeat(100_000)}`;
  const shapes: [string, string][] = [
    ["a function call's arguments", `[{"id": "c", "type": "function", "function": {"name": "f", "arguments": ${deep}}}]`],
    ["another kind of tool call", `[{"id": "c", "type": "custom", "custom": {"name": "f", "input": ${deep}}}]`],
  ];

  for (const [what, calls] of shapes) {
    test(`${what}, in a whole answer and in a stream: 502 or an error event, never a 500, nothing left held`, async () => {
      whole = withRaw(goodWhole(), ["choices", 0, "message", "tool_calls"], calls);
      events = [`{"choices": [{"index": 0, "delta": {"tool_calls": ${calls}}}]}`];
      for (const api of ["chat", "responses", "messages"] as const) {
        const answered = await call(api, false);
        expect([200, 502]).toContain(answered.status);
        await answered.arrayBuffer();
        const streamed = await call(api, true);
        expect([200, 502]).toContain(streamed.status);
        await streamed.arrayBuffer();
      }
      await eventually(() => sluice.server.admission.inFlight() === 0);
    });
  }

  test("content parts nested within a thinking part are no text, and not followed down", async () => {
    whole = withRaw(
      goodWhole(),
      ["choices", 0, "message", "content"],
      `[{"type": "thinking", "thinking": [{"type": "text", "text": "kept"}, ${deep}]}, {"type": "text", "text": "answer"}]`,
    );
    const chat = (await (await call("chat", false)).json()) as { choices: { message: { content: string; reasoning_content: string } }[] };
    expect(chat.choices[0]?.message).toMatchObject({ content: "answer", reasoning_content: "kept" });
  });
});

describe("an upstream that sends too much", () => {
  const megabyte = "x".repeat(1024 * 1024);
  /**
   * Megabytes the upstream may have sent when the stream is cut: the bound itself is 16, and the upstream's server
   * and the sockets' buffers run ahead of the cancel (40 once, in a clean clone's run). Without the bound all 1,000
   * were read.
   */
  const pulledAtMost = 100;

  test("a stream line that never ends: the stream ends with an error event at 16 Mi characters", async () => {
    const pulled = { count: 0 };
    await withAnswer(
      () => new Response(endless(`data: ${megabyte}`, 1000, pulled, firstChunk), { headers: { "content-type": "text/event-stream" } }),
      async () => {
        const response = await call("chat", true);
        expect(response.status).toBe(200);
        const text = await response.text();
        expect(text).toContain('"content":"hel"');
        expect(text).toContain('"code":"upstream_error"');
        expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
        expect(pulled.count).toBeLessThan(pulledAtMost);
      },
    );
  }, 30_000);

  test("an event of many short data lines that never ends past the same bound", async () => {
    const pulled = { count: 0 };
    const lines = "data: abcdefghijklmnopqrstuvwxyz\n".repeat(32 * 1024);
    await withAnswer(
      () => new Response(endless(lines, 100_000, pulled, firstChunk), { headers: { "content-type": "text/event-stream" } }),
      async () => {
        const response = await call("messages", true);
        expect(response.status).toBe(200);
        const text = await response.text();
        expect(text).toContain("event: error");
        expect(pulled.count).toBeLessThan(pulledAtMost);
      },
    );
  }, 30_000);

  test("an error status with an endless body: 502 from its status, the body read no further than 64 KB", async () => {
    const pulled = { count: 0 };
    await withAnswer(
      () => new Response(endless(megabyte, 1000, pulled), { status: 500 }),
      async () => {
        const response = await call("chat", false);
        expect(response.status).toBe(502);
        await response.arrayBuffer();
        // 64 KB are read; the upstream's server and the sockets run ahead of the cancel (10 MB once, under the whole
        // suite's load). Without the bound all 1,000 were read.
        expect(pulled.count).toBeLessThan(pulledAtMost);
      },
    );
  });
});

describe("an upstream that redirects", () => {
  test("is not followed: the prompt goes nowhere else, and the caller gets 502 upstream_error", async () => {
    const reached: string[] = [];
    const elsewhere = Bun.serve({
      port: 0,
      async fetch(request) {
        reached.push(`${request.method} ${await request.text()}`);
        return new Response(JSON.stringify(goodWhole()), { headers: { "content-type": "application/json" } });
      },
    });
    try {
      for (const status of [301, 302, 303, 307, 308]) {
        await withAnswer(
          () => new Response(null, { status, headers: { location: `http://127.0.0.1:${elsewhere.port}/v1/chat/completions` } }),
          async () => {
            for (const stream of [false, true]) {
              const response = await call("chat", stream);
              const body = (await response.json()) as { error: { code: string; message: string } };
              expect({ status, stream, code: response.status, error: body.error.code }).toEqual({ status, stream, code: 502, error: "upstream_error" });
              expect(body.error.message).not.toContain(String(elsewhere.port));
            }
          },
        );
      }
      expect(reached).toEqual([]);
    } finally {
      elsewhere.stop(true);
    }
  });
});

describe("an upstream that compresses", () => {
  test("is asked for no compression, and what it compresses anyway is never inflated: a 502, not 64 MB from 64 KB", async () => {
    whole = JSON.stringify(goodWhole());
    expect((await call("chat", false)).status).toBe(200);
    expect(lastAcceptEncoding).toBe("identity");
    // Each a valid answer once inflated, 64 MB of it padding: inflated, it would be answered with a 200.
    const padding = 64 * 1024 * 1024;
    const bombs = {
      whole: Bun.gzipSync(`${JSON.stringify(goodWhole())}${" ".repeat(padding)}`),
      stream: Bun.gzipSync(
        `${": padding\n".repeat(padding / 10)}\n${goodChunks()
          .map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`)
          .join("")}data: [DONE]\n\n`,
      ),
    };
    expect(bombs.whole.length + bombs.stream.length).toBeLessThan(1024 * 1024);
    for (const stream of [false, true]) {
      await withAnswer(
        () =>
          new Response(stream ? bombs.stream : bombs.whole, {
            headers: { "content-type": stream ? "text/event-stream" : "application/json", "content-encoding": "gzip" },
          }),
        async () => {
          const response = await call("chat", stream);
          expect({ stream, status: response.status }).toEqual({ stream, status: 502 });
          await response.arrayBuffer();
        },
      );
    }
  });
});

describe("an upstream's Retry-After", () => {
  test("seconds or an HTTP date, passed on as whole seconds from 1 to an hour; anything else is 1", async () => {
    const inHalfAMinute = new Date(Date.now() + 30_000).toUTCString();
    const cases: [string, (value: number) => boolean][] = [
      ["7", (value) => value === 7],
      ["12.5", (value) => value === 13],
      ["0.2", (value) => value === 1],
      ["-3", (value) => value === 1],
      ["abc", (value) => value === 1],
      ["1e21", (value) => value === 3600],
      ["Infinity", (value) => value === 3600],
      [inHalfAMinute, (value) => value >= 28 && value <= 31],
      ["Wed, 21 Oct 2015 07:28:00 GMT", (value) => value === 1],
    ];
    for (const [header, expected] of cases) {
      await withAnswer(
        () => new Response('{"error":{"message":"busy"}}', { status: 429, headers: { "retry-after": header } }),
        async () => {
          const response = await call("chat", false);
          await response.arrayBuffer();
          expect(response.status).toBe(503);
          const sent = response.headers.get("retry-after") ?? "";
          expect({ header, sent, whole: /^\d+$/.test(sent), expected: expected(Number(sent)) }).toEqual({ header, sent, whole: true, expected: true });
        },
      );
    }
  });
});

describe("property-based: whatever the upstream answers, clients get valid answers and slots come back", () => {
  test("whole answers with a wrong value anywhere", async () => {
    let answered = 0;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom<Api>("chat", "responses", "messages"), fc.constantFrom(...wholePaths), fieldValue, async (api, path, raw) => {
        whole = withRaw(goodWhole(), path, raw);
        const response = await call(api, false);
        if (response.status === 200) answered++;
        await expectReadable(api, response, false, `${api} whole ${whole}`);
      }),
      { numRuns: 500 },
    );
    // Most wrong values leave an answer to give: the property is not met by 502s alone.
    expect(answered).toBeGreaterThan(250);
  }, 60_000);

  test("streams with a wrong value anywhere in one chunk, or a chunk that is not an object", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom<Api>("chat", "responses", "messages"),
        fc.nat(4),
        fc.constantFrom(...chunkPaths),
        fc.oneof(fieldValue, fc.constant(null)),
        async (api, index, path, raw) => {
          const chunks = goodChunks();
          events = chunks.map((chunk, position) => (position !== index ? JSON.stringify(chunk) : raw === null ? "not json {" : withRaw(chunk, path, raw)));
          const response = await call(api, true);
          await expectReadable(api, response, true, `${api} stream ${events.join(" | ")}`);
        },
      ),
      { numRuns: 500 },
    );
  }, 60_000);

  test("afterwards: nothing in flight, every request in the ledger with whole, non-negative counts", async () => {
    expect(sluice.server.admission.inFlight()).toBe(0);
    // Each answer's row was committed before its last byte: no flush needed to see them.
    const rows = sluice.ledgerRows().filter((row) => row.model === "h");
    expect(rows.length).toBe(requestsSent);
    for (const row of rows) {
      for (const count of [row.prompt_tokens, row.completion_tokens, row.reasoning_tokens]) {
        if (!Number.isInteger(count) || count < 0 || count > 2 ** 31 - 1) throw new Error(`ledger row ${row.request_id}: ${JSON.stringify(row)}`);
      }
    }
    // The quota left is a whole number: no row counted Infinity, NaN or a fraction against the organization.
    whole = JSON.stringify(goodWhole());
    const response = await call("chat", false);
    expect(response.status).toBe(200);
    expect(response.headers.get("x-ratelimit-remaining-tokens")).toMatch(/^\d+$/);
  });
});
