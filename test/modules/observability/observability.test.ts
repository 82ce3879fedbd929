import { describe, expect, test } from "bun:test";
import { Logger } from "../../../src/modules/observability/logger";
import { eventually, fakeModel, readSse, startSluice, useFakeUpstream } from "../../helpers";

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
