// Every error of the spec, reached through each API that runs a model, as each official client sees it: the same
// status codes and retry headers everywhere; OpenAI's error body for chat and Responses, Anthropic's for Messages.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "../fake-upstream";
import { fakeModel, httpPost, startSluice, type TestSluice } from "../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
let unsafe: TestSluice;
const keys: Record<string, string> = {};

beforeAll(async () => {
  upstream = startFakeUpstream();
  const models = [
    fakeModel(upstream.url, "ok", "usage-10-5"),
    fakeModel(upstream.url, "failing", "fail-500"),
    fakeModel(upstream.url, "disabled", "usage-10-5", { enabled: false }),
    fakeModel(upstream.url, "busy", "slow-50-20", { max_concurrency: 1, queue_size: 0 }),
  ];
  sluice = await startSluice(
    {
      models,
      plans: [
        { id: "default", models: ["*"] },
        { id: "tiny-5h", models: ["*"], tokens_per_5h: 5 },
        { id: "tiny-month", models: ["*"], tokens_per_month: 5 },
        { id: "no-models", models: ["ok"] },
      ],
    },
    { maxBodyBytes: 64 * 1024 },
  );
  keys.default = sluice.key;
  keys.fiveHour = (await sluice.addOrganization("five-hour", { plan: "tiny-5h" })).key;
  keys.month = (await sluice.addOrganization("month", { plan: "tiny-month" })).key;
  keys.waiting = (await sluice.addOrganization("waiting", { status: "waitlist" })).key;
  // A moderation service that does not answer: requests fail closed.
  unsafe = await startSluice({
    models: [fakeModel(upstream.url, "ok", "usage-10-5")],
    plans: [{ id: "default", models: ["*"] }],
    safety: { enabled: true, timeout_ms: 200, moderation_url: "http://127.0.0.1:9/v1/moderations", moderation_model: "omni-moderation-latest" },
  });
});
afterAll(async () => {
  await sluice.stop();
  await unsafe.stop();
  await upstream.stop();
});

type Api = "chat" | "responses" | "messages";
const apis: Api[] = ["chat", "responses", "messages"];

/** What a client saw: the error, and how many HTTP requests it sent for one call (retries included). */
interface Outcome {
  error: unknown;
  attempts: number;
}

async function call(api: Api, server: TestSluice, options: { key?: string; model?: string; text?: string; maxRetries?: number } = {}): Promise<Outcome> {
  let attempts = 0;
  const counting: typeof fetch = Object.assign((input: Parameters<typeof fetch>[0], init?: Parameters<typeof fetch>[1]) => {
    attempts++;
    return fetch(input, init);
  }, fetch);
  const apiKey = options.key ?? server.key;
  const model = options.model ?? "ok";
  const text = options.text ?? "hi";
  const maxRetries = options.maxRetries ?? 0;
  let error: unknown;
  try {
    if (api === "messages") {
      const client = new Anthropic({ baseURL: server.url, apiKey, maxRetries, fetch: counting });
      await client.messages.create({ model, max_tokens: 16, messages: [{ role: "user", content: text }] });
    } else {
      const client = new OpenAI({ baseURL: server.baseURL, apiKey, maxRetries, fetch: counting });
      if (api === "chat") await client.chat.completions.create({ model, messages: [{ role: "user", content: text }] });
      else await client.responses.create({ model, input: text });
    }
  } catch (caught) {
    error = caught;
  }
  return { error, attempts };
}

/** Checks the client's error: its class, status and, per API, OpenAI's code or Anthropic's error type. */
function expectError(api: Api, outcome: Outcome, status: number, code: string, anthropicType: string) {
  const error = outcome.error as { status?: number; code?: string; error?: { type?: string; error?: { type?: string } } };
  if (api === "messages") {
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect(error.status).toBe(status);
    expect(error.error).toMatchObject({ type: "error", error: { type: anthropicType } });
  } else {
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.status).toBe(status);
    expect(error.code).toBe(code);
  }
}

const sdkClass: Record<number, [unknown, unknown]> = {
  400: [OpenAI.BadRequestError, Anthropic.BadRequestError],
  401: [OpenAI.AuthenticationError, Anthropic.AuthenticationError],
  403: [OpenAI.PermissionDeniedError, Anthropic.PermissionDeniedError],
  404: [OpenAI.NotFoundError, Anthropic.NotFoundError],
  429: [OpenAI.RateLimitError, Anthropic.RateLimitError],
  502: [OpenAI.InternalServerError, Anthropic.InternalServerError],
  503: [OpenAI.InternalServerError, Anthropic.InternalServerError],
};

for (const api of apis) {
  describe(`${api}`, () => {
    const expectClass = (outcome: Outcome, status: number) => {
      const classes = sdkClass[status];
      if (classes) expect(outcome.error).toBeInstanceOf(api === "messages" ? classes[1] : classes[0]);
    };

    test("400 invalid_request, 401 invalid_api_key, 403 organization_inactive, 404 model_not_found", async () => {
      const bad = await call(api, sluice, { model: "" });
      expectError(api, bad, 400, "invalid_request", "invalid_request_error");
      expectClass(bad, 400);
      const wrongKey = await call(api, sluice, { key: "sk-sluice-wrong" });
      expectError(api, wrongKey, 401, "invalid_api_key", "authentication_error");
      expectClass(wrongKey, 401);
      const waiting = await call(api, sluice, { key: keys.waiting });
      expectError(api, waiting, 403, "organization_inactive", "permission_error");
      expectClass(waiting, 403);
      const unknown = await call(api, sluice, { model: "nope" });
      expectError(api, unknown, 404, "model_not_found", "not_found_error");
      expectClass(unknown, 404);
    });

    test("401 missing_api_key", async () => {
      const path = api === "chat" ? "/v1/chat/completions" : api === "responses" ? "/v1/responses" : "/v1/messages";
      const response = await httpPost(`${sluice.url}${path}`, JSON.stringify({ model: "ok" }), { "content-type": "application/json" });
      expect(response.status).toBe(401);
      const body = (await response.json()) as { error: { code?: string; type: string; message: string } };
      // The message says where the key goes, Anthropic's header included.
      expect(body.error.message).toContain("x-api-key");
      if (api === "messages") expect(body.error.type).toBe("authentication_error");
      else expect(body.error.code).toBe("missing_api_key");
    });

    test("413 request_too_large", async () => {
      const outcome = await call(api, sluice, { text: "x".repeat(70 * 1024) });
      expectError(api, outcome, 413, "request_too_large", "request_too_large");
    });

    test("429 rate_limit_exceeded and insufficient_quota: x-should-retry false, and the client does not retry", async () => {
      const fiveHour = await call(api, sluice, { key: keys.fiveHour, maxRetries: 3 });
      expectError(api, fiveHour, 429, "rate_limit_exceeded", "rate_limit_error");
      expectClass(fiveHour, 429);
      expect(fiveHour.attempts).toBe(1);
      const month = await call(api, sluice, { key: keys.month, maxRetries: 3 });
      expectError(api, month, 429, "insufficient_quota", "rate_limit_error");
      expect(month.attempts).toBe(1);
      const headers = (month.error as { headers: Headers }).headers;
      expect(headers.get("x-should-retry")).toBe("false");
      expect(Number(headers.get("retry-after"))).toBeGreaterThan(0);
    });

    test("502 upstream_error, 503 model_unavailable, 503 server_overloaded, 503 safety_unavailable, each with Retry-After where the spec wants it", async () => {
      const failing = await call(api, sluice, { model: "failing" });
      expectError(api, failing, 502, "upstream_error", "api_error");
      expectClass(failing, 502);
      const disabled = await call(api, sluice, { model: "disabled" });
      expectError(api, disabled, 503, "model_unavailable", "overloaded_error");
      expect((disabled.error as { headers: Headers }).headers.get("retry-after")).toBe("60");
      // The one slot of `busy` is held by a slow answer: the queue has no room.
      const holder = call(api, sluice, { model: "busy" });
      await Bun.sleep(100);
      const overloaded = await call(api, sluice, { model: "busy" });
      expectError(api, overloaded, 503, "server_overloaded", "overloaded_error");
      expect((overloaded.error as { headers: Headers }).headers.get("retry-after")).not.toBeNull();
      expect((await holder).error).toBeUndefined();
      const unsafeOutcome = await call(api, unsafe);
      expectError(api, unsafeOutcome, 503, "safety_unavailable", "overloaded_error");
      expect(sluice.server.admission.inFlight()).toBe(0);
    });
  });
}

// Bun's router serves the exact POST paths (src/http/answer-routes.ts); Elysia serves every other form of them.
describe("the answer routes in forms Bun's router does not take", () => {
  test("a trailing slash reaches the same handler; another method gets 404 in the API's own error format", async () => {
    for (const path of ["/v1/chat/completions", "/v1/responses", "/v1/messages"]) {
      const slashed = await fetch(`${sluice.url}${path}/`, {
        method: "POST",
        headers: { authorization: `Bearer ${sluice.key}`, "content-type": "application/json" },
        body: "{not json",
      });
      expect(slashed.status).toBe(400);
      expect(slashed.headers.get("x-request-id")).toMatch(/^req_/);
      const unknownMethod = await fetch(`${sluice.url}${path}`);
      expect(unknownMethod.status).toBe(404);
      const body = (await unknownMethod.json()) as Record<string, Record<string, string>>;
      if (path === "/v1/messages") expect(body).toMatchObject({ type: "error", error: { type: "not_found_error" } });
      else expect(body.error).toMatchObject({ code: "not_found", type: "invalid_request_error" });
      expect(body.error?.message).toContain(`GET ${path}`);
    }
  });
});
