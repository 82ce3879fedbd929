import { describe, expect, test } from "bun:test";
import type { ModelConfig } from "../../src/config/schema";
import { SluiceError } from "../../src/errors";
import { affinityOf, affinityWeight } from "../../src/upstream/affinity";
import { UpstreamPool } from "../../src/upstream/pool";
import type { CompletionEvent } from "../../src/upstream/types";
import { whole } from "../fake-upstream";
import { useFakeUpstream } from "../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });

function model(baseUrls: string[]): ModelConfig {
  return {
    id: "m",
    prefix: undefined,
    aliases: [],
    fallbacks: [],
    contextFallbacks: [],
    backend: "openai",
    baseUrls,
    upstreamModel: "usage-10-5",
    apiKeyEnv: undefined,
    apiKeyFile: undefined,
    apiKeyHeader: undefined,
    headers: {},
    ownedBy: "test",
    contextWindow: 100_000,
    maxOutputTokens: 1000,
    quotaWeight: 1,
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
    // The pool's tests run on an injected clock: no health checks on the real one.
    healthCheckMs: 0,
    healthCheckPath: undefined,
    breakerFailureRate: 0.5,
    breakerWindow: 20,
    routing: "least_busy",
    affinitySlack: 4,
  };
}

function request(config: ModelConfig) {
  const body = { model: config.upstreamModel, messages: [{ role: "user", content: "hi" }], stream: true };
  return { model: config, body, signal: new AbortController().signal, requestId: "req_test", sent: 0, trace: undefined };
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

/** A model server the test steers: each call answers as `mode` says (`alternate`: fails every other call, the first answered). */
function steeredServer() {
  const server = {
    mode: "ok" as "ok" | "fail" | "alternate",
    calls: 0,
    failures: 0,
    listener: Bun.serve({
      port: 0,
      fetch() {
        server.calls++;
        const fails = server.mode === "fail" || (server.mode === "alternate" && server.calls % 2 === 0);
        if (fails) {
          server.failures++;
          return Response.json({ error: { message: "CUDA error" } }, { status: 500 });
        }
        return Response.json(whole("usage-10-5", "ok", null, { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }));
      },
    }),
    get url() {
      return `http://127.0.0.1:${server.listener.port}/v1`;
    },
  };
  return server;
}

/** `batches` rounds of four whole answers at once (so that both servers take calls), and how many failed. */
async function callInBatches(pool: UpstreamPool, config: ModelConfig, batches: number): Promise<number> {
  let failed = 0;
  for (let batch = 0; batch < batches; batch++) {
    const asked = requestFor(config, "usage-10-5");
    const codes = await Promise.all(Array.from({ length: 4 }, () => codeOf(pool.complete({ ...asked, body: { ...asked.body, stream: false } }))));
    failed += codes.filter((code) => code !== undefined).length;
  }
  return failed;
}

test("a server that fails every other call, never many in a row, is taken out for its failure rate while another server is up", async () => {
  const flaky = steeredServer();
  try {
    const without = { ...model([flaky.url, upstream.url]), breakerFailures: 5, breakerWindow: 10, breakerFailureRate: 0 };
    flaky.mode = "alternate";
    // Without the rate: it keeps its share of the calls, and fails half of them.
    expect(await callInBatches(new UpstreamPool(without, undefined, () => 0), without, 25)).toBeGreaterThanOrEqual(20);
    expect(flaky.calls).toBeGreaterThanOrEqual(40);

    const callsWithout = flaky.calls;
    flaky.calls = 0;
    flaky.failures = 0;
    const config = { ...without, breakerFailureRate: 0.5 };
    const pool = new UpstreamPool(config, undefined, () => 0);
    const failed = await callInBatches(pool, config, 25);
    // Out once 5 of its last 10 calls failed (a batch's calls already on their way end there too).
    expect(flaky.calls).toBeLessThanOrEqual(13);
    expect(failed).toBe(flaky.failures);
    expect(failed).toBeLessThanOrEqual(7);
    // A 500 is not sent again: each of the 100 calls reached one server once.
    expect(upstream.bodies.length + callsWithout + flaky.calls).toBe(200);
    const [out, good] = pool.servers();
    expect(out).toMatchObject({ state: "out", outFor: "failure_rate", recentCalls: 10 });
    expect(out?.recentFailures).toBeGreaterThanOrEqual(5);
    expect(out?.failures).toBeLessThan(5);
    expect(good).toMatchObject({ state: "up", outFor: null, recentFailures: 0, inFlight: 0 });
  } finally {
    await flaky.listener.stop(true);
  }
});

test("two servers that both fail every other call: one is taken out for its rate, never the last one up", async () => {
  const first = steeredServer();
  const second = steeredServer();
  first.mode = "alternate";
  second.mode = "alternate";
  try {
    const config = { ...model([first.url, second.url]), breakerFailures: 5, breakerWindow: 10 };
    const pool = new UpstreamPool(config, undefined, () => 0);
    await callInBatches(pool, config, 25);
    const states = pool.servers().map((server) => server.state);
    expect(states.filter((state) => state === "up").length).toBe(1);
    expect(states.filter((state) => state === "out").length).toBe(1);
    // The one left up answered the rest: half of them.
    expect(Math.max(first.calls, second.calls)).toBeGreaterThanOrEqual(80);
  } finally {
    await first.listener.stop(true);
    await second.listener.stop(true);
  }
});

test("a server out for its rate is probed after the cooldown, longer each time in a row, and back to one cooldown after a clean window", async () => {
  const flaky = steeredServer();
  try {
    let now = 1_000_000;
    const config = { ...model([flaky.url, upstream.url]), breakerFailures: 5, breakerWindow: 10, breakerCooldownMs: 1000 };
    const pool = new UpstreamPool(config, undefined, () => now);
    const outFor = () => (pool.servers()[0]?.outUntil ?? now) - now;
    flaky.mode = "alternate";
    await callInBatches(pool, config, 25);
    expect(outFor()).toBe(1000);

    // The probe succeeds: back, judged afresh.
    now += 1001;
    flaky.mode = "ok";
    const callsBefore = flaky.calls;
    expect(await callInBatches(pool, config, 1)).toBe(0);
    expect(flaky.calls).toBeGreaterThan(callsBefore);
    expect(pool.servers()[0]).toMatchObject({ state: "up", outFor: null });
    // Failing half its calls again before a clean window: out for two cooldowns.
    flaky.mode = "alternate";
    await callInBatches(pool, config, 25);
    expect(pool.servers()[0]).toMatchObject({ state: "out", outFor: "failure_rate" });
    expect(outFor()).toBe(2000);
    // The probe fails: out again at once, for three.
    now += 2001;
    flaky.mode = "fail";
    expect(pool.servers()[0]?.state).toBe("probing");
    expect(await callInBatches(pool, config, 1)).toBe(1);
    expect(outFor()).toBe(3000);

    // Back, and a whole window of calls without a failure: the next time out is one cooldown again.
    now += 3001;
    flaky.mode = "ok";
    await callInBatches(pool, config, 12);
    expect(pool.servers()[0]).toMatchObject({ state: "up", recentCalls: 10, recentFailures: 0 });
    flaky.mode = "alternate";
    await callInBatches(pool, config, 25);
    expect(outFor()).toBe(1000);
  } finally {
    await flaky.listener.stop(true);
  }
});

describe("routing by affinity", () => {
  /** Two addresses of one fake upstream (two servers to the pool), and a model routed by affinity over them. */
  function affinityModel(upstreamModel = "usage-10-5", extra: Partial<ModelConfig> = {}): ModelConfig {
    const port = new URL(upstream.url).port;
    return { ...model([`http://127.0.0.1:${port}/v1`, `http://localhost:${port}/v1`]), upstreamModel, routing: "affinity", ...extra };
  }

  function whole(pool: UpstreamPool, config: ModelConfig, affinity: number) {
    const asked = requestFor(config, config.upstreamModel);
    return pool.complete({ ...asked, body: { ...asked.body, stream: false }, affinity });
  }

  function callsByServer(pool: UpstreamPool): number[] {
    return pool.servers().map((server) => server.affinityCalls);
  }

  test("each conversation's calls go to one server, the same every time; conversations spread over both", async () => {
    const config = affinityModel();
    const pool = new UpstreamPool(config, undefined);
    const chosen: number[] = [];
    for (let conversation = 0; conversation < 200; conversation++) {
      const affinity = affinityOf(`conversation ${conversation}`, []);
      const servers = new Set<number>();
      for (let turn = 0; turn < 3; turn++) {
        const before = callsByServer(pool);
        await whole(pool, config, affinity);
        servers.add(callsByServer(pool).findIndex((calls, index) => calls > (before[index] as number)));
      }
      expect(servers.size).toBe(1);
      chosen.push([...servers][0] as number);
    }
    const onFirst = chosen.filter((server) => server === 0).length;
    expect(onFirst).toBeGreaterThan(60);
    expect(onFirst).toBeLessThan(140);
    expect(pool.servers().map((server) => server.affinityMovedAway)).toEqual([0, 0]);
    // Another pool (another instance) prefers the same servers.
    const other = new UpstreamPool(config, undefined);
    for (let conversation = 0; conversation < 20; conversation++) {
      const before = callsByServer(other);
      await whole(other, config, affinityOf(`conversation ${conversation}`, []));
      expect(callsByServer(other).findIndex((calls, index) => calls > (before[index] as number))).toBe(chosen[conversation] as number);
    }
  });

  test("a conversation's server busier than the least busy by more than affinity_slack: the call goes to the other", async () => {
    const config = affinityModel("usage-10-5-150", { affinitySlack: 2 });
    const pool = new UpstreamPool(config, undefined);
    const affinity = affinityOf("one conversation", []);
    await Promise.all(Array.from({ length: 6 }, () => whole(pool, config, affinity)));
    const [preferred, other] = [...pool.servers()].sort((left, right) => right.affinityCalls - left.affinityCalls);
    // In flight on its server 0, 1, 2: kept; 3 against 0 + 2: moved; 3 against 1 + 2: kept; 4 against 1 + 2: moved.
    expect(preferred).toMatchObject({ affinityCalls: 4, affinityMovedAway: 2, inFlight: 0 });
    expect(other).toMatchObject({ affinityCalls: 0, affinityMovedAway: 0, inFlight: 0 });
    expect(upstream.bodies.length).toBe(6);
  });

  test("a conversation's server out: its calls go to another until a probe brings it back, then return", async () => {
    const first = steeredServer();
    const second = steeredServer();
    try {
      let now = 0;
      const config = { ...model([first.url, second.url]), routing: "affinity" as const, breakerFailures: 1 };
      const pool = new UpstreamPool(config, undefined, () => now);
      // A conversation that prefers the first server.
      let key = 0;
      while (affinityWeight(affinityOf(`c${key}`, []), Bun.hash.xxHash32(first.url)) < affinityWeight(affinityOf(`c${key}`, []), Bun.hash.xxHash32(second.url)))
        key++;
      const affinity = affinityOf(`c${key}`, []);
      expect(await codeOf(whole(pool, config, affinity))).toBeUndefined();
      expect([first.calls, second.calls]).toEqual([1, 0]);
      first.mode = "fail";
      expect(await codeOf(whole(pool, config, affinity))).toBe("upstream_error");
      expect(await codeOf(whole(pool, config, affinity))).toBeUndefined();
      expect(await codeOf(whole(pool, config, affinity))).toBeUndefined();
      expect([first.calls, second.calls]).toEqual([2, 2]);
      now += config.breakerCooldownMs + 1;
      first.mode = "ok";
      for (let turn = 0; turn < 3; turn++) expect(await codeOf(whole(pool, config, affinity))).toBeUndefined();
      expect([first.calls, second.calls]).toEqual([5, 2]);
    } finally {
      await first.listener.stop(true);
      await second.listener.stop(true);
    }
  });
});

test("a conversation's opening names it: the same instructions and first user turn, whatever follows; prompt_cache_key first", () => {
  const opening = [
    { role: "system", text: "You are a coding agent." },
    { role: "user", text: "Fix the failing test." },
  ];
  const later = [...opening, { role: "assistant", text: "Done." }, { role: "user", text: "Now the docs." }];
  expect(affinityOf(undefined, later)).toBe(affinityOf(undefined, opening));
  expect(affinityOf(undefined, [opening[0] as never, { role: "user", text: "Another task." }])).not.toBe(affinityOf(undefined, opening));
  expect(affinityOf(undefined, [{ role: "system", text: "Another agent." }, opening[1] as never])).not.toBe(affinityOf(undefined, opening));
  expect(affinityOf("session-1", opening)).toBe(affinityOf("session-1", later.slice(1)));
  expect(affinityOf("session-1", opening)).not.toBe(affinityOf("session-2", opening));
  expect(affinityOf("", opening)).toBe(affinityOf(undefined, opening));
});
