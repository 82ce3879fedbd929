import { describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { ConfigError, resolveConfig } from "../../src/config/load";
import { callerContextOf } from "../../src/tracing/trace-context";
import { capturingLogger, fakeModel, sentThreeTimes, useFakeUpstream, withSluice } from "../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("the caller's trace context", () => {
  test("a valid traceparent is kept with its tracestate; an invalid one is ignored with it", () => {
    const of = (headers: Record<string, string>) => callerContextOf(new Headers(headers));
    const parsed = { traceparent, traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", sampled: true };
    expect(of({ traceparent, tracestate: "congo=t61rcWkgMzE" })).toEqual({ ...parsed, tracestate: "congo=t61rcWkgMzE" });
    expect(of({ traceparent: `${traceparent.slice(0, -2)}00` })?.sampled).toBe(false);
    // A later version's extra fields are kept, as the specification says.
    expect(of({ traceparent: `01${traceparent.slice(2)}-what-comes-next` })?.traceparent).toBe(`01${traceparent.slice(2)}-what-comes-next`);
    for (const wrong of [
      "not a traceparent",
      `ff${traceparent.slice(2)}`,
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
    ]) {
      expect(of({ traceparent: wrong, tracestate: "congo=t61rcWkgMzE" })).toBeUndefined();
    }
    expect(of({ tracestate: "congo=t61rcWkgMzE" })).toBeUndefined();
    expect(of({ traceparent, tracestate: "x".repeat(10_000) })).toEqual({ ...parsed, tracestate: undefined });
  });

  test("a model's headers may not set x-request-id or the trace context: Sluice sets them", () => {
    for (const name of ["X-Request-Id", "traceparent", "TraceState"]) {
      const file = { models: [{ ...fakeModel(upstream.url, "m", "usage-10-5"), headers: { [name]: "x" } }] };
      expect(() => resolveConfig(file)).toThrow(ConfigError);
      expect(() => resolveConfig(file)).toThrow("Sluice sets this header itself");
    }
  });
});

describe("what the upstream is sent", () => {
  test("each call carries the request's id as X-Request-Id and the caller's trace context; the log line names the trace", async () => {
    const logs = capturingLogger();
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "e", "usage-10-5")] },
      async (sluice) => {
        const client = sluice.client();
        const { response } = await client.chat.completions
          .create({ model: "m", messages: [{ role: "user", content: "hi" }] }, { headers: { traceparent, tracestate: "congo=t61rcWkgMzE" } })
          .withResponse();
        const whole = upstream.requests.at(-1)?.headers ?? {};
        expect(whole["x-request-id"]).toBe(response.headers.get("x-request-id") as string);
        expect([whole.traceparent, whole.tracestate]).toEqual([traceparent, "congo=t61rcWkgMzE"]);

        // Streamed, without a trace context: the id alone.
        const stream = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true }).withResponse();
        for await (const _ of stream.data) {
          // read to the end
        }
        const streamed = upstream.requests.at(-1)?.headers ?? {};
        expect(streamed["x-request-id"]).toBe(stream.response.headers.get("x-request-id") as string);
        expect(streamed.traceparent).toBeUndefined();

        // Embeddings, and the Messages API (translated onto the same path).
        const embedded = await client.embeddings.create({ model: "e", input: "hi" }, { headers: { traceparent } }).withResponse();
        expect(upstream.requests.at(-1)?.headers["x-request-id"]).toBe(embedded.response.headers.get("x-request-id") as string);
        expect(upstream.requests.at(-1)?.headers.traceparent).toBe(traceparent);
        const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
        const message = await anthropic.messages
          .create({ model: "m", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }, { headers: { traceparent } })
          .withResponse();
        expect(upstream.requests.at(-1)?.headers["x-request-id"]).toBe(message.response.headers.get("request-id") as string);
        expect(upstream.requests.at(-1)?.headers.traceparent).toBe(traceparent);

        // A malformed traceparent is not passed on.
        await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }, { headers: { traceparent: "garbage" } });
        expect(upstream.requests.at(-1)?.headers.traceparent).toBeUndefined();
        expect(upstream.requests.at(-1)?.headers["x-request-id"]).toMatch(/^req_/);

        const lines = logs.lines.filter((line) => line.message === "request" && line.route !== "/healthz");
        const byId = new Map(lines.map((line) => [line.request_id, line.trace_id]));
        expect(byId.get(response.headers.get("x-request-id"))).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
        expect(byId.get(stream.response.headers.get("x-request-id"))).toBeNull();
        expect(byId.get(embedded.response.headers.get("x-request-id"))).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
      },
      { logger: logs.logger },
    );
  });

  test("a request sent again (a fallback, another server) goes as ID-2, ID-3: vLLM refuses an id still running", async () => {
    await withSluice({ models: sentThreeTimes(upstream.url) }, async (sluice) => {
      const { response } = await sluice
        .client()
        .chat.completions.create({ model: "flaky", messages: [{ role: "user", content: "hi" }] }, { headers: { traceparent } })
        .withResponse();
      const requestId = response.headers.get("x-request-id") as string;
      const calls = upstream.requests.filter((request) => request.path.includes("/chat/completions"));
      expect(calls.map((call) => [call.headers["x-request-id"], call.headers.traceparent])).toEqual([
        [requestId, traceparent],
        [`${requestId}-2`, traceparent],
        [`${requestId}-3`, traceparent],
      ]);
    });
  });
});
