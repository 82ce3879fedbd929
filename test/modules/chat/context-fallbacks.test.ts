// A model's context fallbacks take a request too long for it: Sluice's own count of the prompt, or the upstream's 400
// saying so. Requests that fit stay on the model; a request no context fallback fits gets the model's own 400.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { capturingLogger, failureOf, eventually, fakeModel, schemaErrors, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
let openai: OpenAI;
const { logger, lines: logLines } = capturingLogger();

const narrow = { context_window: 64, max_output_tokens: 16 };

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice(
    {
      models: [
        fakeModel(upstream.url, "short", "usage-10-5", { ...narrow, context_fallbacks: ["long"] }),
        fakeModel(upstream.url, "guarded", "usage-10-5", { ...narrow, context_fallbacks: ["secret-long", "off-long", "medium", "long"] }),
        fakeModel(upstream.url, "cramped", "usage-10-5", { ...narrow, context_fallbacks: ["medium"] }),
        fakeModel(upstream.url, "no-room", "usage-10-5", narrow),
        fakeModel(upstream.url, "first-fails", "usage-10-5", { ...narrow, context_fallbacks: ["long-failing", "long"] }),
        fakeModel(upstream.url, "counts-more", "context-400", { context_fallbacks: ["long"], fallbacks: ["backup"] }),
        fakeModel(upstream.url, "counts-more-alone", "context-400"),
        fakeModel(upstream.url, "long", "usage-300-7", { context_window: 100_000 }),
        fakeModel(upstream.url, "long-failing", "fail-500", { context_window: 100_000 }),
        fakeModel(upstream.url, "secret-long", "usage-1-1", { context_window: 100_000 }),
        fakeModel(upstream.url, "off-long", "usage-1-1", { context_window: 100_000, enabled: false }),
        fakeModel(upstream.url, "medium", "usage-2-2", { context_window: 128 }),
        fakeModel(upstream.url, "backup", "usage-3-3"),
      ],
      plans: [
        {
          id: "default",
          models: [
            "short",
            "guarded",
            "cramped",
            "no-room",
            "first-fails",
            "counts-more",
            "counts-more-alone",
            "long",
            "long-failing",
            "off-long",
            "medium",
            "backup",
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

/** About 300 tokens: too long for a 64- or 128-token context window. */
const longMessages = [{ role: "user" as const, content: Array.from({ length: 300 }, (_, index) => `word${index}`).join(" ") }];
const shortMessages = [{ role: "user" as const, content: "Hi." }];
/** 57 tokens: room in a 64-token window for 7 more, not for 16. */
const roomFor7 = [{ role: "user" as const, content: Array.from({ length: 50 }, () => "a").join(" ") }];

function called(): string[] {
  return upstream.bodies.map((body) => String(body.model));
}

function rowsOf(requestId: string) {
  return sluice.ledgerRows().filter((row) => row.request_id === requestId);
}

describe("a request too long for its model", () => {
  test("goes to its context fallback: the answer, its one ledger row, the metric and the log line name the fallback", async () => {
    const { data: completion, response } = await openai.chat.completions.create({ model: "short", messages: longMessages }).withResponse();
    expect(completion.model).toBe("long");
    expect(completion.usage).toMatchObject({ prompt_tokens: 300, completion_tokens: 7 });
    expect(schemaErrors("CreateChatCompletionResponse", completion)).toEqual([]);
    // The short model was never called: Sluice's own count refused it before it was admitted.
    expect(called()).toEqual(["usage-300-7"]);
    const requestId = response.headers.get("x-request-id") as string;
    await eventually(() => rowsOf(requestId).length === 1);
    expect(rowsOf(requestId)).toMatchObject([{ model: "long", outcome: "completed", prompt_tokens: 300, completion_tokens: 7 }]);
    expect(await (await fetch(`${sluice.url}/metrics`)).text()).toContain('sluice_fallbacks_total{model="short",fallback="long"}');
    await eventually(() => logLines.some((line) => line.request_id === requestId));
    expect(logLines.find((line) => line.request_id === requestId)).toMatchObject({ model: "long", fallback_from: "short", status: 200 });
    expect(sluice.server.admission.inFlight()).toBe(0);
  });

  test("a stream, and one whose max_tokens leaves no room: every chunk named for the fallback", async () => {
    const stream = await openai.chat.completions.create({ model: "short", messages: roomFor7, max_tokens: 16, stream: true });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.length).toBeGreaterThan(1);
    expect(new Set(chunks.map((chunk) => chunk.model))).toEqual(new Set(["long"]));
    expect(called()).toEqual(["usage-300-7"]);
  });

  test("a request that fits stays on the model, with a max_tokens that leaves room too", async () => {
    expect((await openai.chat.completions.create({ model: "short", messages: shortMessages })).model).toBe("short");
    expect((await openai.chat.completions.create({ model: "short", messages: roomFor7, max_tokens: 7 })).model).toBe("short");
    expect(called()).toEqual(["usage-10-5", "usage-10-5"]);
  });

  test("a max_tokens past the model's output limit is the caller's mistake, not the context's: 400, not moved", async () => {
    const error = await failureOf(openai.chat.completions.create({ model: "short", messages: shortMessages, max_tokens: 60 }));
    expect(error.status).toBe(400);
    expect(error.param).toBe("max_tokens");
    expect(called()).toEqual([]);
  });

  test("context fallbacks outside the plan, disabled, or too small for the request are passed over", async () => {
    const completion = await openai.chat.completions.create({ model: "guarded", messages: longMessages });
    expect(completion.model).toBe("long");
    expect(called()).toEqual(["usage-300-7"]);
  });

  test("when none fits: the model's own 400, naming its context window; a model without context fallbacks the same", async () => {
    for (const model of ["cramped", "no-room"]) {
      const error = await failureOf(openai.chat.completions.create({ model, messages: longMessages }));
      expect(error.status).toBe(400);
      expect(error.param).toBe("messages");
      expect(error.message).toContain("maximum context length is 64 tokens");
    }
    expect(called()).toEqual([]);
  });

  test("the upstream's own 400 about the context: its context fallback answers; without one, the 400 is the answer", async () => {
    const { data: completion, response } = await openai.chat.completions.create({ model: "counts-more", messages: shortMessages }).withResponse();
    // Not the ordinary fallback ("backup"): the model is up, the request is too long for it.
    expect(completion.model).toBe("long");
    expect(called()).toEqual(["context-400", "usage-300-7"]);
    const requestId = response.headers.get("x-request-id") as string;
    await eventually(() => rowsOf(requestId).length === 1);
    expect(rowsOf(requestId)).toMatchObject([{ model: "long", outcome: "completed" }]);

    upstream.reset();
    const error = await failureOf(openai.chat.completions.create({ model: "counts-more-alone", messages: shortMessages }));
    expect(error.status).toBe(400);
    expect(error.param).toBe("messages");
    expect(called()).toEqual(["context-400"]);
  });

  test("a context fallback that fails: the next one takes it, as a fallback would", async () => {
    const completion = await openai.chat.completions.create({ model: "first-fails", messages: longMessages });
    expect(completion.model).toBe("long");
    expect(called()).toEqual(["fail-500", "usage-300-7"]);
    const text = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(text).toContain('sluice_fallbacks_total{model="first-fails",fallback="long-failing"}');
    expect(text).toContain('sluice_fallbacks_total{model="long-failing",fallback="long"}');
  });

  test("the Responses and Messages APIs move the same way", async () => {
    const input = longMessages[0]?.content as string;
    const response = await openai.responses.create({ model: "short", input });
    expect(response.model).toBe("long");
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
    const message = await anthropic.messages.create({ model: "short", max_tokens: 8, messages: [{ role: "user", content: input }] });
    expect(message.model).toBe("long");
    expect(called()).toEqual(["usage-300-7", "usage-300-7"]);
  });

  test("100 concurrent requests, half too long: each answered by the model it fits, every slot and lease given back", async () => {
    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, index) =>
        openai.chat.completions.create({ model: "short", messages: index % 2 === 0 ? longMessages : shortMessages, stream: index % 4 < 2 }),
      ),
    );
    const models: string[] = [];
    for (const answer of answers) {
      if (Symbol.asyncIterator in answer) for await (const chunk of answer) models.push(chunk.model);
      else models.push(answer.model);
    }
    expect(new Set(models)).toEqual(new Set(["short", "long"]));
    expect(called().filter((model) => model === "usage-300-7").length).toBe(50);
    expect(called().filter((model) => model === "usage-10-5").length).toBe(50);
    await eventually(() => sluice.server.admission.inFlight() === 0);
    const text = await (await fetch(`${sluice.url}/metrics`)).text();
    for (const model of ["short", "long"]) expect(text).toContain(`sluice_in_flight{model="${model}"} 0`);
  });
});
