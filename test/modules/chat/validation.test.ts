import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, schemaErrors, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice(
    {
      models: [
        fakeModel(upstream.url, "echo", "echo", { context_window: 2048, max_output_tokens: 1024 }),
        fakeModel(upstream.url, "off", "echo", { enabled: false }),
        fakeModel(upstream.url, "premium", "echo"),
      ],
      plans: [
        { id: "default", models: ["echo", "off"] },
        { id: "gold", models: ["*"] },
      ],
    },
    { maxBodyBytes: 64 * 1024 },
  );
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

const user = [{ role: "user", content: "hi" }];

async function expectError(response: Response, status: number, code: string, param: string | null) {
  const body = (await response.json()) as { error: { code: string; param: string | null; message: string; type: string } };
  expect({ status: response.status, code: body.error.code, param: body.error.param }).toEqual({ status, code, param });
  expect(schemaErrors("ErrorResponse", body)).toEqual([]);
  expect(body.error.message.length).toBeGreaterThan(10);
  expect(response.headers.get("x-request-id")).toMatch(/^req_/);
  return body.error;
}

describe("request validation (spec 2.3 and 8): 400 invalid_request naming the field as OpenAI does", () => {
  const cases: [string, unknown, string | null][] = [
    ["missing model", { messages: user }, "model"],
    ["empty model", { model: "", messages: user }, "model"],
    ["model not a string", { model: 5, messages: user }, "model"],
    ["missing messages", { model: "echo" }, "messages"],
    ["empty messages", { model: "echo", messages: [] }, "messages"],
    ["messages not an array", { model: "echo", messages: "hi" }, "messages"],
    ["message without role", { model: "echo", messages: [{ content: "x" }] }, "messages[0].role"],
    ["empty role", { model: "echo", messages: [user[0], { role: "", content: "x" }] }, "messages[1].role"],
    ["content a number", { model: "echo", messages: [{ role: "user", content: 3 }] }, "messages[0].content"],
    ["content part without type", { model: "echo", messages: [{ role: "user", content: [{ text: "x" }] }] }, "messages[0].content[0].type"],
    ["temperature above 2", { model: "echo", messages: user, temperature: 2.5 }, "temperature"],
    ["temperature below 0", { model: "echo", messages: user, temperature: -0.1 }, "temperature"],
    ["temperature a string", { model: "echo", messages: user, temperature: "hot" }, "temperature"],
    ["top_p above 1", { model: "echo", messages: user, top_p: 1.01 }, "top_p"],
    ["max_tokens 0", { model: "echo", messages: user, max_tokens: 0 }, "max_tokens"],
    ["max_tokens fractional", { model: "echo", messages: user, max_tokens: 2.5 }, "max_tokens"],
    ["max_tokens huge", { model: "echo", messages: user, max_tokens: 1e300 }, "max_tokens"],
    ["max_completion_tokens 0", { model: "echo", messages: user, max_completion_tokens: 0 }, "max_completion_tokens"],
    ["n 0", { model: "echo", messages: user, n: 0 }, "n"],
    ["n 2", { model: "echo", messages: user, n: 2 }, "n"],
    ["stream a string", { model: "echo", messages: user, stream: "yes" }, "stream"],
    [
      "stream_options.include_usage a string",
      { model: "echo", messages: user, stream: true, stream_options: { include_usage: "yes" } },
      "stream_options.include_usage",
    ],
    ["max_tokens above the model's maximum", { model: "echo", messages: user, max_tokens: 1025 }, "max_tokens"],
    ["max_completion_tokens above the maximum", { model: "echo", messages: user, max_completion_tokens: 5000 }, "max_completion_tokens"],
    ["both limits, different", { model: "echo", messages: user, max_tokens: 10, max_completion_tokens: 11 }, "max_completion_tokens"],
    ["body an array", [1, 2], null],
    ["body a string", '"text"', null],
  ];
  for (const [name, body, param] of cases) {
    test(name, async () => {
      const before = upstream.bodies.length;
      await expectError(await sluice.post("/v1/chat/completions", body), 400, "invalid_request", param);
      expect(upstream.bodies.length).toBe(before);
    });
  }

  test("null for an optional field means absent, as with OpenAI", async () => {
    const response = await sluice.post("/v1/chat/completions", {
      model: "echo",
      messages: user,
      temperature: null,
      max_tokens: null,
      stream: null,
      n: null,
      top_p: null,
    });
    expect(response.status).toBe(200);
  });

  test("additional properties on the body and on messages are accepted", async () => {
    const response = await sluice.post("/v1/chat/completions", {
      model: "echo",
      messages: [{ role: "user", content: "x", name: "bob" }],
      whatever: { nested: true },
    });
    expect(response.status).toBe(200);
  });

  test("malformed JSON", async () => {
    await expectError(await sluice.post("/v1/chat/completions", '{"model": "echo", '), 400, "invalid_request", null);
  });

  test("a non-JSON content type", async () => {
    await expectError(
      await sluice.post("/v1/chat/completions", JSON.stringify({ model: "echo", messages: user }), { "content-type": "text/plain" }),
      400,
      "invalid_request",
      null,
    );
  });

  test("an oversized body is 413 in the OpenAI format", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "echo", messages: [{ role: "user", content: "x".repeat(70 * 1024) }] });
    await expectError(response, 413, "request_too_large", null);
  });

  test("context too long: the prompt alone leaves no room", async () => {
    const error = await expectError(
      await sluice.post("/v1/chat/completions", { model: "echo", messages: [{ role: "user", content: "lorem ipsum ".repeat(2000) }] }),
      400,
      "invalid_request",
      "messages",
    );
    expect(error.message).toContain("maximum context length is 2048 tokens");
  });

  test("context too long: an explicit max_tokens plus the prompt exceeds the window", async () => {
    await expectError(
      await sluice.post("/v1/chat/completions", { model: "echo", messages: [{ role: "user", content: "lorem ipsum ".repeat(600) }], max_tokens: 1000 }),
      400,
      "invalid_request",
      "messages",
    );
  });

  test("the OpenAI SDK raises BadRequestError with the param", async () => {
    const error = await sluice
      .client()
      .chat.completions.create({ model: "echo", messages: [{ role: "user", content: "x" }], temperature: 9 })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("temperature");
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("invalid_request");
  });
});

describe("models in chat requests", () => {
  test("an unknown model is 404 model_not_found", async () => {
    await expectError(await sluice.post("/v1/chat/completions", { model: "nope", messages: user }), 404, "model_not_found", "model");
  });

  test("a model outside the caller's plan is 404 model_not_found", async () => {
    await expectError(await sluice.post("/v1/chat/completions", { model: "premium", messages: user }), 404, "model_not_found", "model");
    const gold = await sluice.addOrganization("gold-org", { plan: "gold" });
    const response = await sluice.post("/v1/chat/completions", { model: "premium", messages: user }, { authorization: `Bearer ${gold.key}` });
    expect(response.status).toBe(200);
  });

  test("a disabled model is 503 model_unavailable with Retry-After", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "off", messages: user });
    expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(0);
    await expectError(response, 503, "model_unavailable", null);
  });
});

describe("routes", () => {
  test("an unknown route is a 404 in the OpenAI error format", async () => {
    const response = await fetch(`${sluice.url}/v1/nothing-here`);
    await expectError(response, 404, "not_found", null);
  });

  test("GET /openapi.json describes the interface as OpenAPI 3.1.0, version 0.1.0", async () => {
    const document = (await (await fetch(`${sluice.url}/openapi.json`)).json()) as {
      openapi: string;
      info: { version: string };
      paths: Record<string, unknown>;
    };
    expect(document.openapi).toBe("3.1.0");
    expect(document.info.version).toBe("0.1.0");
    expect(Object.keys(document.paths).sort()).toEqual([
      "/v1/chat/completions",
      "/v1/completions",
      "/v1/embeddings",
      "/v1/messages",
      "/v1/messages/count_tokens",
      "/v1/models",
      "/v1/models/{model}",
      "/v1/responses",
    ]);
  });
});
