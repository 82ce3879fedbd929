import { describe, expect, test } from "bun:test";
import { startFakeUpstream, whole } from "../fake-upstream";
import { capturingLogger, eventually, readSse, startSluice, type TestSluice, useFakeUpstream, withSluice } from "../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });

const messages = [{ role: "user", content: "hi" }];
const refused = "http://127.0.0.1:1/v1";

function withModels(models: Record<string, unknown>[], run: (sluice: TestSluice) => Promise<void>) {
  return withSluice({ models: models as never, plans: [{ id: "default", models: ["*"], tokens_per_5h: 1_000_000 }] }, run);
}

/** Each server's calls in flight from /metrics, by the server's address (and model, when several share it). */
async function serversInFlight(sluice: TestSluice): Promise<Record<string, number>> {
  const text = await (await fetch(`${sluice.url}/metrics`)).text();
  const counts: Record<string, number> = {};
  for (const [, model, server, value] of text.matchAll(/^sluice_upstream_server_in_flight\{model="([^"]+)",server="([^"]+)"\} (\d+)$/gm)) {
    counts[model === "m" ? (server as string) : `${model} ${server}`] = Number(value);
  }
  return counts;
}

async function codeOf(response: Response) {
  return { status: response.status, code: ((await response.json()) as { error?: { code: string } }).error?.code ?? null };
}

describe("several upstreams per model", () => {
  test("a refused connection is retried once on the model's other upstream; the other calls spread over both", async () => {
    await withModels([{ id: "m", backend: "openai", base_url: [refused, upstream.url], upstream_model: "usage-10-5" }], async (sluice) => {
      for (let index = 0; index < 6; index++) {
        const response = await sluice.post("/v1/chat/completions", { model: "m", messages, stream: index % 2 === 0 });
        expect(response.status).toBe(200);
        await response.arrayBuffer();
      }
      expect(upstream.bodies.length).toBe(6);
      expect(sluice.ledgerRows().length).toBe(6);
    });
  });

  test("each call goes to the server with the fewest calls in flight: a held answer on one, the next six all on the other", async () => {
    let held = 0;
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slow = Bun.serve({
      port: 0,
      async fetch() {
        held++;
        await released;
        return Response.json(whole("usage-10-5", "late", null, { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }));
      },
    });
    const slowUrl = `http://127.0.0.1:${slow.port}/v1`;
    try {
      await withModels([{ id: "m", backend: "openai", base_url: [slowUrl, upstream.url], upstream_model: "usage-10-5" }], async (sluice) => {
        const first = sluice.post("/v1/chat/completions", { model: "m", messages });
        await eventually(() => held === 1);
        expect(await serversInFlight(sluice)).toEqual({ [slowUrl]: 1, [upstream.url]: 0 });
        // In turn, three of these would wait behind the held answer.
        for (let index = 0; index < 6; index++) {
          const response = await sluice.post("/v1/chat/completions", { model: "m", messages, stream: index % 2 === 0 });
          expect(response.status).toBe(200);
          await response.arrayBuffer();
        }
        expect(held).toBe(1);
        expect(upstream.bodies.length).toBe(6);
        release();
        expect((await first).status).toBe(200);
        await eventually(() => sluice.ledgerRows().length === 7);
        expect(await serversInFlight(sluice)).toEqual({ [slowUrl]: 0, [upstream.url]: 0 });
      });
    } finally {
      release();
      await slow.stop(true);
    }
  });

  test("a server that fails at once is not handed every call for having none in flight: its failures in a row count against it", async () => {
    let failed = 0;
    const failing = Bun.serve({
      port: 0,
      fetch() {
        failed++;
        return Response.json({ error: { message: "CUDA error" } }, { status: 500 });
      },
    });
    try {
      await withModels(
        [{ id: "m", backend: "openai", base_url: [`http://127.0.0.1:${failing.port}/v1`, upstream.url], upstream_model: "usage-10-5", breaker_failures: 1000 }],
        async (sluice) => {
          const statuses: number[] = [];
          for (let index = 0; index < 40; index++) {
            const response = await sluice.post("/v1/chat/completions", { model: "m", messages });
            statuses.push(response.status);
            await response.arrayBuffer();
          }
          // In turn, half of them (20) would have failed; by calls in flight alone, nearly all.
          expect(failed).toBe(1);
          expect(statuses.filter((status) => status === 502).length).toBe(1);
          expect(upstream.bodies.length).toBe(39);
        },
      );
    } finally {
      await failing.stop(true);
    }
  });

  test("a server that fails every other call is taken out for its failure rate: the callers' failures stop, the metrics and the model list say why", async () => {
    let calls = 0;
    let failures = 0;
    const flaky = Bun.serve({
      port: 0,
      async fetch(request) {
        const body = (await request.json()) as { model: string };
        calls++;
        if (calls % 2 === 0) {
          failures++;
          return Response.json({ error: { message: "CUDA error" } }, { status: 500 });
        }
        return fetch(`${upstream.url}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      },
    });
    const flakyUrl = `http://127.0.0.1:${flaky.port}/v1`;
    try {
      for (const rate of [0, 0.5]) {
        calls = 0;
        failures = 0;
        const model = {
          id: "m",
          backend: "openai",
          base_url: [flakyUrl, upstream.url],
          upstream_model: "usage-10-5",
          breaker_window: 10,
          breaker_failure_rate: rate,
        };
        await withModels([model], async (sluice) => {
          const openai = sluice.client();
          let failed = 0;
          for (let batch = 0; batch < 30; batch++) {
            const answers = await Promise.allSettled(
              Array.from({ length: 4 }, (_, index) =>
                openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: index % 2 === 1 }).then(async (answer) => {
                  if (Symbol.asyncIterator in answer) for await (const _ of answer);
                }),
              ),
            );
            failed += answers.filter((answer) => answer.status === "rejected").length;
          }
          expect(failed).toBe(failures);
          if (rate === 0) {
            // Without the rate: about half of its share of the 120 calls failed.
            expect(failures).toBeGreaterThanOrEqual(20);
            return;
          }
          expect(failures).toBeLessThanOrEqual(7);
          expect(calls).toBeLessThanOrEqual(14);
          const [health] = sluice.server.models.servers();
          expect(health?.servers[0]).toMatchObject({ url: flakyUrl, state: "out", outFor: "failure_rate", recentCalls: 10 });
          expect(health?.servers[1]).toMatchObject({ url: upstream.url, state: "up", outFor: null, recentFailures: 0 });
          const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
          expect(metrics).toContain(`sluice_upstream_server_up{model="m",server="${flakyUrl}"} 0`);
          const ratio = new RegExp(
            `^sluice_upstream_server_recent_failure_ratio\\{model="m",server="${flakyUrl.replaceAll(".", "\\.")}"\\} ([0-9.]+)$`,
            "m",
          ).exec(metrics);
          expect(Number(ratio?.[1])).toBeGreaterThanOrEqual(0.5);
          expect(metrics).toContain(`sluice_upstream_server_recent_failure_ratio{model="m",server="${upstream.url}"} 0`);
          expect(sluice.ledgerRows().length).toBe(120);
        });
      }
    } finally {
      await flaky.stop(true);
    }
  });

  test("each server's calls by how they ended, in /metrics; each request's log line names the server that answered or failed", async () => {
    const { logger, lines } = capturingLogger();
    const sluice = await startSluice(
      {
        models: [
          { id: "m", backend: "openai", base_url: [refused, upstream.url], upstream_model: "usage-10-5" },
          { id: "bad", backend: "openai", base_url: upstream.url, upstream_model: "bad-400" },
          { id: "failing", backend: "openai", base_url: upstream.url, upstream_model: "fail-500", breaker_failures: 100 },
          { id: "slow", backend: "openai", base_url: upstream.url, upstream_model: "slow-40-25" },
        ] as never,
        plans: [{ id: "default", models: ["*"] }],
      },
      { logger },
    );
    try {
      const idOf = async (response: Response) => {
        await response.arrayBuffer();
        return response.headers.get("x-request-id") as string;
      };
      // The refused server first (in turn), then the retry on the other, which answers.
      const answered = await idOf(await sluice.post("/v1/chat/completions", { model: "m", messages }));
      const streamed = await idOf(await sluice.post("/v1/chat/completions", { model: "m", messages, stream: true }));
      const rejected = await idOf(await sluice.post("/v1/chat/completions", { model: "bad", messages }));
      const failed = await idOf(await sluice.post("/v1/chat/completions", { model: "failing", messages }));
      const leaving = new AbortController();
      const left = await sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true }, {}, leaving.signal);
      await (left.body as ReadableStream<Uint8Array>).getReader().read();
      leaving.abort();
      await eventually(() => sluice.server.admission.inFlight() === 0);
      const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
      const count = (model: string, server: string, result: string) =>
        Number(
          new RegExp(
            `^sluice_upstream_server_calls_total\\{model="${model}",server="${server.replaceAll(".", "\\.")}",result="${result}"\\} (\\d+)$`,
            "m",
          ).exec(metrics)?.[1],
        );
      expect(count("m", refused, "failed")).toBe(1);
      expect(count("m", upstream.url, "finished")).toBe(2);
      expect(count("bad", upstream.url, "rejected")).toBe(1);
      expect(count("failing", upstream.url, "failed")).toBe(1);
      expect(count("slow", upstream.url, "stopped")).toBe(1);
      expect(count("slow", upstream.url, "finished")).toBe(0);
      const [health] = sluice.server.models.servers();
      expect(health?.servers.map((server) => server.calls)).toEqual([
        { finished: 0, failed: 1, rejected: 0, stopped: 0 },
        { finished: 2, failed: 0, rejected: 0, stopped: 0 },
      ]);
      await eventually(() => lines.filter((line) => line.message === "request").length >= 5);
      const serverOf = (requestId: string) => lines.find((line) => line.request_id === requestId)?.upstream_server;
      expect(serverOf(answered)).toBe(upstream.url);
      expect(serverOf(streamed)).toBe(upstream.url);
      expect(serverOf(rejected)).toBe(upstream.url);
      expect(serverOf(failed)).toBe(upstream.url);
      expect(lines.find((line) => line.request_id === failed)).toMatchObject({ status: 502, model: "failing" });
    } finally {
      await sluice.stop();
    }
  });

  test("400 concurrent calls over two servers, streams left by their clients, refusals and failures among them: spread over both, every count back to 0", async () => {
    const other = startFakeUpstream();
    try {
      await withModels(
        [
          { id: "m", backend: "openai", base_url: [upstream.url, other.url], upstream_model: "slow-4-20", breaker_failures: 1000 },
          { id: "failing", backend: "openai", base_url: [upstream.url, other.url], upstream_model: "fail-500", breaker_failures: 1000 },
          { id: "busy", backend: "openai", base_url: [upstream.url, other.url], upstream_model: "overloaded-429", breaker_failures: 1000 },
        ],
        async (sluice) => {
          const call = async (index: number) => {
            const model = index % 8 === 6 ? "failing" : index % 8 === 7 ? "busy" : "m";
            const leaving = new AbortController();
            const response = await sluice.post("/v1/chat/completions", { model, messages, stream: index % 2 === 0 }, {}, leaving.signal);
            if (index % 4 === 0 && response.status === 200) {
              await (response.body as ReadableStream<Uint8Array>).getReader().read();
              leaving.abort();
              return;
            }
            await response.arrayBuffer();
          };
          await Promise.all(Array.from({ length: 400 }, (_, index) => call(index)));
          await eventually(() => sluice.server.admission.inFlight() === 0);
          const counts = await serversInFlight(sluice);
          expect(Object.values(counts)).toEqual([0, 0, 0, 0, 0, 0]);
          const [here, there] = [upstream.bodies.length, other.bodies.length];
          expect(here + there).toBeGreaterThanOrEqual(400);
          expect(Math.min(here, there)).toBeGreaterThan(100);
        },
      );
    } finally {
      await other.stop();
    }
  });

  test("a server that refuses the request (429, 503) is left for the model's other server, once; a 500 is not retried", async () => {
    let status = 503;
    let refusals = 0;
    const busy = Bun.serve({
      port: 0,
      fetch() {
        refusals++;
        return Response.json({ error: { message: "busy" } }, { status, headers: { "retry-after": "7" } });
      },
    });
    const busyUrl = `http://127.0.0.1:${busy.port}/v1`;
    try {
      await withModels(
        [{ id: "m", backend: "openai", base_url: [busyUrl, upstream.url], upstream_model: "usage-10-5", breaker_failures: 100 }],
        async (sluice) => {
          for (const [index, code] of [503, 429, 503, 429].entries()) {
            status = code;
            const response = await sluice.post("/v1/chat/completions", { model: "m", messages, stream: index % 2 === 1 });
            expect(response.status).toBe(200);
            await response.arrayBuffer();
          }
          // Every request the busy server refused went on to the other, which answered all four.
          expect(refusals).toBeGreaterThan(0);
          expect(upstream.bodies.length).toBe(4);
          expect(sluice.ledgerRows().length).toBe(4);
        },
      );
      await withModels([{ id: "m", backend: "openai", base_url: [busyUrl, busyUrl], upstream_model: "usage-10-5", breaker_failures: 100 }], async (sluice) => {
        // Both refuse: one retry, then the caller gets the upstream's refusal with its Retry-After.
        status = 429;
        refusals = 0;
        const response = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(response.headers.get("retry-after")).toBe("7");
        expect(await codeOf(response)).toEqual({ status: 503, code: "model_unavailable" });
        expect(refusals).toBe(2);
        // A 500 may come after the model ran: not sent again.
        status = 500;
        refusals = 0;
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(502);
        expect(refusals).toBe(1);
      });
    } finally {
      await busy.stop(true);
    }
  });

  test("a circuit breaker opens after repeated failures: 503 model_unavailable with Retry-After until a probe succeeds", async () => {
    await withModels(
      [{ id: "m", backend: "openai", base_url: upstream.url, upstream_model: "fail-500", breaker_failures: 3, breaker_cooldown_ms: 300 }],
      async (sluice) => {
        for (let index = 0; index < 3; index++)
          expect(await codeOf(await sluice.post("/v1/chat/completions", { model: "m", messages }))).toEqual({ status: 502, code: "upstream_error" });
        const open = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(Number(open.headers.get("retry-after"))).toBeGreaterThan(0);
        // What operators see: the server out, in the metrics and in the console's list of models.
        expect(await (await fetch(`${sluice.url}/metrics`)).text()).toContain(`sluice_upstream_server_up{model="m",server="${upstream.url}"} 0`);
        const [health] = sluice.server.models.servers();
        expect(health?.servers).toMatchObject([{ url: upstream.url, state: "out", failures: 3 }]);
        expect(health?.servers[0]?.outUntil).toBeGreaterThan(Date.now());
        expect(await codeOf(open)).toEqual({ status: 503, code: "model_unavailable" });
        expect(upstream.bodies.length).toBe(3);
        await Bun.sleep(350);
        expect(sluice.server.models.servers()[0]?.servers[0]?.state).toBe("probing");
        // The probe fails: the breaker opens again at once.
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(502);
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(503);
        expect(upstream.bodies.length).toBe(4);
        expect(sluice.server.admission.inFlight()).toBe(0);
      },
    );
  });

  test("health checks: a server out for failures in a row is asked every health_check_ms, and is back at its first 200, long before its cooldown", async () => {
    let down = true;
    const healthChecks: number[] = [];
    const restarting = Bun.serve({
      port: 0,
      async fetch(request) {
        if (request.method === "GET") {
          healthChecks.push(Date.now());
          expect(new URL(request.url).pathname).toBe("/v1/models");
          expect(request.headers.get("authorization")).toBe("Bearer upstream-secret");
          return down ? new Response("loading", { status: 503 }) : Response.json({ object: "list", data: [] });
        }
        await request.arrayBuffer();
        if (down) return Response.json({ error: { message: "CUDA out of memory" } }, { status: 500 });
        return Response.json(whole("usage-10-5", "back", null, { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }));
      },
    });
    const url = `http://127.0.0.1:${restarting.port}/v1`;
    const restartingModel = (healthCheckMs: number) => ({
      id: "m",
      backend: "openai",
      base_url: url,
      upstream_model: "usage-10-5",
      api_key_env: "SLUICE_TEST_HEALTH_KEY",
      breaker_failures: 2,
      breaker_cooldown_ms: 60_000,
      health_check_ms: healthCheckMs,
    });
    process.env.SLUICE_TEST_HEALTH_KEY = "upstream-secret";
    try {
      await withModels([restartingModel(50)], async (sluice) => {
        for (let index = 0; index < 2; index++) expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(502);
        expect(await codeOf(await sluice.post("/v1/chat/completions", { model: "m", messages }))).toEqual({ status: 503, code: "model_unavailable" });
        // Still down: asked again and again, and still out.
        await eventually(() => healthChecks.length >= 3);
        expect(await codeOf(await sluice.post("/v1/chat/completions", { model: "m", messages }))).toEqual({ status: 503, code: "model_unavailable" });
        down = false;
        // Up again: within a check or two the next request probes it and gets through, 60 s of cooldown or not.
        await eventually(() => sluice.server.models.servers()[0]?.servers[0]?.state === "probing", 2000);
        const back = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(back.status).toBe(200);
        await back.arrayBuffer();
        expect(sluice.server.models.servers()[0]?.servers[0]?.state).toBe("up");
        // Up, it is no longer asked.
        const asked = healthChecks.length;
        await Bun.sleep(200);
        expect(healthChecks.length).toBe(asked);
      });
      // With health checks off, it waits out its cooldown.
      down = true;
      healthChecks.length = 0;
      await withModels([restartingModel(0)], async (sluice) => {
        for (let index = 0; index < 2; index++) expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(502);
        down = false;
        await Bun.sleep(200);
        expect(await codeOf(await sluice.post("/v1/chat/completions", { model: "m", messages }))).toEqual({ status: 503, code: "model_unavailable" });
        expect(healthChecks).toEqual([]);
      });
    } finally {
      delete process.env.SLUICE_TEST_HEALTH_KEY;
      restarting.stop(true);
    }
  });

  test("health_check_path: a server without …/models is asked for its own health route, from its root, with the base URL's query", async () => {
    let down = true;
    const asked: string[] = [];
    const server = Bun.serve({
      port: 0,
      async fetch(request) {
        const url = new URL(request.url);
        if (request.method === "GET") {
          asked.push(`${url.pathname}${url.search}`);
          if (url.pathname !== "/health") return new Response("not found", { status: 404 });
          return down ? new Response("loading", { status: 503 }) : new Response("ok");
        }
        await request.arrayBuffer();
        if (down) return Response.json({ error: { message: "CUDA out of memory" } }, { status: 500 });
        return Response.json(whole("usage-10-5", "back", null, { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }));
      },
    });
    const model = {
      id: "m",
      backend: "openai",
      base_url: `http://127.0.0.1:${server.port}/v1?deployment=blue`,
      upstream_model: "usage-10-5",
      breaker_failures: 1,
      breaker_cooldown_ms: 60_000,
      health_check_ms: 50,
      health_check_path: "/health",
    };
    try {
      await withModels([model], async (sluice) => {
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(502);
        await eventually(() => asked.length >= 2);
        down = false;
        await eventually(() => sluice.server.models.servers()[0]?.servers[0]?.state === "probing", 2000);
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(200);
        expect(new Set(asked)).toEqual(new Set(["/health?deployment=blue"]));
      });
    } finally {
      server.stop(true);
    }
  });

  // A probe that succeeds and closes the breaker again: test/upstream/pool.test.ts, on an injected clock.
  test("a refused connection and an upstream time-out each count against the server: the next request finds the breaker open", async () => {
    await withModels(
      [{ id: "m", backend: "openai", base_url: [refused], upstream_model: "usage-10-5", breaker_failures: 1, breaker_cooldown_ms: 200 }],
      async (sluice) => {
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(502);
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(503);
      },
    );
    await withModels(
      [{ id: "m", backend: "openai", base_url: upstream.url, upstream_model: "hang", timeout_ms: 100, breaker_failures: 1, breaker_cooldown_ms: 200 }],
      async (sluice) => {
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(502);
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(503);
      },
    );
  });
});

describe("time limits", () => {
  test("first byte: an upstream that never answers is cut off at first_byte_timeout_ms", async () => {
    await withModels([{ id: "m", backend: "openai", base_url: upstream.url, upstream_model: "hang", first_byte_timeout_ms: 150 }], async (sluice) => {
      const started = performance.now();
      expect(await codeOf(await sluice.post("/v1/chat/completions", { model: "m", messages, stream: true }))).toEqual({ status: 502, code: "upstream_error" });
      expect(performance.now() - started).toBeLessThan(1000);
      await eventually(() => upstream.inFlight === 0);
    });
  });

  test("idle stream: a stream that goes silent ends with a final error event; an endless one ends at timeout_ms", async () => {
    await withModels(
      [
        { id: "silent", backend: "openai", base_url: upstream.url, upstream_model: "goes-silent", idle_timeout_ms: 150 },
        { id: "endless", backend: "openai", base_url: upstream.url, upstream_model: "endless", timeout_ms: 400 },
      ],
      async (sluice) => {
        for (const model of ["silent", "endless"]) {
          const events = await readSse(await sluice.post("/v1/chat/completions", { model, messages: [{ role: "user", content: "tell me" }], stream: true }));
          expect(events.at(-1)).toBe("[DONE]");
          expect((events.at(-2) as { error: { code: string } }).error.code).toBe("upstream_error");
        }
        await eventually(() => upstream.inFlight === 0 && sluice.server.admission.inFlight() === 0);
        const rows = sluice.ledgerRows();
        expect(rows.map((row) => row.outcome)).toEqual(["upstream_error", "upstream_error"]);
        expect(rows.every((row) => row.completion_tokens > 0)).toBe(true);
      },
    );
  });
});

describe("upstream faults mid-stream", () => {
  test("a connection reset mid-stream: a final error event, the partial answer billed, nothing left in flight", async () => {
    await withModels([{ id: "m", backend: "openai", base_url: upstream.url, upstream_model: "reset-midstream" }], async (sluice) => {
      const response = await sluice.post("/v1/chat/completions", { model: "m", messages, stream: true, stream_options: { include_usage: true } });
      const events = await readSse(response);
      expect(events.at(-1)).toBe("[DONE]");
      expect((events.at(-2) as { error: { code: string } }).error.code).toBe("upstream_error");
      const row = sluice.ledgerRows()[0]!;
      expect(row).toMatchObject({ outcome: "upstream_error", usage_source: "tokenizer" });
      expect(row.completion_tokens).toBeGreaterThan(0);
      expect(sluice.server.admission.reservedTokens()).toBe(0);
    });
  });

  test("streams that break mid-stream count against their server: the breaker opens, and a failed probe opens it again", async () => {
    await withModels(
      [{ id: "m", backend: "openai", base_url: upstream.url, upstream_model: "reset-midstream", breaker_failures: 2, breaker_cooldown_ms: 200 }],
      async (sluice) => {
        const streamed = () => sluice.post("/v1/chat/completions", { model: "m", messages, stream: true });
        const expectBroken = async (response: Response) => {
          expect(response.status).toBe(200);
          const events = await readSse(response);
          expect(events.at(-1)).toBe("[DONE]");
          expect((events.at(-2) as { error: { code: string } }).error.code).toBe("upstream_error");
        };
        for (let index = 0; index < 2; index++) await expectBroken(await streamed());
        expect(await codeOf(await streamed())).toEqual({ status: 503, code: "model_unavailable" });
        expect(upstream.bodies.length).toBe(2);
        await Bun.sleep(250);
        await expectBroken(await streamed());
        expect(await codeOf(await streamed())).toEqual({ status: 503, code: "model_unavailable" });
        expect(upstream.bodies.length).toBe(3);
        // The three streams that broke are billed for what they relayed; the refusals bill nothing.
        expect(sluice.ledgerRows().filter((row) => row.completion_tokens > 0).length).toBe(3);
        expect(sluice.server.admission.inFlight()).toBe(0);
      },
    );
  });

  test("a client that leaves a probe's stream early does not leave the server's breaker stuck", async () => {
    await withModels(
      [
        {
          id: "m",
          backend: "openai",
          base_url: upstream.url,
          upstream_model: "goes-silent",
          idle_timeout_ms: 300,
          breaker_failures: 1,
          breaker_cooldown_ms: 100,
        },
      ],
      async (sluice) => {
        const streamed = (signal?: AbortSignal) => sluice.post("/v1/chat/completions", { model: "m", messages, stream: true }, {}, signal);
        await readSse(await streamed());
        expect(await codeOf(await streamed())).toEqual({ status: 503, code: "model_unavailable" });
        await Bun.sleep(150);
        const leaving = new AbortController();
        const probe = await streamed(leaving.signal);
        expect(probe.status).toBe(200);
        await (probe.body as ReadableStream<Uint8Array>).getReader().read();
        leaving.abort();
        await eventually(() => sluice.server.admission.inFlight() === 0);
        // Neither failed nor stuck as a probe: the next request probes the server again.
        const next = await streamed();
        expect(next.status).toBe(200);
        await readSse(next);
        expect(upstream.bodies.length).toBe(3);
      },
    );
  });
});
