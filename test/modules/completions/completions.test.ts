// POST /v1/completions, the legacy text completions that IDEs' autocomplete speaks, through the OpenAI SDK.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { capturingLogger, failureOf, eventually, fakeModel, startSluice, testActor, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;
let openai: OpenAI;
const { logger, lines: logLines } = capturingLogger();

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice(
    {
      models: [
        fakeModel(upstream.url, "coder", "usage-20-4"),
        fakeModel(upstream.url, "small", "usage-20-4", { context_window: 64, max_output_tokens: 32 }),
        fakeModel(upstream.url, "failing", "fail-500", { fallbacks: ["coder"] }),
        fakeModel(upstream.url, "slow", "hang", { timeout_ms: 200 }),
        fakeModel(upstream.url, "narrow", "usage-20-4", { max_concurrency: 2, queue_size: 500 }),
        fakeModel(upstream.url, "secret", "usage-20-4"),
        { id: "sluice-demo", backend: "demo", stream_delay_ms: 0 },
      ],
      plans: [
        { id: "default", models: ["coder", "small", "failing", "slow", "narrow", "sluice-demo"], tokens_per_5h: 1_000_000 },
        { id: "tiny", models: ["coder"], tokens_per_5h: 30 },
      ],
      safety: { enabled: true, rules: [{ id: "R-SECRET", name: "secrets", patterns: ["\\bBEGIN PRIVATE KEY\\b"] }] },
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

function rowsOf(requestId: string) {
  return sluice.ledgerRows().filter((row) => row.request_id === requestId);
}

describe("text completions", () => {
  test("a whole completion: the upstream's /completions gets the prompt, the suffix and the fields; the caller a text_completion; one ledger row", async () => {
    const { data: completion, response } = await openai.completions
      .create({ model: "coder", prompt: "def add(a, b):", suffix: "\n\nprint(add(1, 2))", max_tokens: 24, temperature: 0.2, stop: ["\n\n"], seed: 7 })
      .withResponse();
    expect(completion).toMatchObject({
      object: "text_completion",
      model: "coder",
      choices: [{ index: 0, text: "P:def add(a, b): S:\n\nprint(add(1, 2))", finish_reason: "length", logprobs: null }],
      usage: { prompt_tokens: 20, completion_tokens: 4, total_tokens: 24 },
    });
    expect(completion.id).toMatch(/^cmpl-/);
    expect(upstream.requests.map((request) => request.path)).toEqual(["/v1/completions"]);
    expect(upstream.bodies).toEqual([
      { model: "usage-20-4", prompt: "def add(a, b):", suffix: "\n\nprint(add(1, 2))", max_tokens: 24, temperature: 0.2, stop: ["\n\n"], seed: 7 },
    ]);
    const requestId = response.headers.get("x-request-id") as string;
    await eventually(() => rowsOf(requestId).length === 1);
    expect(rowsOf(requestId)).toMatchObject([{ model: "coder", outcome: "completed", prompt_tokens: 20, completion_tokens: 4, usage_source: "upstream" }]);
    await eventually(() => logLines.some((line) => line.request_id === requestId));
    expect(logLines.find((line) => line.request_id === requestId)).toMatchObject({ route: "/v1/completions", model: "coder", status: 200 });
    expect(await (await fetch(`${sluice.url}/metrics`)).text()).toContain('sluice_requests_total{route="/v1/completions",model="coder",status="200",code=""}');
  });

  test("OpenAI's default of 16 tokens when max_tokens is left out; a prompt given as an array of one string", async () => {
    await openai.completions.create({ model: "coder", prompt: ["x = "] });
    expect(upstream.bodies).toEqual([{ model: "usage-20-4", prompt: "x = ", max_tokens: 16 }]);
  });

  test("a stream: text chunks, the finish, the usage chunk when asked for, [DONE]; every chunk a text_completion", async () => {
    const stream = await openai.completions.create({ model: "coder", prompt: "const x =", stream: true, stream_options: { include_usage: true } });
    const chunks: OpenAI.Completion[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.every((chunk) => chunk.object === "text_completion" && chunk.model === "coder")).toBe(true);
    expect(chunks.map((chunk) => chunk.choices[0]?.text ?? "").join("")).toBe("P:const x =");
    expect(chunks.map((chunk) => chunk.choices[0]?.finish_reason ?? null).filter(Boolean)).toEqual(["length"]);
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 20, completion_tokens: 4, total_tokens: 24 } });
    expect(upstream.bodies[0]).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    // Without include_usage, no usage chunk.
    const plain = await openai.completions.create({ model: "coder", prompt: "y", stream: true });
    const last: OpenAI.Completion[] = [];
    for await (const chunk of plain) last.push(chunk);
    expect(last.every((chunk) => chunk.choices.length === 1 && !chunk.usage)).toBe(true);
  });

  test("the demo model answers a prompt too", async () => {
    const completion = await openai.completions.create({ model: "sluice-demo", prompt: "Complete this line", max_tokens: 200 });
    expect(completion.choices[0]?.text).toContain("Complete this line");
    expect(completion.usage?.prompt_tokens).toBeGreaterThan(0);
  });

  test("bad input: a 400 naming the field, nothing sent upstream", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ model: "coder" }, "prompt"],
      [{ model: "coder", prompt: [1, 2, 3] }, "prompt"],
      [{ model: "coder", prompt: ["a", "b"] }, "prompt"],
      [{ model: "coder", prompt: "x", n: 2 }, "n"],
      [{ model: "coder", prompt: "x", best_of: 3 }, "best_of"],
      [{ model: "coder", prompt: "x", max_tokens: 0 }, "max_tokens"],
      [{ model: "coder", prompt: "x", logprobs: 9 }, "logprobs"],
      [{ model: "coder", prompt: "x", stop: ["a", "b", "c", "d", "e"] }, "stop"],
      [{ model: "coder", prompt: 7 }, "prompt"],
    ];
    for (const [body, param] of cases) {
      const error = await failureOf(openai.completions.create(body as never));
      expect({ status: error.status, param: error.param }).toEqual({ status: 400, param });
    }
    expect(upstream.bodies).toEqual([]);
  });

  test("a prompt too long for the model: 400 on prompt; a model outside the plan: 404; a revoked key: 401", async () => {
    const long = await failureOf(openai.completions.create({ model: "small", prompt: Array.from({ length: 200 }, (_, index) => `w${index}`).join(" ") }));
    expect({ status: long.status, param: long.param }).toEqual({ status: 400, param: "prompt" });
    expect((await failureOf(openai.completions.create({ model: "secret", prompt: "x" }))).status).toBe(404);
    const { key, keyId } = await sluice.addOrganization("revoked-co");
    await sluice.keys.revoke(keyId, testActor);
    const revoked = new OpenAI({ baseURL: sluice.baseURL, apiKey: key, maxRetries: 0 });
    expect((await failureOf(revoked.completions.create({ model: "coder", prompt: "x" }))).status).toBe(401);
    expect(upstream.bodies).toEqual([]);
  });

  test("the red-line rules check the prompt and the suffix: a refusal in the text completion's shape, never sent upstream", async () => {
    for (const body of [
      { prompt: "-----BEGIN PRIVATE KEY-----", suffix: "" },
      { prompt: "x = ", suffix: "-----BEGIN PRIVATE KEY-----" },
    ]) {
      const completion = await openai.completions.create({ model: "coder", ...body });
      expect(completion.choices[0]?.finish_reason).toBe("content_filter");
      expect(completion.choices[0]?.text).toContain("R-SECRET");
    }
    expect(upstream.bodies).toEqual([]);
  });

  test("the 5-hour quota: 429 with the x-ratelimit headers", async () => {
    const { key } = await sluice.addOrganization("tiny-co", { plan: "tiny" });
    const tiny = new OpenAI({ baseURL: sluice.baseURL, apiKey: key, maxRetries: 0 });
    const first = await tiny.completions.create({ model: "coder", prompt: "x", max_tokens: 4 }).withResponse();
    expect(first.response.headers.get("x-ratelimit-limit-tokens")).toBe("30");
    const refused = await failureOf(tiny.completions.create({ model: "coder", prompt: "x", max_tokens: 16 }));
    expect(refused.status).toBe(429);
    expect(refused.headers?.get("retry-after")).toBeTruthy();
  });

  test("a failing model moves to its fallback; the upstream's time limit is a 502 with no answer billed", async () => {
    const moved = await openai.completions.create({ model: "failing", prompt: "x" });
    expect(moved.model).toBe("coder");
    expect(upstream.requests.map((request) => request.path)).toEqual(["/v1/completions", "/v1/completions"]);
    const timedOut = await failureOf(openai.completions.create({ model: "slow", prompt: "x" }));
    expect(timedOut.status).toBe(502);
  });

  test("200 concurrent completions, half streamed, through a model of 2 slots: all answered, the cap held, every slot and row", async () => {
    const answers = await Promise.all(
      Array.from({ length: 200 }, async (_, index) => {
        if (index % 2 === 0) return (await openai.completions.create({ model: "narrow", prompt: `p${index}` })).choices[0]?.text;
        let text = "";
        for await (const chunk of await openai.completions.create({ model: "narrow", prompt: `p${index}`, stream: true })) text += chunk.choices[0]?.text ?? "";
        return text;
      }),
    );
    expect(answers).toEqual(Array.from({ length: 200 }, (_, index) => `P:p${index}`));
    expect(upstream.maxInFlight).toBeLessThanOrEqual(2);
    await eventually(() => sluice.server.admission.inFlight() === 0);
    await eventually(() => sluice.ledgerRows().filter((row) => row.model === "narrow").length === 200);
  });
});
