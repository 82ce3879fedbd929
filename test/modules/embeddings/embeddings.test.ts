// POST /v1/embeddings through the official OpenAI SDK: the caller's key, plan, quotas and concurrency caps, the
// model's queue, one ledger row of prompt tokens; never a fallback's vectors.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI, { APIError } from "openai";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { eventually, fakeModel, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
let openai: OpenAI;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice({
    models: [
      fakeModel(upstream.url, "embedder", "embed-7", { aliases: ["text-embedding-3-small"] }),
      fakeModel(upstream.url, "uncounted", "embed-no-usage"),
      fakeModel(upstream.url, "short", "embed-one-short"),
      fakeModel(upstream.url, "failing", "fail-500", { fallbacks: ["embedder"] }),
      fakeModel(upstream.url, "disabled", "embed-7", { enabled: false, fallbacks: ["embedder"] }),
      fakeModel(upstream.url, "narrow", "embed-7", { max_concurrency: 2, queue_size: 500 }),
      fakeModel(upstream.url, "hanging", "hang", { timeout_ms: 300 }),
      { id: "sluice-demo", backend: "demo" },
      fakeModel(upstream.url, "elsewhere", "embed-7"),
    ],
    plans: [
      { id: "default", models: ["embedder", "uncounted", "short", "failing", "disabled", "narrow", "hanging", "sluice-demo"] },
      { id: "tiny", models: ["*"], tokens_per_5h: 20 },
    ],
  });
  openai = sluice.client();
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});
beforeEach(() => upstream.reset());

function rowOf(requestId: string) {
  return sluice.ledgerRows().find((row) => row.request_id === requestId);
}

async function failure(promise: Promise<unknown>): Promise<APIError> {
  const caught = await promise.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(caught).toBeInstanceOf(APIError);
  return caught as APIError;
}

describe("answers", () => {
  test("a text: one vector, the model as the caller named it, the upstream's prompt tokens in usage and in the ledger", async () => {
    const { data: answer, response } = await openai.embeddings.create({ model: "text-embedding-3-small", input: "hello world" }).withResponse();
    expect(answer).toEqual({
      object: "list",
      data: [{ object: "embedding", index: 0, embedding: [0, 11, 0.25, -0.5] }],
      model: "text-embedding-3-small",
      usage: { prompt_tokens: 7, total_tokens: 7 },
    });
    // The SDK asks for base64 (and decodes it): the upstream got that, and its own model name.
    expect(upstream.bodies).toEqual([{ model: "embed-7", input: "hello world", encoding_format: "base64" }]);
    const requestId = response.headers.get("x-request-id") as string;
    await eventually(() => rowOf(requestId) !== undefined);
    expect(rowOf(requestId)).toMatchObject({ model: "embedder", prompt_tokens: 7, completion_tokens: 0, outcome: "completed", usage_source: "upstream" });
    expect(sluice.server.admission.inFlight()).toBe(0);
  });

  test("a list of texts, and token ids: a vector each, by index; floats when asked for floats", async () => {
    const texts = await openai.embeddings.create({ model: "embedder", input: ["a", "bb", "ccc"], encoding_format: "float" });
    expect(texts.data.map((item) => item.embedding)).toEqual([
      [0, 1, 0.25, -0.5],
      [1, 2, 0.25, -0.5],
      [2, 3, 0.25, -0.5],
    ]);
    const ids = await openai.embeddings.create({ model: "embedder", input: [[1, 2, 3], [4]], dimensions: 4, user: "u1" });
    expect(ids.data.map((item) => item.embedding[1])).toEqual([3, 1]);
    expect(upstream.bodies[1]).toEqual({ model: "embed-7", input: [[1, 2, 3], [4]], encoding_format: "base64", dimensions: 4, user: "u1" });
  });

  test("an upstream that reports no usage: the tokenizer counts the input", async () => {
    const { data: answer, response } = await openai.embeddings.create({ model: "uncounted", input: ["hello world", "hello"] }).withResponse();
    expect(answer.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
    const requestId = response.headers.get("x-request-id") as string;
    await eventually(() => rowOf(requestId) !== undefined);
    expect(rowOf(requestId)).toMatchObject({ prompt_tokens: 3, usage_source: "tokenizer" });
  });
});

describe("refusals", () => {
  test("bad input is 400 with the parameter named; a model outside the plan is 404; a chat-only model is 400", async () => {
    for (const input of ["", [], [""], [[]], [1, "a"], 5]) {
      const error = await failure(openai.embeddings.create({ model: "embedder", input: input as string }));
      expect(error.status).toBe(400);
      expect(error.param).toBe("input");
    }
    const many = await failure(openai.embeddings.create({ model: "embedder", input: Array(2049).fill("a") }));
    expect([many.status, many.param]).toEqual([400, "input"]);
    expect(many.message).toContain("at most 2048");
    const format = await failure(openai.embeddings.create({ model: "embedder", input: "a", encoding_format: "int8" as "float" }));
    expect([format.status, format.param]).toEqual([400, "encoding_format"]);
    expect((await failure(openai.embeddings.create({ model: "elsewhere", input: "a" }))).status).toBe(404);
    const demo = await failure(openai.embeddings.create({ model: "sluice-demo", input: "a" }));
    expect([demo.status, demo.param]).toEqual([400, "model"]);
    expect(upstream.bodies).toEqual([]);
    const unauthenticated = new OpenAI({ baseURL: sluice.baseURL, apiKey: "sk-sluice-wrong", maxRetries: 0 });
    expect((await failure(unauthenticated.embeddings.create({ model: "embedder", input: "a" }))).status).toBe(401);
  });

  test("never a fallback: a failing model is 502 and a disabled one 503, whatever their fallbacks", async () => {
    const failing = await failure(openai.embeddings.create({ model: "failing", input: "a" }));
    expect([failing.status, failing.code]).toEqual([502, "upstream_error"]);
    const disabled = await failure(openai.embeddings.create({ model: "disabled", input: "a" }));
    expect([disabled.status, disabled.code]).toEqual([503, "model_unavailable"]);
    expect(upstream.bodies.map((body) => body.model)).toEqual(["fail-500"]);
  });

  test("an answer without a vector for each input is 502; a model past its time limit is 502; nothing stays held", async () => {
    expect((await failure(openai.embeddings.create({ model: "short", input: ["a", "b"] }))).status).toBe(502);
    expect((await failure(openai.embeddings.create({ model: "hanging", input: "a" }))).status).toBe(502);
    expect(sluice.server.admission.inFlight()).toBe(0);
    expect(sluice.server.admission.reservedTokens()).toBe(0);
  });

  test("the organization's 5-hour quota counts embeddings: refused with 429 once used up", async () => {
    const { key } = await sluice.addOrganization("tiny co", { plan: "tiny" });
    const tiny = new OpenAI({ baseURL: sluice.baseURL, apiKey: key, maxRetries: 0 });
    // 7 tokens an answer against a quota of 20: two fit with room for another's estimate, then none.
    const statuses: number[] = [];
    for (let index = 0; index < 5; index++) {
      statuses.push(
        await tiny.embeddings.create({ model: "embedder", input: "abcd" }).then(
          () => 200,
          (error: APIError) => error.status ?? 0,
        ),
      );
    }
    expect(statuses.slice(0, 2)).toEqual([200, 200]);
    expect(statuses.at(-1)).toBe(429);
    const refused = statuses.filter((status) => status === 429).length;
    expect(await (await fetch(`${sluice.url}/metrics`)).text()).toContain(`sluice_quota_rejections_total{kind="five_hour"} ${refused}\n`);
  });
});

test("200 concurrent requests through a model of 2 slots: all answered, never more than 2 upstream, every row written, nothing held", async () => {
  const answers = await Promise.all(
    Array.from({ length: 200 }, (_, index) => openai.embeddings.create({ model: "narrow", input: `text ${index}` }).withResponse()),
  );
  expect(answers.every(({ data }) => data.data.length === 1)).toBe(true);
  expect(upstream.maxInFlight).toBeLessThanOrEqual(2);
  await eventually(() => answers.every(({ response }) => rowOf(response.headers.get("x-request-id") as string) !== undefined));
  expect(sluice.server.admission.inFlight()).toBe(0);
  const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
  expect(metrics).toContain('sluice_requests_total{route="/v1/embeddings",model="narrow",status="200",code=""} 200');
  expect(metrics).toContain('sluice_in_flight{model="narrow"} 0');
});
