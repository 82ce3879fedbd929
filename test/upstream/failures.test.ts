import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "../fake-upstream";
import { eventually, fakeModel, readSse, startSluice, type TestSluice } from "../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  upstream = startFakeUpstream();
  const models = ["fail-500", "overloaded-429", "context-400", "bad-400", "html-200", "error-200", "midstream-error", "malformed-stream", "no-done"].map((id) =>
    fakeModel(upstream.url, id),
  );
  sluice = await startSluice({
    models: [
      ...models,
      fakeModel(upstream.url, "hang", "hang", { timeout_ms: 300 }),
      fakeModel(upstream.url, "slow", "slow-40-25"),
      fakeModel(upstream.url, "wide", "slow-1-400"),
      { id: "refused", backend: "openai", base_url: "http://127.0.0.1:1/v1" },
    ],
    plans: [{ id: "default", models: ["*"] }],
  });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});
beforeEach(() => upstream.reset());

const messages = [{ role: "user", content: "hi" }];

async function errorOf(response: Response) {
  const body = (await response.json()) as { error: { code: string; param: string | null } };
  return { status: response.status, code: body.error.code, param: body.error.param };
}

function rowFor(response: Response) {
  const requestId = response.headers.get("x-request-id");
  return sluice.ledgerRows().find((row) => row.request_id === requestId);
}

describe("failures before the first byte", () => {
  for (const stream of [false, true]) {
    const mode = stream ? "streamed" : "whole";
    test(`${mode}: upstream 5xx is 502 upstream_error, with a ledger row`, async () => {
      const response = await sluice.post("/v1/chat/completions", { model: "fail-500", messages, stream });
      expect(await errorOf(response)).toMatchObject({ status: 502, code: "upstream_error" });
      expect(rowFor(response)).toMatchObject({ outcome: "upstream_error", error_code: "upstream_error", completion_tokens: 0 });
    });

    test(`${mode}: an upstream that hangs times out as 502 upstream_error and is aborted`, async () => {
      const response = await sluice.post("/v1/chat/completions", { model: "hang", messages, stream });
      expect(await errorOf(response)).toMatchObject({ status: 502, code: "upstream_error" });
      await eventually(() => upstream.inFlight === 0);
      expect(upstream.aborted).toBe(1);
    });

    test(`${mode}: a refused connection is 502 upstream_error and leaves no ledger row`, async () => {
      const response = await sluice.post("/v1/chat/completions", { model: "refused", messages, stream });
      expect(await errorOf(response)).toMatchObject({ status: 502, code: "upstream_error" });
      expect(rowFor(response)).toBeUndefined();
    });

    test(`${mode}: an upstream 400 about context length is 400 invalid_request on messages`, async () => {
      const response = await sluice.post("/v1/chat/completions", { model: "context-400", messages, stream });
      expect(await errorOf(response)).toEqual({ status: 400, code: "invalid_request", param: "messages" });
    });

    test(`${mode}: an upstream 429 is 503 model_unavailable with the upstream's Retry-After`, async () => {
      const response = await sluice.post("/v1/chat/completions", { model: "overloaded-429", messages, stream });
      expect(response.headers.get("retry-after")).toBe("7");
      expect(await errorOf(response)).toMatchObject({ status: 503, code: "model_unavailable" });
    });
  }

  test("another upstream 400 is passed on as invalid_request with the upstream's reason", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "bad-400", messages });
    const body = (await response.json()) as { error: { message: string; code: string } };
    expect(response.status).toBe(400);
    expect(body.error.message).toContain("json_schema is invalid");
  });

  test("a 200 with an HTML body is 502 upstream_error", async () => {
    expect(await errorOf(await sluice.post("/v1/chat/completions", { model: "html-200", messages }))).toMatchObject({ status: 502, code: "upstream_error" });
  });

  test("a 200 whose body is an error is 502 upstream_error with the upstream's reason, as a stream's error event is", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "error-200", messages });
    expect(response.status).toBe(502);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("upstream_error");
    expect(body.error.message).toContain("CUDA out of memory");
  });

  test("the SDK sees InternalServerError-family errors for 502 and retries them", async () => {
    const error = await sluice
      .client({ maxRetries: 2 })
      .chat.completions.create({ model: "fail-500", messages: [{ role: "user", content: "x" }] })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect(upstream.bodies.length).toBe(3);
  });
});

describe("failures after the stream started", () => {
  for (const model of ["midstream-error", "malformed-stream", "no-done"]) {
    test(`${model}: a final error event, then [DONE], and the partial answer is billed`, async () => {
      const response = await sluice.post("/v1/chat/completions", { model, messages, stream: true });
      expect(response.status).toBe(200);
      const events = await readSse(response);
      expect(events.at(-1)).toBe("[DONE]");
      const last = events.at(-2) as { error: { code: string; type: string; message: string } };
      expect(last.error.code).toBe("upstream_error");
      expect(last.error.message.length).toBeGreaterThan(0);
      const row = rowFor(response)!;
      expect(row).toMatchObject({ outcome: "upstream_error", usage_source: "tokenizer" });
      expect(row.completion_tokens).toBeGreaterThan(0);
    });
  }

  test("the SDK raises an APIError for an error event mid-stream", async () => {
    const stream = await sluice.client().chat.completions.create({ model: "midstream-error", messages: [{ role: "user", content: "x" }], stream: true });
    const error = await (async () => {
      for await (const _ of stream) {
        // read until the error
      }
    })().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.APIError);
  });
});

describe("the client leaves", () => {
  /** Opens a slow stream, reads it up to its fourth word, then leaves (aborts the request). */
  async function streamThenLeave(): Promise<Response> {
    const controller = new AbortController();
    const response = await fetch(`${sluice.baseURL}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${sluice.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "slow", messages, stream: true }),
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    let received = "";
    while (!received.includes("word3")) received += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
    return response;
  }

  test("a streamed answer cancelled by the client aborts the upstream and is billed for what it produced", async () => {
    const response = await streamThenLeave();
    await eventually(() => upstream.inFlight === 0);
    expect(upstream.aborted).toBe(1);
    await eventually(() => rowFor(response) !== undefined);
    const row = rowFor(response)!;
    expect(row.outcome).toBe("client_disconnected");
    expect(row.completion_tokens).toBeGreaterThanOrEqual(4);
    expect(row.completion_tokens).toBeLessThan(40);
  });

  test("a cancelled stream whose ledger row cannot be written still lets the upstream go, frees its slot and is logged", async () => {
    sluice.database.sqlite.run(
      "CREATE TRIGGER refuse_disconnects BEFORE INSERT ON usage_ledger_inbox WHEN NEW.outcome = 'client_disconnected' BEGIN SELECT RAISE(ABORT, 'disk full'); END",
    );
    const streamsLogged = async () => {
      const text = await (await fetch(`${sluice.url}/metrics`)).text();
      return Number(/sluice_request_duration_seconds_count\{route="\/v1\/chat\/completions",model="slow"\} (\d+)/.exec(text)?.[1] ?? 0);
    };
    try {
      const before = await streamsLogged();
      const response = await streamThenLeave();
      await eventually(() => upstream.inFlight === 0 && sluice.server.admission.inFlight() === 0);
      expect(upstream.aborted).toBe(1);
      expect(sluice.server.admission.reservedTokens()).toBe(0);
      let logged = before;
      for (let attempt = 0; attempt < 100 && logged === before; attempt++) {
        await Bun.sleep(20);
        logged = await streamsLogged();
      }
      expect(logged).toBe(before + 1);
      expect(rowFor(response)).toBeUndefined();
    } finally {
      sluice.database.sqlite.run("DROP TRIGGER refuse_disconnects");
    }
  });

  test("a whole answer whose client leaves aborts the upstream and leaves a ledger row", async () => {
    const controller = new AbortController();
    const pending = fetch(`${sluice.baseURL}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${sluice.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "slow", messages }),
      signal: controller.signal,
    }).catch(() => undefined);
    await eventually(() => upstream.inFlight === 1);
    controller.abort();
    await pending;
    await eventually(() => upstream.inFlight === 0);
    await eventually(() => sluice.ledgerRows().some((row) => row.outcome === "client_disconnected" && row.model === "slow" && row.completion_tokens === 0));
  });
});
