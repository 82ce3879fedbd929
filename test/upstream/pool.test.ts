import { expect, test } from "bun:test";
import type { ModelConfig } from "../../src/config/schema";
import { SluiceError } from "../../src/errors";
import { UpstreamPool } from "../../src/upstream/pool";
import type { CompletionEvent } from "../../src/upstream/types";
import { useFakeUpstream } from "../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });

function model(baseUrls: string[]): ModelConfig {
  return {
    id: "m",
    aliases: [],
    fallbacks: [],
    backend: "openai",
    baseUrls,
    upstreamModel: "usage-10-5",
    apiKeyEnv: undefined,
    apiKeyHeader: undefined,
    headers: {},
    ownedBy: "test",
    contextWindow: 100_000,
    maxOutputTokens: 1000,
    maxTokensField: undefined,
    enabled: true,
    timeoutMs: 10_000,
    streamDelayMs: 0,
    maxConcurrency: undefined,
    queueSize: 10,
    queueTimeoutMs: 1000,
    firstByteTimeoutMs: undefined,
    idleTimeoutMs: undefined,
    breakerFailures: 1,
    breakerCooldownMs: 60_000,
  };
}

function request(config: ModelConfig) {
  const body = { model: config.upstreamModel, messages: [{ role: "user", content: "hi" }], stream: true };
  return { model: config, body, signal: new AbortController().signal };
}

test("a pooled stream stopped before its first read opens no connection and leaves no probe held", async () => {
  const config = model([upstream.url]);
  const pool = new UpstreamPool(config, undefined);
  expect(await pool.stream(request(config)).return()).toEqual({ done: true, value: undefined });
  expect(upstream.bodies.length).toBe(0);
  // The next stream reads to its end as usual.
  const stream = pool.stream(request(config));
  const events: CompletionEvent[] = [];
  for (let result = await stream.next(); !result.done; result = await stream.next()) events.push(...result.value);
  expect(events.some((event) => event.type === "finish")).toBe(true);
  expect(upstream.bodies.length).toBe(1);

  // A server whose breaker waits for its probe: a stream stopped before its first read must not take the probe.
  let now = 0;
  const refused = model(["http://127.0.0.1:1/v1"]);
  const probed = new UpstreamPool(refused, undefined, () => now);
  expect(await codeOf(probed.stream(request(refused)).next())).toBe("upstream_error");
  now += refused.breakerCooldownMs + 1;
  expect(await probed.stream(request(refused)).return()).toEqual({ done: true, value: undefined });
  // The probe is still free: the next stream tries the server (and fails there) instead of finding it held.
  expect(await codeOf(probed.stream(request(refused)).next())).toBe("upstream_error");
  expect(await codeOf(probed.stream(request(refused)).next())).toBe("model_unavailable");
});

test("a pooled stream's first read moves to the other server when the connection is refused; the failure opens the breaker", async () => {
  const refused = "http://127.0.0.1:1/v1";
  const both = model([refused, upstream.url]);
  const stream = new UpstreamPool(both, undefined).stream(request(both));
  expect((await stream.next()).done).toBe(false);
  await stream.return();
  expect(upstream.bodies.length).toBe(1);

  const alone = model([refused]);
  const pool = new UpstreamPool(alone, undefined);
  expect(await codeOf(pool.stream(request(alone)).next())).toBe("upstream_error");
  // breaker_failures = 1: the stream's own generator told the breaker, which now keeps the server out.
  expect(await codeOf(pool.stream(request(alone)).next())).toBe("model_unavailable");
});

async function codeOf(read: Promise<unknown>): Promise<string | undefined> {
  try {
    await read;
    return undefined;
  } catch (error) {
    return error instanceof SluiceError ? error.code : String(error);
  }
}

/** A request for `upstreamModel` on the fake upstream, whatever the model's own upstream model. */
function requestFor(config: ModelConfig, upstreamModel: string) {
  const asked = request(config);
  return { ...asked, body: { ...asked.body, model: upstreamModel } };
}

test("a probe that succeeds closes the breaker, for a stream read to its end and for a whole answer", async () => {
  for (const kind of ["stream", "whole"] as const) {
    let now = 0;
    const config = { ...model([upstream.url]), breakerFailures: 2 };
    const pool = new UpstreamPool(config, undefined, () => now);
    const call = (upstreamModel: string) => {
      const asked = requestFor(config, upstreamModel);
      if (kind === "whole") return pool.complete({ ...asked, body: { ...asked.body, stream: false } });
      return (async () => {
        const stream = pool.stream(asked);
        for (let result = await stream.next(); !result.done; result = await stream.next());
      })();
    };
    expect(await codeOf(call("fail-500"))).toBe("upstream_error");
    expect(await codeOf(call("fail-500"))).toBe("upstream_error");
    expect(await codeOf(call("usage-10-5"))).toBe("model_unavailable");
    now += config.breakerCooldownMs + 1;
    // The probe, read to its end.
    expect(await codeOf(call("usage-10-5"))).toBeUndefined();
    // Closed, not half-open: two calls at once both reach the server (a half-open breaker lets one probe through),
    // and one more failure does not open it again (breaker_failures = 2 in a row).
    expect(await Promise.all([codeOf(call("usage-10-5")), codeOf(call("usage-10-5"))])).toEqual([undefined, undefined]);
    expect(await codeOf(call("fail-500"))).toBe("upstream_error");
    expect(await codeOf(call("usage-10-5"))).toBeUndefined();
  }
});

test("a server whose cooldown is over is probed by the next call, for a whole answer and a stream, though the other server is less busy", async () => {
  for (const kind of ["whole", "stream"] as const) {
    let now = 0;
    // The first server refuses connections; breaker_failures = 1, so one failure takes it out.
    const config = model(["http://127.0.0.1:1/v1", upstream.url]);
    const pool = new UpstreamPool(config, undefined, () => now);
    const call = async () => {
      const asked = requestFor(config, "usage-10-5");
      if (kind === "whole") return void (await pool.complete({ ...asked, body: { ...asked.body, stream: false } }));
      const stream = pool.stream(asked);
      for (let result = await stream.next(); !result.done; result = await stream.next());
    };
    // The refused server first (in turn), then the retry on the other.
    await call();
    expect(pool.servers().map((server) => [server.state, server.failures])).toEqual([
      ["out", 1],
      ["up", 0],
    ]);
    await call();
    expect(pool.servers()[0]?.failures).toBe(1);
    now += config.breakerCooldownMs + 1;
    // Its failure, counted as load, must not keep it from its probe: the probe finds it refusing again.
    await call();
    expect(pool.servers().map((server) => [server.state, server.failures, server.inFlight])).toEqual([
      ["out", 2, 0],
      ["up", 0, 0],
    ]);
  }
});
