import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { tracingSettings, type TracingSettings } from "../../src/tracing/settings";
import { capturingLogger, eventually, failureOf, fakeModel, httpPost, sentThreeTimes, useFakeUpstream, withSluice } from "../helpers";
import { startFakeCollector, type ReceivedSpan } from "../support/otlp-collector";

const upstream = useFakeUpstream({ resetBeforeEach: true });
const collector = startFakeCollector();
afterAll(() => collector.stop());
beforeEach(() => {
  collector.spans.length = 0;
  collector.posts.length = 0;
  collector.delayMs = 0;
  collector.status = 200;
  collector.refused = 0;
});

const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
const callerSpan = "00f067aa0ba902b7";
const traceparent = `00-${callerTrace}-${callerSpan}-01`;
const question = [{ role: "user" as const, content: "hi" }];

/** Tracing to the stand-in collector, read from the variables an operator would set, batches sent within 10 ms. */
function tracingTo(url: string, variables: Record<string, string> = {}): TracingSettings {
  return tracingSettings({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: url, OTEL_BSP_SCHEDULE_DELAY: "10", ...variables }) as TracingSettings;
}

function serverSpanOf(requestId: string): ReceivedSpan | undefined {
  return collector.spans.find((span) => span.kind === 2 && span.attributes["sluice.request_id"] === requestId);
}

function childrenOf(span: ReceivedSpan): ReceivedSpan[] {
  return collector.spans.filter((child) => child.parentSpanId === span.spanId && child.traceId === span.traceId);
}

/** The upstream calls' traceparents, in order: each names its client span as the parent. */
function upstreamParents(): string[] {
  return upstream.requests.filter((request) => request.path.includes("/chat/completions")).map((request) => request.headers.traceparent ?? "");
}

describe("spans exported over OTLP", () => {
  test("a request's span sits under the caller's, and its upstream call's span is the parent the model server is sent", async () => {
    const logs = capturingLogger();
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        const { response } = await sluice
          .client()
          .chat.completions.create({ model: "m", messages: question }, { headers: { traceparent, tracestate: "congo=t61rcWkgMzE" } })
          .withResponse();
        const requestId = response.headers.get("x-request-id") as string;
        await eventually(() => collector.spans.length === 2);
        const server = serverSpanOf(requestId) as ReceivedSpan;
        expect(server).toMatchObject({
          traceId: callerTrace,
          parentSpanId: callerSpan,
          traceState: "congo=t61rcWkgMzE",
          name: "POST /v1/chat/completions",
          status: { code: 0 },
          resource: { "service.name": "sluice" },
        });
        expect(server.attributes).toMatchObject({
          "http.request.method": "POST",
          "http.route": "/v1/chat/completions",
          "http.response.status_code": 200,
          "gen_ai.operation.name": "chat",
          "gen_ai.request.model": "m",
          "gen_ai.usage.input_tokens": 10,
          "gen_ai.usage.output_tokens": 5,
          "sluice.organization_id": (await sluice.organizations.findByName("acme"))?.id as string,
          "sluice.outcome": "completed",
        });
        const [call] = childrenOf(server);
        expect(call).toMatchObject({ kind: 3, name: "chat usage-10-5", traceState: "congo=t61rcWkgMzE", status: { code: 0 } });
        expect(call?.attributes).toMatchObject({
          "gen_ai.operation.name": "chat",
          "gen_ai.request.model": "usage-10-5",
          "http.response.status_code": 200,
          "server.address": "127.0.0.1",
          "sluice.upstream_request_id": requestId,
        });
        expect(call?.attributes["url.full"]).toBe(`${upstream.url}/chat/completions`);
        // The model server is told its caller is the call's span, in the caller's trace, with the caller's vendors' state.
        expect(upstream.requests.at(-1)?.headers.traceparent).toBe(`00-${callerTrace}-${call?.spanId}-01`);
        expect(upstream.requests.at(-1)?.headers.tracestate).toBe("congo=t61rcWkgMzE");
        // The call lies within the request.
        expect(BigInt(call?.startTimeUnixNano as string)).toBeGreaterThanOrEqual(BigInt(server.startTimeUnixNano));
        expect(BigInt(call?.endTimeUnixNano as string)).toBeLessThanOrEqual(BigInt(server.endTimeUnixNano));
        expect(BigInt(server.endTimeUnixNano) - BigInt(server.startTimeUnixNano)).toBeGreaterThan(0n);
        expect(Math.abs(Number(BigInt(server.startTimeUnixNano) / 1_000_000n) - Date.now())).toBeLessThan(10_000);
        expect(logs.lines.find((line) => line.request_id === requestId)?.trace_id).toBe(callerTrace);
      },
      { tracing: tracingTo(collector.url), logger: logs.logger },
    );
  });

  test("a request without a trace starts one; a stream's span ends with the stream and marks its first token", async () => {
    const logs = capturingLogger();
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        const stream = await sluice.client().chat.completions.create({ model: "m", messages: question, stream: true }).withResponse();
        for await (const _ of stream.data) {
          // read to the end
        }
        const requestId = stream.response.headers.get("x-request-id") as string;
        await eventually(() => serverSpanOf(requestId) !== undefined);
        const server = serverSpanOf(requestId) as ReceivedSpan;
        expect(server.traceId).toMatch(/^[0-9a-f]{32}$/);
        expect(server.parentSpanId ?? "").toBe("");
        expect(server.events.map((event) => event.name)).toEqual(["first_token"]);
        const firstToken = BigInt(server.events[0]?.timeUnixNano as string);
        expect(firstToken).toBeGreaterThan(BigInt(server.startTimeUnixNano));
        expect(firstToken).toBeLessThanOrEqual(BigInt(server.endTimeUnixNano));
        expect(server.attributes["gen_ai.usage.output_tokens"]).toBe(5);
        const [call] = childrenOf(server);
        expect(upstreamParents()).toEqual([`00-${server.traceId}-${call?.spanId}-01`]);
        expect(logs.lines.find((line) => line.request_id === requestId)?.trace_id).toBe(server.traceId);
      },
      { tracing: tracingTo(collector.url), logger: logs.logger },
    );
  });

  test("embeddings and the Messages API are traced the same way", async () => {
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "e", "usage-10-5")] },
      async (sluice) => {
        const embedded = await sluice.client().embeddings.create({ model: "e", input: "hi" }, { headers: { traceparent } }).withResponse();
        const response = await sluice.post("/v1/messages", { model: "m", max_tokens: 10, messages: question }, { "x-api-key": sluice.key });
        expect(response.status).toBe(200);
        await eventually(() => collector.spans.length === 4);
        const embeddingsSpan = serverSpanOf(embedded.response.headers.get("x-request-id") as string) as ReceivedSpan;
        expect(embeddingsSpan).toMatchObject({ traceId: callerTrace, name: "POST /v1/embeddings" });
        expect(embeddingsSpan.attributes["gen_ai.operation.name"]).toBe("embeddings");
        expect(childrenOf(embeddingsSpan).map((call) => call.name)).toEqual(["embeddings usage-10-5"]);
        const messagesSpan = serverSpanOf(response.headers.get("request-id") as string) as ReceivedSpan;
        expect(messagesSpan.name).toBe("POST /v1/messages");
        expect(childrenOf(messagesSpan).map((call) => call.name)).toEqual(["chat usage-10-5"]);
      },
      { tracing: tracingTo(collector.url) },
    );
  });

  test("a call sent again (another server, a fallback) is a span of its own; the refused ones are errors", async () => {
    await withSluice(
      { models: sentThreeTimes(upstream.url) },
      async (sluice) => {
        const { response } = await sluice.client().chat.completions.create({ model: "flaky", messages: question }, { headers: { traceparent } }).withResponse();
        const requestId = response.headers.get("x-request-id") as string;
        await eventually(() => collector.spans.length === 4);
        const server = serverSpanOf(requestId) as ReceivedSpan;
        expect(server.attributes).toMatchObject({ "gen_ai.request.model": "flaky", "gen_ai.response.model": "m", "sluice.fallback_from": "flaky" });
        const calls = childrenOf(server).sort((one, other) => Number(BigInt(one.startTimeUnixNano) - BigInt(other.startTimeUnixNano)));
        expect(calls.map((call) => [call.attributes["sluice.upstream_request_id"], call.attributes["http.response.status_code"], call.status.code])).toEqual([
          [requestId, 429, 2],
          [`${requestId}-2`, 429, 2],
          [`${requestId}-3`, 200, 0],
        ]);
        expect(calls[0]?.attributes["error.type"]).toBeString();
        expect(upstreamParents()).toEqual(calls.map((call) => `00-${callerTrace}-${call.spanId}-01`));
      },
      { tracing: tracingTo(collector.url) },
    );
  });

  test("a refused request has its span: a wrong key, a body that is not valid, an upstream that fails", async () => {
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "broken", "fail-500"), fakeModel(upstream.url, "e", "usage-10-5")] },
      async (sluice) => {
        const wrongKey = await failureOf(sluice.client({ apiKey: "sk-wrong" }).chat.completions.create({ model: "m", messages: question }));
        const wrongKeyEmbeddings = await failureOf(sluice.client({ apiKey: "sk-wrong" }).embeddings.create({ model: "e", input: "hi" }));
        const invalid = await sluice.post("/v1/chat/completions", { model: "m", messages: "not a list" });
        const failed = await failureOf(sluice.client().chat.completions.create({ model: "broken", messages: question }));
        await eventually(() => collector.spans.length === 5);
        const spanOf = (requestId: string | null | undefined) => serverSpanOf(requestId as string) as ReceivedSpan;
        for (const [refused, route] of [
          [wrongKey, "/v1/chat/completions"],
          [wrongKeyEmbeddings, "/v1/embeddings"],
        ] as const) {
          const span = spanOf(refused.headers?.get("x-request-id"));
          expect(span.name).toBe(`POST ${route}`);
          expect(span.attributes).toMatchObject({ "http.response.status_code": 401, "sluice.error_code": "invalid_api_key" });
          // A refusal of the caller's request is not the server's error.
          expect(span.status.code).toBe(0);
          expect(childrenOf(span)).toEqual([]);
        }
        expect(spanOf(invalid.headers.get("x-request-id")).attributes["http.response.status_code"]).toBe(400);
        const failedSpan = spanOf(failed.headers?.get("x-request-id"));
        expect(failedSpan.status).toEqual({ code: 2, message: failed.code as string });
        expect(failedSpan.attributes["error.type"]).toBe(failed.code as string);
        expect(childrenOf(failedSpan).map((call) => [call.attributes["http.response.status_code"], call.status.code])).toEqual([[500, 2]]);
      },
      { tracing: tracingTo(collector.url) },
    );
  });

  test("200 concurrent requests: every span exported once, each call under its own request", async () => {
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        const answers = await Promise.all(
          Array.from({ length: 200 }, (_, index) =>
            httpPost(`${sluice.url}/v1/chat/completions`, JSON.stringify({ model: "m", messages: question, stream: index % 2 === 0 }), {
              authorization: `Bearer ${sluice.key}`,
              "content-type": "application/json",
            }).then(async (response) => {
              await response.text();
              return response.headers.get("x-request-id") as string;
            }),
          ),
        );
        await eventually(() => collector.spans.length >= 400);
        expect(collector.spans.length).toBe(400);
        expect(new Set(collector.spans.map((span) => span.spanId)).size).toBe(400);
        expect(new Set(collector.spans.map((span) => span.traceId)).size).toBe(200);
        for (const requestId of answers) {
          const server = serverSpanOf(requestId) as ReceivedSpan;
          const calls = childrenOf(server);
          expect(calls.length).toBe(1);
          expect(calls[0]?.attributes["sluice.upstream_request_id"]).toBe(requestId);
        }
        // The model server was told each call's own span.
        expect(new Set(upstreamParents()).size).toBe(200);
        // Batches of at most 512 spans, as the batch processor's default bounds them.
        expect(collector.posts.every((post) => post.spans <= 512)).toBe(true);
        const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
        expect(metrics).toContain('sluice_trace_spans_total{result="exported"} 400');
      },
      { tracing: tracingTo(collector.url) },
    );
  });
});

test("a request that waited for its model's slot says how long on its span", async () => {
  await withSluice(
    { models: [fakeModel(upstream.url, "one", "slow-5-20", { max_concurrency: 1, queue_size: 2, queue_timeout_ms: 30_000 })] },
    async (sluice) => {
      const [first, second] = await Promise.all([
        sluice.post("/v1/chat/completions", { model: "one", messages: question }),
        Bun.sleep(20).then(() => sluice.post("/v1/chat/completions", { model: "one", messages: question })),
      ]);
      await Promise.all([first?.text(), second?.text()]);
      await eventually(() => collector.spans.length === 4);
      expect(serverSpanOf(first?.headers.get("x-request-id") as string)?.attributes["sluice.queue_wait_ms"]).toBeUndefined();
      expect(serverSpanOf(second?.headers.get("x-request-id") as string)?.attributes["sluice.queue_wait_ms"]).toBeGreaterThan(40);
    },
    { tracing: tracingTo(collector.url) },
  );
});

describe("sampling", () => {
  test("parent-based (the default): a caller's trace it does not sample is passed on unchanged and nothing is recorded", async () => {
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        const unsampled = `00-${callerTrace}-${callerSpan}-00`;
        await sluice.client().chat.completions.create({ model: "m", messages: question }, { headers: { traceparent: unsampled } });
        expect(upstream.requests.at(-1)?.headers.traceparent).toBe(unsampled);
        await sluice.client().chat.completions.create({ model: "m", messages: question }, { headers: { traceparent } });
        await eventually(() => collector.spans.length === 2);
        await Bun.sleep(50);
        expect(collector.spans.every((span) => span.traceId === callerTrace && span.parentSpanId !== undefined)).toBe(true);
        expect(collector.spans.length).toBe(2);
      },
      { tracing: tracingTo(collector.url) },
    );
  });

  test("parentbased_traceidratio at 0 records no trace of its own but follows a caller's; always_on records every request", async () => {
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        await sluice.client().chat.completions.create({ model: "m", messages: question });
        expect(upstream.requests.at(-1)?.headers.traceparent).toBeUndefined();
        await sluice.client().chat.completions.create({ model: "m", messages: question }, { headers: { traceparent } });
        await eventually(() => collector.spans.length === 2);
        await Bun.sleep(50);
        expect(collector.spans.map((span) => span.traceId)).toEqual([callerTrace, callerTrace]);
      },
      { tracing: tracingTo(collector.url, { OTEL_TRACES_SAMPLER: "parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG: "0" }) },
    );
    collector.spans.length = 0;
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        await sluice.client().chat.completions.create({ model: "m", messages: question }, { headers: { traceparent: `00-${callerTrace}-${callerSpan}-00` } });
        await eventually(() => collector.spans.length === 2);
        // Recorded, so the model server is told it is sampled.
        expect(upstream.requests.at(-1)?.headers.traceparent).toEndWith("-01");
      },
      { tracing: tracingTo(collector.url, { OTEL_TRACES_SAMPLER: "always_on" }) },
    );
  });

  test("traceidratio keeps about its share of traces", async () => {
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        for (let index = 0; index < 200; index++) {
          const response = await sluice.post("/v1/chat/completions", { model: "m", messages: question });
          await response.text();
        }
        await Bun.sleep(100);
        const traces = new Set(collector.spans.map((span) => span.traceId)).size;
        // 200 draws at one in four: 50 expected, outside 20..80 one time in a few million.
        expect(traces).toBeGreaterThan(20);
        expect(traces).toBeLessThan(80);
        expect(upstreamParents().filter((parent) => parent !== "").length).toBe(traces);
      },
      { tracing: tracingTo(collector.url, { OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.25" }) },
    );
  });
});

describe("the exporter", () => {
  test("a collector that refuses the export costs requests nothing: its spans are counted as failed and logged once", async () => {
    const logs = capturingLogger();
    collector.status = 401;
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        for (let index = 0; index < 3; index++) {
          await sluice.client().chat.completions.create({ model: "m", messages: question });
          await Bun.sleep(30);
        }
        await eventually(() => logs.lines.some((line) => line.message === "trace export failed"));
        await Bun.sleep(50);
        const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
        expect(metrics).toContain('sluice_trace_spans_total{result="failed"} 6');
        // The others are there at 0, for alerts to see their first increase.
        expect(metrics).toContain('sluice_trace_spans_total{result="exported"} 0');
        expect(metrics).toContain('sluice_trace_spans_total{result="dropped"} 0');
        const failures = logs.lines.filter((line) => line.message === "trace export failed");
        expect(failures.length).toBe(1);
        expect(failures[0]).toMatchObject({ level: "warn", reason: "the collector answered 401", endpoint: collector.url });
        // Refused for good: each batch was sent once.
        expect(collector.refused).toBe(3);
      },
      { tracing: tracingTo(collector.url), logger: logs.logger },
    );
  });

  test("a collector restarting (503) gets the batch again a second later; nothing is lost", async () => {
    collector.status = 503;
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        await sluice.client().chat.completions.create({ model: "m", messages: question });
        await eventually(() => collector.refused === 1);
        // Full batches meanwhile wait for the resend's time: a collector that is down is not asked at every batch.
        for (let index = 0; index < 3; index++) await sluice.client().chat.completions.create({ model: "m", messages: question });
        await Bun.sleep(300);
        expect(collector.refused).toBe(1);
        collector.status = 200;
        await eventually(() => collector.spans.length === 8, 3000);
        const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
        expect(metrics).toContain('sluice_trace_spans_total{result="exported"} 8');
        expect(metrics).toContain('sluice_trace_spans_total{result="failed"} 0');
      },
      { tracing: tracingTo(collector.url, { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "2" }) },
    );
  });

  test("beyond the queue's bound spans are dropped and counted, never held", async () => {
    collector.delayMs = 300;
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        for (let index = 0; index < 10; index++) await sluice.client().chat.completions.create({ model: "m", messages: question });
        let metrics = "";
        const count = (result: string) => Number(new RegExp(`sluice_trace_spans_total\\{result="${result}"\\} (\\d+)`).exec(metrics)?.[1] ?? 0);
        for (let waited = 0; waited < 5000 && count("exported") + count("dropped") < 20; waited += 50) {
          await Bun.sleep(50);
          metrics = await (await fetch(`${sluice.url}/metrics`)).text();
        }
        expect(count("dropped")).toBeGreaterThan(0);
        expect(count("exported") + count("dropped")).toBe(20);
        expect(collector.spans.length).toBe(count("exported"));
      },
      { tracing: tracingTo(collector.url, { OTEL_BSP_MAX_QUEUE_SIZE: "4", OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "2" }) },
    );
  });

  test("a stop sends the spans still held, with the operator's headers", async () => {
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        await sluice.client().chat.completions.create({ model: "m", messages: question });
        await Bun.sleep(50);
        // The batch's time is an hour away.
        expect(collector.spans.length).toBe(0);
      },
      { tracing: tracingTo(collector.url, { OTEL_BSP_SCHEDULE_DELAY: "3600000", OTEL_EXPORTER_OTLP_HEADERS: "x-honeycomb-team=key%20one,tenant=acme" }) },
    );
    expect(collector.spans.length).toBe(2);
    expect(collector.posts[0]?.headers).toMatchObject({ "x-honeycomb-team": "key one", tenant: "acme", "content-type": "application/json" });
  });

  test("a collector that hangs holds a stop for 5 s at most", async () => {
    collector.delayMs = 60_000;
    const startedAt = { at: 0 };
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      async (sluice) => {
        await sluice.client().chat.completions.create({ model: "m", messages: question });
        startedAt.at = performance.now();
      },
      { tracing: tracingTo(collector.url, { OTEL_BSP_SCHEDULE_DELAY: "3600000", OTEL_EXPORTER_OTLP_TIMEOUT: "600000" }) },
    );
    const stopMs = performance.now() - startedAt.at;
    expect(stopMs).toBeGreaterThan(4500);
    expect(stopMs).toBeLessThan(7000);
    expect(collector.spans.length).toBe(0);
  }, 15_000);
});
