import { describe, expect, test } from "bun:test";
import { mkdirSync, renameSync } from "node:fs";
import { Logger } from "../../../src/modules/observability/logger";
import { capturingLogger, eventually, fakeModel, readSse, startSluice, testActor, useFakeUpstream } from "../../helpers";

const upstream = useFakeUpstream();

const messages = [{ role: "user", content: "hi" }];
const config = () => ({
  models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "slow", "slow-20-20"), fakeModel(upstream.url, "fail", "fail-500")],
  plans: [{ id: "default", models: ["*"], tokens_per_5h: 100_000, max_concurrency: 2 }],
});

describe("health and readiness", () => {
  test("/healthz answers; /readyz is ready, then 503 with Retry-After once the server drains", async () => {
    const sluice = await startSluice(config());
    expect(await (await fetch(`${sluice.url}/healthz`)).json()).toEqual({ status: "ok" });
    expect((await fetch(`${sluice.url}/readyz`)).status).toBe(200);
    const stream = await sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true });
    const stopping = sluice.server.stop({ drainMs: 5000 });
    await Bun.sleep(20);
    const notReady = await fetch(`${sluice.url}/readyz`);
    expect(notReady.status).toBe(503);
    expect(notReady.headers.get("retry-after")).toBe("5");
    const refused = await sluice.post("/v1/chat/completions", { model: "m", messages });
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("2");
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("server_overloaded");
    // The stream that was already running finishes within the drain time, whole.
    const events = await readSse(stream);
    expect(events.at(-1)).toBe("[DONE]");
    expect(events.some((event) => typeof event === "object" && event !== null && "error" in event)).toBe(false);
    await stopping;
    expect(sluice.ledgerRows().find((row) => row.model === "slow")?.outcome).toBe("completed");
    sluice.removeFiles();
  });

  test("after the drain time, open streams end with a final error event and [DONE], and are settled as shutdown", async () => {
    const sluice = await startSluice(config());
    const stream = await sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true });
    await sluice.server.stop({ drainMs: 50 });
    const events = await readSse(stream);
    expect(events.at(-1)).toBe("[DONE]");
    expect((events.at(-2) as { error: { code: string } }).error.code).toBe("server_overloaded");
    expect(sluice.ledgerRows()[0]).toMatchObject({ model: "slow", outcome: "shutdown" });
    expect(sluice.server.admission.inFlight()).toBe(0);
    sluice.removeFiles();
  });
});

test("a row the database refuses (a full disk, say): the whole answer is withheld with 503, a stream ends with that error, and each failed commit is logged with the database's error", async () => {
  const lines: string[] = [];
  const logger = new Logger("info", (text) => lines.push(...text.trim().split("\n")));
  const sluice = await startSluice(
    { models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "broken", "midstream-error")], plans: [{ id: "default", models: ["*"] }] },
    { logger },
  );
  try {
    sluice.database.sqlite.run("CREATE TRIGGER full_disk BEFORE INSERT ON usage_ledger_inbox BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END");
    const whole = await sluice.post("/v1/chat/completions", { model: "m", messages });
    expect(whole.status).toBe(503);
    expect(whole.headers.get("retry-after")).toBe("2");
    expect(((await whole.json()) as { error: { code: string } }).error.code).toBe("server_overloaded");
    const events = await readSse(await sluice.post("/v1/chat/completions", { model: "m", messages, stream: true }));
    expect(events.at(-1)).toBe("[DONE]");
    expect((events.at(-2) as { error: { code: string } }).error.code).toBe("server_overloaded");
    // An upstream that fails midway, whose failed row is refused too: the stream still ends with an error event.
    const broken = await readSse(await sluice.post("/v1/chat/completions", { model: "broken", messages, stream: true }));
    expect(broken.at(-1)).toBe("[DONE]");
    expect((broken.at(-2) as { error: { code: string } }).error.code).toBe("server_overloaded");
    // One failed commit a request: each was settled once (a second settle would try a second row).
    await Bun.sleep(100);
    logger.flush();
    const failures = lines.filter((line) => line.includes("ledger rows not recorded"));
    expect(failures).toHaveLength(3);
    for (const line of failures) {
      expect(JSON.parse(line)).toMatchObject({ level: "error", rows: 1, error: expect.stringContaining("database or disk is full") });
    }
    expect(sluice.server.admission.inFlight()).toBe(0);
    // The first two were not an upstream's fault, and each answer's tokens counted once.
    const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(metrics).not.toContain('sluice_upstream_errors_total{model="m"');
    expect(metrics).toContain('sluice_tokens_total{model="m",kind="prompt"} 20');
    // The rows refused, for an alert.
    expect(metrics).toContain("\nsluice_ledger_refused_rows_total 3\n");
  } finally {
    await sluice.stop();
  }
});

test("/readyz reports a ledger that cannot record (its writer thread cannot open the database); requests are then refused before their upstream is called, never answered unrecorded", async () => {
  const lines: string[] = [];
  const logger = new Logger("info", (text) => lines.push(...text.trim().split("\n")));
  const sluice = await startSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")], plans: [{ id: "default", models: ["*"] }] }, { logger });
  const path = sluice.database.sqlite.filename;
  try {
    // The file replaced under the running server: its own connections keep the old one, a new thread cannot open it.
    renameSync(path, `${path}.moved`);
    mkdirSync(path);
    // A move of more rows than the server's thread takes starts the writer thread, which dies at once.
    const answers = await Promise.all(Array.from({ length: 30 }, () => sluice.post("/v1/chat/completions", { model: "m", messages })));
    expect(answers.map((answer) => answer.status)).toEqual(Array.from({ length: 30 }, () => 200));
    let ready = await fetch(`${sluice.url}/readyz`);
    for (let attempt = 0; attempt < 100 && ready.status !== 503; attempt++) {
      await Bun.sleep(20);
      ready = await fetch(`${sluice.url}/readyz`);
    }
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { problems: string[] }).problems).toEqual([expect.stringMatching(/^ledger not recording: the ledger's writer stopped/)]);
    // A request now cannot be recorded: it is refused (503) before its upstream is called, never answered without
    // its row, nor answered by the model and then withheld.
    const sent = upstream.bodies.length;
    const refused = await sluice.post("/v1/chat/completions", { model: "m", messages });
    expect(upstream.bodies.length).toBe(sent);
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("2");
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("server_overloaded");
    // The operator's clue is in the log, once: the writer thread's end and its cause.
    logger.flush();
    await eventually(() => lines.some((line) => line.includes("ledger rows not recorded")));
    const logged = lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((entry) => entry.message === "ledger rows not recorded");
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: "error", rows: 0 });
    expect(String(logged[0]?.error)).toContain("writer stopped");
  } finally {
    await sluice.stop();
  }
});

describe("metrics", () => {
  test("Prometheus text with requests, latency and TTFT histograms, tokens, in-flight, quota rejections, upstream errors", async () => {
    const sluice = await startSluice(config());
    try {
      await (await sluice.post("/v1/chat/completions", { model: "m", messages })).arrayBuffer();
      await readSse(await sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true }));
      await (await sluice.post("/v1/chat/completions", { model: "fail", messages })).arrayBuffer();
      await (await sluice.post("/v1/chat/completions", { model: "m", messages: [] })).arrayBuffer();
      const held = [
        sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true }),
        sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true }),
      ];
      await eventually(() => sluice.server.admission.inFlight() === 2);
      await (await sluice.post("/v1/chat/completions", { model: "m", messages })).arrayBuffer();
      await Promise.all(held.map(async (response) => readSse(await response)));
      const response = await fetch(`${sluice.url}/metrics`);
      expect(response.headers.get("content-type")).toContain("text/plain");
      const text = await response.text();
      expect(text).toContain('sluice_requests_total{route="/v1/chat/completions",model="m",status="200",code=""} 1');
      expect(text).toContain('sluice_requests_total{route="/v1/chat/completions",model="fail",status="502",code="upstream_error"} 1');
      expect(text).toContain('sluice_requests_total{route="/v1/chat/completions",model="",status="400",code="invalid_request"} 1');
      expect(text).toContain('sluice_requests_total{route="/v1/chat/completions",model="m",status="429",code="rate_limit_exceeded"} 1');
      expect(text).toMatch(/sluice_request_duration_seconds_count\{route="\/v1\/chat\/completions",model="slow"\} 3/);
      expect(text).toMatch(/sluice_time_to_first_token_seconds_count\{model="slow"\} 3/);
      expect(text).toContain('sluice_tokens_total{model="m",kind="prompt"} 10');
      expect(text).toContain('sluice_tokens_total{model="m",kind="completion"} 5');
      expect(text).toContain('sluice_quota_rejections_total{kind="concurrency"} 1');
      expect(text).toContain('sluice_upstream_errors_total{model="fail",code="upstream_error"} 1');
      expect(text).toContain('sluice_in_flight{model="slow"} 0');
      expect(text).toContain('sluice_queued{model="slow"} 0');
      // Every row recorded: the refusals' counter is there, at 0.
      expect(text).toContain("\nsluice_ledger_refused_rows_total 0\n");
    } finally {
      await sluice.stop();
    }
  });

  test("a model's queue: how long waiters waited and how each wait ended, in the metrics and each request's log line; a stream's time per output token", async () => {
    const logs = capturingLogger();
    const sluice = await startSluice(
      {
        models: [fakeModel(upstream.url, "one", "slow-5-20", { max_concurrency: 1, queue_size: 2, queue_timeout_ms: 30_000 })],
        plans: [{ id: "default", models: ["*"] }],
      },
      { logger: logs.logger },
    );
    try {
      const first = sluice.post("/v1/chat/completions", { model: "one", messages, stream: true });
      await eventually(() => upstream.inFlight === 1);
      // Two wait behind it; a fourth finds the queue full.
      const waiting = [sluice.post("/v1/chat/completions", { model: "one", messages }), sluice.post("/v1/chat/completions", { model: "one", messages })];
      await eventually(() => sluice.server.queues.get("one")?.stats().queued === 2);
      const full = await sluice.post("/v1/chat/completions", { model: "one", messages });
      expect(full.status).toBe(503);
      await readSse(await first);
      for (const response of await Promise.all(waiting)) expect(response.status).toBe(200);
      const text = await (await fetch(`${sluice.url}/metrics`)).text();
      expect(text).toContain('sluice_queue_waits_total{model="one",result="granted"} 2');
      expect(text).toContain('sluice_queue_waits_total{model="one",result="full"} 1');
      expect(text).toContain('sluice_queue_wait_seconds_count{model="one"} 2');
      // The waits were a stream's length at least (5 words 20 ms apart).
      expect(Number(/sluice_queue_wait_seconds_sum\{model="one"\} ([0-9.e-]+)/.exec(text)?.[1])).toBeGreaterThan(0.1);
      // One stream: its words after the first came 20 ms apart.
      expect(text).toContain('sluice_time_per_output_token_seconds_count{model="one"} 1');
      const perToken = Number(/sluice_time_per_output_token_seconds_sum\{model="one"\} ([0-9.e-]+)/.exec(text)?.[1]);
      expect(perToken).toBeGreaterThan(0.005);
      expect(perToken).toBeLessThan(0.2);
      // The log line says how long each request queued: null for the one that found the slot free and the one turned away.
      await eventually(() => logs.lines.filter((line) => line.message === "request").length === 4);
      const queued = logs.lines.filter((line) => line.message === "request").map((line) => line.queued_ms);
      expect(queued.filter((milliseconds) => milliseconds === null).length).toBe(2);
      const waits = queued.filter((milliseconds) => milliseconds !== null) as number[];
      expect(waits.length).toBe(2);
      for (const milliseconds of waits) expect(milliseconds).toBeGreaterThan(60);
    } finally {
      await sluice.stop();
    }
  });

  test("each organization's use of its plan's token quotas, and each capped key's of its own caps, by window, for alerts before members hit a 429", async () => {
    const sluice = await startSluice({
      ...config(),
      plans: [
        { id: "default", models: ["*"], tokens_per_5h: 1000, tokens_per_month: 50_000 },
        { id: "open", models: ["*"] },
      ],
    });
    try {
      const acme = (await sluice.organizations.findByName("acme"))?.id as string;
      const noCaps = { maxConcurrency: null, tokensPerMonth: null, requestsPerMinute: null };
      const ci = await sluice.keys.create({ organizationId: acme, name: "ci", limits: { ...noCaps, tokensPer5h: 500 } }, testActor);
      const gone = await sluice.keys.create({ organizationId: acme, name: "gone", limits: { ...noCaps, tokensPer5h: 500 } }, testActor);
      await sluice.keys.revoke(gone.key.id, testActor);
      const ask = (apiKey?: string) =>
        sluice.client(apiKey ? { apiKey } : {}).chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
      for (let index = 0; index < 3; index++) await ask();
      for (let index = 0; index < 2; index++) await ask(ci.secret);
      const other = await sluice.addOrganization("unmetered", { plan: "open" });
      await ask(other.key);
      const read = async () => {
        const text = await (await fetch(`${sluice.url}/metrics`)).text();
        return text.split("\n").filter((line) => /^sluice_(organization|key)_token/.test(line));
      };
      // 5 answers of 10 + 5 tokens, 2 of them through the capped key, as admission counts them once settled.
      const organization = `organization_id="${acme}",organization="acme"`;
      let lines = await read();
      for (let attempt = 0; attempt < 100 && !lines.includes(`sluice_organization_tokens{${organization},window="5h"} 75`); attempt++) {
        await Bun.sleep(20);
        lines = await read();
      }
      expect(lines.sort()).toEqual(
        [
          `sluice_organization_token_limit{${organization},window="5h"} 1000`,
          `sluice_organization_token_limit{${organization},window="month"} 50000`,
          `sluice_organization_tokens{${organization},window="5h"} 75`,
          `sluice_organization_tokens{${organization},window="month"} 75`,
          // The key's own cap is on the 5-hour window only; the revoked key has none.
          `sluice_key_token_limit{key_id="${ci.key.id}",key="ci",${organization},window="5h"} 500`,
          `sluice_key_tokens{key_id="${ci.key.id}",key="ci",${organization},window="5h"} 30`,
        ].sort(),
      );
      // The organizations are read again only after a change to them, not at every scrape.
      const repository = sluice.storage.organizations;
      const list = repository.list.bind(repository);
      let reads = 0;
      repository.list = () => {
        reads++;
        return list();
      };
      for (let scrape = 0; scrape < 3; scrape++) await read();
      expect(reads).toBe(0);
      // Moved to a plan without quotas: its series go at the next scrape; its capped key's stay.
      await sluice.organizations.update("acme", { plan: "open" }, testActor);
      expect((await read()).map((line) => line.split("{")[0])).toEqual(["sluice_key_tokens", "sluice_key_token_limit"]);
      expect(reads).toBe(1);
      // Suspended, it admits nothing: none of its series.
      await sluice.organizations.update("acme", { status: "suspended" }, testActor);
      expect(await read()).toEqual([]);
    } finally {
      await sluice.stop();
    }
  });

  test("SLUICE_METRICS_TOKEN protects /metrics", async () => {
    const sluice = await startSluice(config(), { metricsToken: "scrape-secret" });
    try {
      expect((await fetch(`${sluice.url}/metrics`)).status).toBe(401);
      expect((await fetch(`${sluice.url}/metrics`, { headers: { authorization: "Bearer wrong" } })).status).toBe(401);
      expect((await fetch(`${sluice.url}/metrics`, { headers: { authorization: "Bearer scrape-secret" } })).status).toBe(200);
    } finally {
      await sluice.stop();
    }
  });
});

describe("logs", () => {
  test("one JSON line per request with ids, model, status, code, tokens and durations; never the key or the messages", async () => {
    const lines: string[] = [];
    const logger = new Logger("info", (text) => lines.push(...text.trim().split("\n")));
    const sluice = await startSluice(config(), { logger });
    try {
      const whole = await sluice.post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "my secret question" }] });
      await whole.arrayBuffer();
      await readSse(await sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true }));
      await (await sluice.post("/v1/chat/completions", { model: "m", messages }, { authorization: "Bearer sk-sluice-not-a-real-key" })).arrayBuffer();
      logger.flush();
      await eventually(() => lines.length >= 3);
      const entries = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
      const first = entries.find((entry) => entry.request_id === whole.headers.get("x-request-id"));
      expect(first).toMatchObject({
        level: "info",
        message: "request",
        route: "/v1/chat/completions",
        status: 200,
        model: "m",
        prompt_tokens: 10,
        completion_tokens: 5,
        outcome: "completed",
      });
      expect(first?.organization_id).toMatch(/^org_/);
      expect(first?.key_id).toMatch(/^key_/);
      expect(typeof first?.duration_ms).toBe("number");
      const stream = entries.find((entry) => entry.model === "slow");
      expect(stream).toMatchObject({ status: 200, completion_tokens: 20 });
      expect(typeof stream?.ttft_ms).toBe("number");
      expect(entries.find((entry) => entry.status === 401)).toMatchObject({ code: "invalid_api_key" });
      const all = lines.join("\n");
      expect(all).not.toContain(sluice.key);
      expect(all).not.toContain("sk-sluice-not-a-real-key");
      expect(all).not.toContain("my secret question");
    } finally {
      await sluice.stop();
    }
  });
});
