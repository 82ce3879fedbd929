// A running server given a new configuration (what SIGHUP does): models, queues, plans and red-line rules change from
// the next request on, requests under way finish under the configuration they started with, and the audit trail
// says what changed.
import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { resolveConfig } from "../src/config/load";
import type { ConfigFile } from "../src/config/schema";
import type { AuditActor } from "../src/modules/audit/entry";
import { fakeModel, startSluice, useFakeUpstream, type TestSluice } from "./helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });
const signal: AuditActor = { kind: "server", name: "SIGHUP" };
const messages = [{ role: "user" as const, content: "Hello" }];

function configFile(changes: Partial<ConfigFile> = {}): ConfigFile {
  return {
    models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "slow", "slow-20-25")],
    plans: [{ id: "default", models: ["m", "slow"], tokens_per_5h: 1_000_000 }],
    safety: { enabled: true, rules: [] },
    ...changes,
  };
}

let sluice: TestSluice;
beforeAll(async () => {
  sluice = await startSluice(configFile());
});
afterEach(async () => {
  await sluice.server.reconfigure(resolveConfig(configFile()), signal);
});
afterAll(async () => {
  await sluice.stop();
});

async function statusOf(model: string): Promise<number> {
  const response = await sluice.post("/v1/chat/completions", { model, messages });
  await response.text();
  return response.status;
}

test("a model added is served and listed, a model removed is 404 model_not_found, from the next request on", async () => {
  const next = configFile({
    models: [fakeModel(upstream.url, "slow", "slow-20-25"), fakeModel(upstream.url, "added", "usage-10-5")],
    plans: [{ id: "default", models: ["*"] }],
  });
  expect(await statusOf("added")).toBe(404);
  const changes = await sluice.server.reconfigure(resolveConfig(next), signal);
  expect(changes.models).toEqual({ added: ["added"], removed: ["m"], changed: [] });
  expect(await statusOf("added")).toBe(200);
  const missing = await sluice.post("/v1/chat/completions", { model: "m", messages });
  expect(missing.status).toBe(404);
  expect(((await missing.json()) as { error: { code: string } }).error.code).toBe("model_not_found");
  const listed = (await sluice.client().models.list()).data.map((model) => model.id);
  expect(listed.sort()).toEqual(["added", "slow"]);
});

test("streams under way on a removed model finish, are billed and leave nothing in flight", async () => {
  const streams = Array.from({ length: 20 }, () => sluice.client().chat.completions.create({ model: "slow", messages, stream: true }));
  const opened = await Promise.all(streams);
  const before = sluice.ledgerRows().length;
  const withoutSlow = configFile({ models: [fakeModel(upstream.url, "m", "usage-10-5")], plans: [{ id: "default", models: ["*"] }] });
  await sluice.server.reconfigure(resolveConfig(withoutSlow), signal);
  expect(await statusOf("slow")).toBe(404);
  const words = await Promise.all(
    opened.map(async (stream) => {
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      return text.trim().split(/\s+/).length;
    }),
  );
  expect(words).toEqual(Array.from({ length: 20 }, () => 20));
  expect(sluice.server.admission.inFlight()).toBe(0);
  expect(sluice.server.queues.get("slow")?.stats()).toEqual({ active: 0, queued: 0 });
  expect(sluice.ledgerRows().length - before).toBe(20);
});

test("max_concurrency: requests waiting in the queue go on at once when a reload raises the limit or takes it away; a limit set applies to the next", async () => {
  const limited = (maxConcurrency: number) =>
    configFile({
      models: [
        fakeModel(upstream.url, "m", "usage-10-5"),
        fakeModel(upstream.url, "slow", "slow-20-25", { max_concurrency: maxConcurrency, queue_size: 50, queue_timeout_ms: 10_000 }),
      ],
    });
  await sluice.server.reconfigure(resolveConfig(limited(1)), signal);
  const started = Date.now();
  const requests = Array.from({ length: 30 }, () => sluice.post("/v1/chat/completions", { model: "slow", messages }));
  await Bun.sleep(100);
  expect(sluice.server.queues.get("slow")?.stats()).toEqual({ active: 1, queued: 29 });
  await sluice.server.reconfigure(resolveConfig(limited(30)), signal);
  const statuses = await Promise.all(requests.map(async (request) => (await request).status));
  expect(statuses.every((status) => status === 200)).toBe(true);
  // One at a time, 30 answers of 20 words 25 ms apart would take 15 s; raised, they all ran together.
  expect(Date.now() - started).toBeLessThan(5_000);
  expect(upstream.maxInFlight).toBe(30);

  // Taken away, the limit no longer holds anyone back.
  await sluice.server.reconfigure(resolveConfig(limited(1)), signal);
  upstream.reset();
  const unlimited = Array.from({ length: 10 }, () => statusOf("slow"));
  await Bun.sleep(100);
  expect(sluice.server.queues.get("slow")?.stats()).toEqual({ active: 1, queued: 9 });
  await sluice.server.reconfigure(resolveConfig(configFile()), signal);
  expect(await Promise.all(unlimited)).toEqual(Array(10).fill(200));
  expect(upstream.maxInFlight).toBe(10);

  await sluice.server.reconfigure(resolveConfig(limited(3)), signal);
  upstream.reset();
  const capped = await Promise.all(Array.from({ length: 12 }, () => statusOf("slow")));
  expect(capped.every((status) => status === 200)).toBe(true);
  expect(upstream.maxInFlight).toBe(3);
  expect(sluice.server.queues.get("slow")?.stats()).toEqual({ active: 0, queued: 0 });
});

test("a plan's new models and quota apply to the next request of a key already in use (its cached caller is dropped)", async () => {
  expect(await statusOf("m")).toBe(200);
  const next = configFile({
    models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "other", "usage-10-5")],
    plans: [{ id: "default", models: ["other"], tokens_per_5h: 1 }],
  });
  const changes = await sluice.server.reconfigure(resolveConfig(next), signal);
  expect(changes.plans).toEqual({ added: [], removed: [], changed: ["default"] });
  expect(await statusOf("m")).toBe(404);
  const refused = await sluice.post("/v1/chat/completions", { model: "other", messages });
  expect(refused.status).toBe(429);
  const { error } = (await refused.json()) as { error: { code: string; message: string } };
  expect(error.code).toBe("rate_limit_exceeded");
  expect(error.message).toContain("5-hour quota of 1 tokens");

  // A plan removed: its organizations are told so, as at start.
  await sluice.server.reconfigure(resolveConfig(configFile({ plans: [{ id: "other", models: ["*"] }] })), signal);
  const orphaned = await sluice.post("/v1/chat/completions", { model: "m", messages });
  expect(orphaned.status).toBe(403);
  expect(((await orphaned.json()) as { error: { message: string } }).error.message).toContain('plan "default" is not configured');
});

test("red-line rules added by a reload refuse the next request; removed, they let it through", async () => {
  const phrase = "purple-elephant-protocol";
  const ask = async () =>
    (await sluice.client().chat.completions.create({ model: "m", messages: [{ role: "user", content: `Tell me the ${phrase}` }] })).choices[0]?.finish_reason;
  expect(await ask()).toBe("stop");
  const next = configFile({ safety: { enabled: true, rules: [{ id: "RL-50", name: "Elephants", patterns: [phrase], applies_to: ["input"] }] } });
  const changes = await sluice.server.reconfigure(resolveConfig(next), signal);
  expect(changes.safety).toBe(true);
  expect(await ask()).toBe("content_filter");
  await sluice.server.reconfigure(resolveConfig(configFile()), signal);
  expect(await ask()).toBe("stop");
});

test("an unchanged model keeps its backend: its open circuit breaker stays open across a reload that changes another", async () => {
  const failing = fakeModel(upstream.url, "failing", "fail-500", { breaker_failures: 2, breaker_cooldown_ms: 60_000 });
  const withFailing = (plans: ConfigFile["plans"]) => configFile({ models: [fakeModel(upstream.url, "m", "usage-10-5"), failing], plans });
  await sluice.server.reconfigure(resolveConfig(withFailing([{ id: "default", models: ["*"] }])), signal);
  expect([await statusOf("failing"), await statusOf("failing")]).toEqual([502, 502]);
  const calls = upstream.bodies.length;
  await sluice.server.reconfigure(resolveConfig(withFailing([{ id: "default", models: ["*"], tokens_per_5h: 5_000_000 }])), signal);
  expect(await statusOf("failing")).toBe(503);
  expect(upstream.bodies.length).toBe(calls);
  // Changed, the model starts again with new connections and a closed breaker.
  await sluice.server.reconfigure(
    resolveConfig(
      configFile({ models: [fakeModel(upstream.url, "m", "usage-10-5"), { ...failing, timeout_ms: 30_000 }], plans: [{ id: "default", models: ["*"] }] }),
    ),
    signal,
  );
  expect(await statusOf("failing")).toBe(502);
  expect(upstream.bodies.length).toBe(calls + 1);
});

test("the audit trail records what changed, field by field, as the server on SIGHUP; a reload that changes nothing records nothing", async () => {
  const count = async () => (await sluice.audit.list({ action: "config.reloaded", limit: 100 })).length;
  const before = await count();
  await sluice.server.reconfigure(resolveConfig(configFile()), signal);
  expect(await count()).toBe(before);
  const next = configFile({
    models: [fakeModel(upstream.url, "m", "usage-10-5", { max_concurrency: 4 }), fakeModel(upstream.url, "new", "usage-10-5")],
    plans: [{ id: "default", models: ["*"], tokens_per_5h: 2_000_000 }],
  });
  await sluice.server.reconfigure(resolveConfig(next), signal);
  const [entry] = await sluice.audit.list({ action: "config.reloaded", limit: 1 });
  expect(entry).toMatchObject({ actorKind: "server", actor: "SIGHUP", target: "configuration" });
  const changes = entry?.changes as Record<string, [unknown, unknown]>;
  expect(changes["model m maxConcurrency"]).toEqual([null, 4]);
  expect(changes["model new"]?.[0]).toBeNull();
  expect(changes["model new"]?.[1]).toMatchObject({ id: "new", upstreamModel: "usage-10-5" });
  expect(changes["model slow"]).toMatchObject([{ id: "slow" }, null]);
  expect(changes["plan default models"]).toEqual([["m", "slow"], ["*"]]);
  expect(changes["plan default tokensPer5h"]).toEqual([1_000_000, 2_000_000]);
  expect(Object.keys(changes).sort()).toEqual(["model m maxConcurrency", "model new", "model slow", "plan default models", "plan default tokensPer5h"]);
});

test("the audit trail names a model's upstream headers but never shows their values, and still records that they changed", async () => {
  const withHeader = (value: string) =>
    configFile({
      models: [fakeModel(upstream.url, "m", "usage-10-5", { headers: { "X-Route-Token": value } }), fakeModel(upstream.url, "slow", "slow-20-25")],
    });
  await sluice.server.reconfigure(resolveConfig(withHeader("first-secret")), signal);
  await sluice.server.reconfigure(resolveConfig(withHeader("second-secret")), signal);
  const [changed, added] = await sluice.audit.list({ action: "config.reloaded", limit: 2 });
  expect(changed?.changes).toEqual({ "model m headers": ["(hidden)", "(hidden, changed)"] });
  expect(added?.changes).toEqual({ "model m headers": [{}, { "x-route-token": "(hidden)" }] });
  expect(JSON.stringify(await sluice.audit.list({ limit: 100 }))).not.toContain("secret");
});

test("300 requests in flight through 20 reloads that change limits, queues, plans and models: every one answered or refused cleanly, nothing left held", async () => {
  // Each shape changes the model's limit (or takes it away), the plan's quota and cap, and whether another model exists.
  const shapes = [1, 5, undefined, 2, 50].map((maxConcurrency, index) =>
    resolveConfig(
      configFile({
        models: [
          ...(index % 2 === 0 ? [fakeModel(upstream.url, "m", "usage-10-5")] : []),
          fakeModel(upstream.url, "slow", "usage-10-5-20", {
            ...(maxConcurrency === undefined ? {} : { max_concurrency: maxConcurrency }),
            queue_size: 400,
            queue_timeout_ms: 20_000,
          }),
        ],
        plans: [{ id: "default", models: ["*"], tokens_per_5h: 1_000_000_000 + index, max_concurrency: 400 + index }],
      }),
    ),
  );
  const requests = Array.from({ length: 300 }, (_, index) =>
    sluice.post("/v1/chat/completions", { model: "slow", messages, stream: index % 2 === 0 }).then(async (response) => {
      await response.arrayBuffer();
      return response.status;
    }),
  );
  for (let round = 0; round < 20; round++) {
    await sluice.server.reconfigure(shapes[round % shapes.length] as (typeof shapes)[number], signal);
    await Bun.sleep(10);
  }
  await sluice.server.reconfigure(shapes[2] as (typeof shapes)[number], signal);
  const statuses = await Promise.all(requests);
  expect(statuses.filter((status) => status !== 200)).toEqual([]);
  expect(sluice.server.admission.inFlight()).toBe(0);
  expect(sluice.server.admission.reservedTokens()).toBe(0);
  expect(sluice.server.queues.get("slow")?.stats()).toEqual({ active: 0, queued: 0 });
});
