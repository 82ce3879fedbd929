// A model's fallbacks take a request over when the model cannot take it now (down, busy, its queue full), before
// anything was produced; never for the caller's own mistakes, never once the caller left or the time limit passed.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI, { type APIError } from "openai";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { capturingLogger, eventually, fakeModel, schemaErrors, startSluice, testActor, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
let openai: OpenAI;
const { logger, lines: logLines } = capturingLogger();

const backup = (id: string, extra: Record<string, unknown> = {}) => fakeModel(upstream.url, id, "usage-100-5", extra);

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice(
    {
      models: [
        fakeModel(upstream.url, "failing", "fail-500", { fallbacks: ["backup"] }),
        fakeModel(upstream.url, "busy", "overloaded-429", { fallbacks: ["backup"] }),
        { id: "unreachable", backend: "openai", base_url: "http://127.0.0.1:1/v1", fallbacks: ["backup"] },
        fakeModel(upstream.url, "disabled", "usage-1-1", { enabled: false, fallbacks: ["backup"] }),
        fakeModel(upstream.url, "disabled-alone", "usage-1-1", { enabled: false }),
        fakeModel(upstream.url, "narrow", "slow-40-25", { max_concurrency: 1, queue_size: 0, fallbacks: ["backup"] }),
        fakeModel(upstream.url, "picky", "bad-400", { fallbacks: ["backup"] }),
        fakeModel(upstream.url, "slow-start", "hang", { first_byte_timeout_ms: 200, fallbacks: ["backup"] }),
        fakeModel(upstream.url, "deadline", "hang", { timeout_ms: 300, fallbacks: ["backup"] }),
        fakeModel(upstream.url, "guarded", "fail-500", { fallbacks: ["secret", "small", "backup"] }),
        fakeModel(upstream.url, "doomed", "fail-500", { fallbacks: ["also-failing"] }),
        fakeModel(upstream.url, "failing-to-narrow", "fail-500", { fallbacks: ["narrow"] }),
        fakeModel(upstream.url, "also-failing", "fail-500"),
        fakeModel(upstream.url, "secret", "usage-7-7"),
        fakeModel(upstream.url, "small", "usage-8-8", { context_window: 64, max_output_tokens: 16 }),
        backup("backup"),
        fakeModel(upstream.url, "crowded", "usage-100-5-30", { max_concurrency: 4, queue_size: 0, fallbacks: ["overflow"] }),
        backup("overflow", { upstream_model: "usage-100-5-30", max_concurrency: 4, queue_size: 500 }),
      ],
      plans: [
        {
          id: "default",
          models: [
            "failing",
            "busy",
            "unreachable",
            "disabled",
            "disabled-alone",
            "narrow",
            "picky",
            "slow-start",
            "deadline",
            "guarded",
            "doomed",
            "failing-to-narrow",
            "also-failing",
            "small",
            "backup",
            "crowded",
            "overflow",
          ],
        },
      ],
    },
    {
      logger,
    },
  );
  openai = sluice.client();
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});
beforeEach(() => {
  upstream.reset();
  logLines.length = 0;
});

const messages = [{ role: "user" as const, content: "Summarize the design." }];

/** The upstream models called, in order. */
function called(): string[] {
  return upstream.bodies.map((body) => String(body.model));
}

function rowsOf(requestId: string) {
  return sluice.ledgerRows().filter((row) => row.request_id === requestId);
}

async function metrics(): Promise<string> {
  return (await fetch(`${sluice.url}/metrics`)).text();
}

describe("a fallback takes over", () => {
  test("a 500 from the model: the fallback answers, under its own name, with one ledger row for the fallback", async () => {
    const before = await metrics();
    const { data: completion, response } = await openai.chat.completions.create({ model: "failing", messages }).withResponse();
    expect(completion.model).toBe("backup");
    expect(completion.choices[0]?.message.content).toBe("fixed");
    expect(completion.usage).toMatchObject({ prompt_tokens: 100, completion_tokens: 5 });
    expect(schemaErrors("CreateChatCompletionResponse", completion)).toEqual([]);
    expect(called()).toEqual(["fail-500", "usage-100-5"]);
    const requestId = response.headers.get("x-request-id") as string;
    await eventually(() => rowsOf(requestId).length === 1);
    expect(rowsOf(requestId)).toMatchObject([{ model: "backup", outcome: "completed", prompt_tokens: 100, completion_tokens: 5 }]);
    const after = await metrics();
    expect(after).toContain('sluice_fallbacks_total{model="failing",fallback="backup"} 1');
    expect(before).not.toContain('sluice_fallbacks_total{model="failing"');
    expect(after).toContain('sluice_upstream_errors_total{model="failing",code="upstream_error"}');
    await eventually(() => logLines.some((line) => line.request_id === requestId));
    expect(logLines.find((line) => line.request_id === requestId)).toMatchObject({ model: "backup", fallback_from: "failing", status: 200 });
    expect(sluice.server.admission.inFlight()).toBe(0);
  });

  test("a stream: the fallback's stream, every chunk named for it", async () => {
    const stream = await openai.chat.completions.create({ model: "failing", messages, stream: true, stream_options: { include_usage: true } });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.length).toBeGreaterThan(1);
    expect(new Set(chunks.map((chunk) => chunk.model))).toEqual(new Set(["backup"]));
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("")).toBe("fixed");
    expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 100, completion_tokens: 5 });
    expect(called()).toEqual(["fail-500", "usage-100-5"]);
  });

  test("a 429 from the model (after its own retry rules), a refused connection, a first byte too late", async () => {
    for (const [model, calls] of [
      ["busy", ["overloaded-429", "usage-100-5"]],
      ["unreachable", ["usage-100-5"]],
      ["slow-start", ["hang", "usage-100-5"]],
    ] as const) {
      upstream.reset();
      const completion = await openai.chat.completions.create({ model, messages });
      expect(completion.model).toBe("backup");
      expect(called()).toEqual([...calls]);
    }
  });

  test("a disabled model: its fallback answers and the model is never called; without a fallback it stays 503", async () => {
    const completion = await openai.chat.completions.create({ model: "disabled", messages });
    expect(completion.model).toBe("backup");
    expect(called()).toEqual(["usage-100-5"]);
    expect(await metrics()).toContain('sluice_fallbacks_total{model="disabled",fallback="backup"}');
    const alone = await openai.chat.completions.create({ model: "disabled-alone", messages }).catch((caught: unknown) => caught);
    expect((alone as APIError).status).toBe(503);
    expect((alone as APIError).code).toBe("model_unavailable");
    expect(called()).toEqual(["usage-100-5"]);
  });

  test("a full queue: the fallback takes the request while the model's one slot is busy", async () => {
    const holding = await openai.chat.completions.create({ model: "narrow", messages, stream: true });
    const iterator = holding[Symbol.asyncIterator]();
    await iterator.next();
    const completion = await openai.chat.completions.create({ model: "narrow", messages });
    expect(completion.model).toBe("backup");
    holding.controller.abort();
    await eventually(() => sluice.server.admission.inFlight() === 0);
    // The slot came back: the model serves again itself.
    upstream.reset();
    const own = await openai.chat.completions.create({ model: "narrow", messages, stream: true });
    for await (const chunk of own) expect(chunk.model).toBe("narrow");
    expect(called()).toEqual(["slow-40-25"]);
  });

  test("fallbacks the caller's plan leaves out, or that the request does not fit, are passed over", async () => {
    const completion = await openai.chat.completions.create({ model: "guarded", messages, max_tokens: 100 });
    expect(completion.model).toBe("backup");
    // "secret" is outside the plan; "small" has room for 16 output tokens, not 100.
    expect(called()).toEqual(["fail-500", "usage-100-5"]);
  });

  test("a key limited to one model: its fallbacks are out of reach too", async () => {
    const { organizationId } = await sluice.addOrganization("acme");
    const { secret } = await sluice.keys.create({ organizationId, name: "failing only", models: ["failing"] }, testActor);
    const limited = new OpenAI({ baseURL: sluice.baseURL, apiKey: secret, maxRetries: 0 });
    const error = await limited.chat.completions.create({ model: "failing", messages }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect((error as APIError).status).toBe(502);
    expect(called()).toEqual(["fail-500"]);
  });

  test("the Responses and Messages APIs fall back the same way", async () => {
    const response = await openai.responses.create({ model: "failing", input: "Summarize the design." });
    expect(response.model).toBe("backup");
    expect(response.output_text).toBe("fixed");
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
    const message = await anthropic.messages.create({ model: "failing", max_tokens: 256, messages: [{ role: "user", content: "Summarize the design." }] });
    expect(message.model).toBe("backup");
    expect(message.content).toMatchObject([{ type: "text", text: "fixed" }]);
    expect(called()).toEqual(["fail-500", "usage-100-5", "fail-500", "usage-100-5"]);
  });
});

describe("no fallback", () => {
  test("for the caller's own mistake: the model's 400 is the answer", async () => {
    const error = await openai.chat.completions.create({ model: "picky", messages }).catch((caught: unknown) => caught);
    expect((error as APIError).status).toBe(400);
    expect(called()).toEqual(["bad-400"]);
  });

  test("once the model's time limit passed: 502, the fallback never called", async () => {
    const error = await openai.chat.completions.create({ model: "deadline", messages }).catch((caught: unknown) => caught);
    expect((error as APIError).status).toBe(502);
    expect(called()).toEqual(["hang"]);
    expect(sluice.server.admission.inFlight()).toBe(0);
  });

  test("when every fallback fails too: the last one's error, and one ledger row, for the last model", async () => {
    const { error, response } = await openai.chat.completions
      .create({ model: "doomed", messages })
      .withResponse()
      .then(
        (answer) => ({ error: undefined, response: answer.response }),
        (caught: APIError) => ({ error: caught, response: undefined }),
      );
    expect(response).toBeUndefined();
    expect(error?.status).toBe(502);
    expect(called()).toEqual(["fail-500", "fail-500"]);
    const requestId = error?.headers?.get("x-request-id") as string;
    await eventually(() => rowsOf(requestId).length === 1);
    expect(rowsOf(requestId)).toMatchObject([{ model: "also-failing", outcome: "upstream_error", prompt_tokens: 0, completion_tokens: 0 }]);
    expect(sluice.server.admission.inFlight()).toBe(0);
  });
});

test("a fallback whose queue is full: the model's own error, its ledger row, and its failure counted once", async () => {
  const holding = await openai.chat.completions.create({ model: "narrow", messages, stream: true });
  await holding[Symbol.asyncIterator]().next();
  const error = (await openai.chat.completions
    .create({ model: "failing-to-narrow", messages })
    .then(() => undefined)
    .catch((caught: unknown) => caught)) as APIError;
  holding.controller.abort();
  expect(error.status).toBe(502);
  expect(error.code).toBe("upstream_error");
  const requestId = error.headers?.get("x-request-id") as string;
  await eventually(() => rowsOf(requestId).length === 1);
  expect(rowsOf(requestId)).toMatchObject([{ model: "failing-to-narrow", outcome: "upstream_error", error_code: "upstream_error" }]);
  const text = await metrics();
  expect(text).toContain('sluice_upstream_errors_total{model="failing-to-narrow",code="upstream_error"} 1\n');
  expect(text).not.toContain('sluice_fallbacks_total{model="failing-to-narrow"');
  await eventually(() => sluice.server.admission.inFlight() === 0);
});

test("200 concurrent requests over a model of 4 slots and no queue: all answered, each by one model, every slot given back", async () => {
  const answers = await Promise.all(Array.from({ length: 200 }, () => openai.chat.completions.create({ model: "crowded", messages }).withResponse()));
  const models = answers.map(({ data }) => data.model);
  expect(models.length).toBe(200);
  expect(models.filter((model) => model === "crowded").length).toBeGreaterThanOrEqual(4);
  expect(models.filter((model) => model === "overflow").length).toBeGreaterThan(100);
  expect(models.filter((model) => model !== "crowded" && model !== "overflow")).toEqual([]);
  // The two models' 4 slots each: never more in flight upstream.
  expect(upstream.maxInFlight).toBeLessThanOrEqual(8);
  expect(upstream.bodies.length).toBe(200);
  for (const { data, response } of answers) {
    const rows = rowsOf(response.headers.get("x-request-id") as string);
    if (rows.length === 0) continue;
    expect(rows).toMatchObject([{ model: data.model, outcome: "completed" }]);
  }
  await eventually(() => answers.every(({ response }) => rowsOf(response.headers.get("x-request-id") as string).length === 1));
  expect(sluice.server.admission.inFlight()).toBe(0);
  const text = await metrics();
  for (const model of ["crowded", "overflow"]) {
    expect(text).toContain(`sluice_in_flight{model="${model}"} 0`);
    expect(text).toContain(`sluice_queued{model="${model}"} 0`);
  }
  const overflowed = models.filter((model) => model === "overflow").length;
  expect(text).toContain(`sluice_fallbacks_total{model="crowded",fallback="overflow"} ${overflowed}`);
});
