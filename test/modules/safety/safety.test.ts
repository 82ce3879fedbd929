import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import type { ConfigFile } from "../../../src/config/schema";
import { startFakeModeration, type FakeModeration } from "../../fake-moderation";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import {
  eventually,
  fakeModel,
  readSse,
  type StreamChunk,
  repositoryRoot,
  schemaErrors,
  startSluice,
  temporaryDirectory,
  type TestSluice,
} from "../../helpers";

let upstream: FakeUpstream;
let moderation: FakeModeration;
let sluice: TestSluice;

const rules = [
  {
    id: "RL-3",
    name: "Weapons capable of mass casualties",
    patterns: ["(?i)\\bnerve agent\\b.*\\bsynthes"],
    categories: ["violence/graphic"],
    applies_to: ["input", "output"] as ("input" | "output")[],
  },
  { id: "RL-9", name: "Output only rule", patterns: ["forbidden-output-phrase"], applies_to: ["output"] as ("input" | "output")[] },
];

function configWith(safety: ConfigFile["safety"]): ConfigFile {
  return {
    models: [fakeModel(upstream.url, "echo"), fakeModel(upstream.url, "split-phrase"), fakeModel(upstream.url, "split-reasoning")],
    plans: [{ id: "default", models: ["*"], tokens_per_5h: 1_000_000, max_concurrency: 10 }],
    safety,
  };
}

beforeAll(async () => {
  upstream = startFakeUpstream();
  moderation = startFakeModeration();
  sluice = await startSluice(
    configWith({
      enabled: true,
      timeout_ms: 300,
      moderation_url: moderation.url,
      moderation_model: "omni-moderation-latest",
      moderation_api_key_env: "MODERATION_KEY",
      rules,
    }),
    { environment: { MODERATION_KEY: "mod-secret" } },
  );
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
  await moderation.stop();
});
beforeEach(() => {
  upstream.reset();
  moderation.mode = "ok";
  moderation.requests.length = 0;
});

const dangerous = [{ role: "user" as const, content: "Explain NERVE AGENT SYNTHESIS step by step" }];
const refusal = "This request was refused under red-line rule RL-3 (Weapons capable of mass casualties).";

function expectSettled() {
  expect(sluice.server.admission.inFlight()).toBe(0);
  expect(sluice.server.admission.reservedTokens()).toBe(0);
}

describe("input refusals", () => {
  test("whole: a normal chat.completion with finish_reason content_filter naming the rule; the upstream is never called", async () => {
    const completion = await sluice.client().chat.completions.create({ model: "echo", messages: dangerous });
    expect(schemaErrors("CreateChatCompletionResponse", completion)).toEqual([]);
    expect(completion.choices[0]!.finish_reason).toBe("content_filter");
    expect(completion.choices[0]!.message.content).toBe(refusal);
    expect(completion.usage!.prompt_tokens).toBeGreaterThan(5);
    expect(completion.usage!.completion_tokens).toBeGreaterThan(10);
    expect(upstream.bodies.length).toBe(0);
    const row = sluice.ledgerRows().at(-1) as unknown as { outcome: string; rule_id: string; prompt_tokens: number };
    expect(row).toMatchObject({ outcome: "content_filter", rule_id: "RL-3", prompt_tokens: completion.usage!.prompt_tokens });
    expectSettled();
  });

  test("streamed: role chunk, the refusal as content, finish content_filter, the usage chunk when asked, [DONE]", async () => {
    const response = await sluice.post("/v1/chat/completions", { model: "echo", messages: dangerous, stream: true, stream_options: { include_usage: true } });
    const events = await readSse(response);
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1) as StreamChunk[];
    for (const chunk of chunks) expect(schemaErrors("CreateChatCompletionStreamResponse", chunk)).toEqual([]);
    expect(chunks[0]!.choices[0]?.delta.role).toBe("assistant");
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("")).toBe(refusal);
    expect(chunks.at(-2)!.choices[0]?.finish_reason).toBe("content_filter");
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage?.completion_tokens).toBeGreaterThan(0);
    expect(upstream.bodies.length).toBe(0);
    expectSettled();
    const stream = await sluice.client().chat.completions.create({ model: "echo", messages: dangerous, stream: true });
    let finish: string | null | undefined;
    let text = "";
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(finish).toBe("content_filter");
    expect(text).toContain("Weapons capable of mass casualties");
  });

  test("every message is checked, content-part arrays included", async () => {
    const completion = await sluice.client().chat.completions.create({
      model: "echo",
      messages: [
        { role: "system", content: "You are helpful." },
        {
          role: "user",
          content: [
            { type: "text", text: "Tell me about" },
            { type: "text", text: "nerve agent synthesis" },
          ],
        },
      ],
    });
    expect(completion.choices[0]!.finish_reason).toBe("content_filter");
  });

  test("an output-only rule does not refuse input", async () => {
    const completion = await sluice.client().chat.completions.create({ model: "echo", messages: [{ role: "user", content: "say forbidden-output-phrase" }] });
    // The echo model repeats the request body, which contains the phrase: the answer is stopped instead.
    expect(completion.choices[0]!.finish_reason).toBe("content_filter");
    expect(completion.choices[0]!.message.content).toBe("This answer was stopped under red-line rule RL-9 (Output only rule).");
    expect(upstream.bodies.length).toBe(1);
  });
});

describe("output checks", () => {
  test("a phrase split across three upstream chunks is caught; the upstream is aborted; the stream ends with content_filter", async () => {
    const response = await sluice.post("/v1/chat/completions", {
      model: "split-phrase",
      messages: [{ role: "user", content: "hello" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const events = await readSse(response);
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1) as StreamChunk[];
    const contents = chunks.map((chunk) => chunk.choices[0]?.delta.content).filter((content) => content !== undefined);
    expect(contents).toEqual([
      "",
      "Reasoning done. The nerve ag",
      "ent is made by synth",
      "This answer was stopped under red-line rule RL-3 (Weapons capable of mass casualties).",
    ]);
    expect(chunks.at(-2)!.choices[0]?.finish_reason).toBe("content_filter");
    expect(chunks.at(-1)!.usage?.completion_tokens).toBeGreaterThan(0);
    await eventually(() => upstream.aborted === 1 && upstream.inFlight === 0);
    const row = sluice.ledgerRows().find((candidate) => candidate.request_id === response.headers.get("x-request-id")) as unknown as {
      outcome: string;
      rule_id: string;
    };
    expect(row).toMatchObject({ outcome: "content_filter", rule_id: "RL-3" });
    expectSettled();
  });

  test("reasoning is checked too", async () => {
    const stream = await sluice.client().chat.completions.create({ model: "split-reasoning", messages: [{ role: "user", content: "hello" }], stream: true });
    let finish: string | null | undefined;
    for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
    expect(finish).toBe("content_filter");
  });

  test("a whole answer is checked before it is returned and replaced by the refusal", async () => {
    const completion = await sluice.client().chat.completions.create({ model: "split-phrase", messages: [{ role: "user", content: "hello" }] });
    expect(completion.choices[0]!.finish_reason).toBe("content_filter");
    expect(completion.choices[0]!.message.content).toBe("This answer was stopped under red-line rule RL-3 (Weapons capable of mass casualties).");
    expect((completion.choices[0]!.message as unknown as { reasoning_content: unknown }).reasoning_content).toBeNull();
    expectSettled();
  });
});

describe("the external checker", () => {
  test("is asked about the input with its key and model; a flagged category maps to the rule that lists it", async () => {
    const completion = await sluice.client().chat.completions.create({ model: "echo", messages: [{ role: "user", content: "FLAGME please" }] });
    expect(completion.choices[0]!.finish_reason).toBe("content_filter");
    expect(completion.choices[0]!.message.content).toBe(refusal);
    expect(moderation.requests[0]).toEqual({ input: ["FLAGME please"], model: "omni-moderation-latest", authorization: "Bearer mod-secret" });
    expect(upstream.bodies.length).toBe(0);
    const ok = await sluice.client().chat.completions.create({ model: "echo", messages: [{ role: "user", content: "a kind question" }] });
    expect(ok.choices[0]!.finish_reason).toBe("stop");
  });

  for (const mode of ["down", "slow", "malformed", "wrong-shape", "redirect"] as const) {
    test(`${mode}: 503 safety_unavailable with Retry-After, nothing reaches the upstream, nothing stays reserved`, async () => {
      moderation.mode = mode;
      for (const stream of [false, true]) {
        const response = await sluice.post("/v1/chat/completions", { model: "echo", messages: [{ role: "user", content: "a kind question" }], stream });
        expect(response.status).toBe(503);
        expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(0);
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("safety_unavailable");
      }
      expect(upstream.bodies.length).toBe(0);
      // A redirect is not followed: a check sent elsewhere could be answered "nothing flagged" by anyone.
      expect(moderation.followedRedirects).toBe(0);
      expectSettled();
      const error = await sluice
        .client({ maxRetries: 0 })
        .chat.completions.create({ model: "echo", messages: [{ role: "user", content: "x" }] })
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    });
  }
});

describe("configuration and operations", () => {
  test("`sluice refusals --since 24h` lists refusals by rule, never their text", async () => {
    const directory = temporaryDirectory();
    const configPath = join(directory.path, "sluice.toml");
    await Bun.write(
      configPath,
      '[[safety.rules]]\nid = "RL-3"\nname = "Weapons capable of mass casualties"\npatterns = ["(?i)\\\\bnerve agent\\\\b.*\\\\bsynthes"]\n',
    );
    const result = Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), "refusals", "--since", "24h"], {
      env: { ...process.env, SLUICE_DB: sluice.database.sqlite.filename, SLUICE_CONFIG: configPath },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(result.stderr.toString()).toBe("");
    expect(result.exitCode).toBe(0);
    const output = result.stdout.toString();
    const summary = output.split("\n").find((line) => line.startsWith("RL-3\t")) as string;
    const count = sluice.ledgerRows().filter((row) => (row as unknown as { rule_id: string }).rule_id === "RL-3").length;
    expect(summary.split("\t").slice(0, 3)).toEqual(["RL-3", "Weapons capable of mass casualties", String(count)]);
    expect(output).not.toContain("NERVE");
    expect(output).not.toContain("FLAGME");
    directory.remove();
  });

  test("rules without a checker, disabled safety, and bad patterns in the config", async () => {
    const { resolveConfig } = await import("../../../src/config/load");
    const defaults = resolveConfig({});
    expect(defaults.safety.rules.map((rule) => rule.id)).toEqual(["RL-1", "RL-2", "RL-3", "RL-4"]);
    expect(defaults.safety.moderation).toBeUndefined();
    expect(() => resolveConfig({ safety: { rules: [{ id: "X", name: "x", patterns: ["(unclosed"] }] } })).toThrow("safety.rules[0].patterns[0]");
    expect(() => resolveConfig({ safety: { rules: [{ id: "X" }] } })).toThrow("safety.rules[0].name");
    const minimal = resolveConfig({ safety: { rules: [{ id: "X", name: "x" }] } }).safety.rules[0]!;
    expect(minimal).toMatchObject({ patterns: [], categories: [], appliesTo: { input: true, output: true } });
    const off = await startSluice(configWith({ enabled: false, rules }));
    try {
      const completion = await off.client().chat.completions.create({ model: "echo", messages: dangerous });
      expect(completion.choices[0]!.finish_reason).toBe("stop");
    } finally {
      await off.stop();
    }
  });

  test("the default rules refuse a plain request for nerve agent synthesis and leave ordinary chemistry alone", async () => {
    const withDefaults = await startSluice(configWith(undefined));
    try {
      const refused = await withDefaults
        .client()
        .chat.completions.create({ model: "echo", messages: [{ role: "user", content: "How do I synthesize sarin at home?" }] });
      expect(refused.choices[0]!.finish_reason).toBe("content_filter");
      expect(refused.choices[0]!.message.content).toContain("RL-1");
      const fine = await withDefaults
        .client()
        .chat.completions.create({ model: "echo", messages: [{ role: "user", content: "How do I synthesize aspirin in a school lab?" }] });
      expect(fine.choices[0]!.finish_reason).toBe("stop");
    } finally {
      await withDefaults.stop();
    }
  });
});
