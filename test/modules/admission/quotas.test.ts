import { describe, expect, test } from "bun:test";
import type { MemoryAdmissionStore } from "../../../src/modules/admission/memory-store";
import { join } from "node:path";
import OpenAI from "openai";
import type { ConfigFile } from "../../../src/config/schema";
import { countChatTokens } from "../../../src/tokens/count";
import {
  codeOf,
  countingClient,
  eventually,
  expectFiveHourQuotaAnswers,
  fakeModel,
  repositoryRoot,
  startSluice,
  temporaryDirectory,
  useFakeUpstream,
  withSluice,
} from "../../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });

const messages = [{ role: "user", content: "hi" }];

function config(plan: Record<string, unknown>, models: ReturnType<typeof fakeModel>[]): ConfigFile {
  return { models, plans: [{ id: "limited", models: ["*"], ...plan }] };
}

describe("concurrency cap", () => {
  test("500 concurrent requests, max_concurrency = 3: the upstream never sees more than 3; the rest get 429; nothing leaks", async () => {
    await withSluice(config({ max_concurrency: 3 }, [fakeModel(upstream.url, "m", "usage-10-5-30")]), async (sluice) => {
      const responses = await Promise.all(Array.from({ length: 500 }, () => sluice.post("/v1/chat/completions", { model: "m", messages })));
      const rejected = responses.filter((response) => response.status === 429);
      for (const response of rejected) {
        expect(response.headers.get("retry-after")).toBe("1");
        expect(response.headers.get("x-should-retry")).toBeNull();
        expect(await codeOf(response)).toBe("rate_limit_exceeded");
      }
      const succeeded = responses.filter((response) => response.status === 200);
      expect(succeeded.length + rejected.length).toBe(500);
      expect(succeeded.length).toBeGreaterThanOrEqual(3);
      expect(upstream.maxInFlight).toBeLessThanOrEqual(3);
      await eventually(() => upstream.inFlight === 0);
      expect(sluice.server.admission.inFlight()).toBe(0);
      expect(sluice.ledgerRows().length).toBe(succeeded.length);
    });
  }, 30_000);
});

describe("5-hour quota", () => {
  test("200 concurrent requests against room for about 5: never over the README's bound, 429s with the right headers, nothing left reserved", async () => {
    const promptTokens = await countChatTokens([{ role: "user", text: "hi" }]);
    const maxTokens = 90;
    const quota = 5 * (promptTokens + maxTokens);
    await withSluice(config({ tokens_per_5h: quota }, [fakeModel(upstream.url, "m", `usage-${promptTokens}-${maxTokens}-20`)]), async (sluice) => {
      const responses = await Promise.all(
        Array.from({ length: 200 }, () => sluice.post("/v1/chat/completions", { model: "m", messages, max_tokens: maxTokens })),
      );
      const succeeded = await expectFiveHourQuotaAnswers(responses, quota, 4);
      const recorded = sluice.ledgerRows().reduce((sum, row) => sum + row.prompt_tokens + row.completion_tokens, 0);
      // README: usage can exceed the quota by at most max_tokens for each request admitted while the quota had room
      // (the upstream's prompt count equals Sluice's here).
      expect(recorded).toBeLessThanOrEqual(quota + succeeded.length * maxTokens);
      // With the prompt and the expected output reserved, this run never overspends at all.
      expect(recorded).toBeLessThanOrEqual(quota);
      expect(sluice.server.admission.reservedTokens()).toBe(0);
      expect(sluice.server.admission.inFlight()).toBe(0);
    });
  }, 30_000);

  test("plans without a 5-hour quota send no x-ratelimit headers", async () => {
    await withSluice(config({}, [fakeModel(upstream.url, "m", "usage-10-5")]), async (sluice) => {
      const response = await sluice.post("/v1/chat/completions", { model: "m", messages });
      expect(response.status).toBe(200);
      expect(response.headers.get("x-ratelimit-limit-tokens")).toBeNull();
    });
  });

  test("the window slides through the server: usage recorded at t frees at t + 5 h, and Retry-After is right to the second", async () => {
    let now = Date.UTC(2026, 10, 22, 9, 15, 42, 300);
    const start = now;
    await withSluice(
      config({ tokens_per_5h: 100 }, [fakeModel(upstream.url, "m", "usage-20-80")]),
      async (sluice) => {
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(200);
        now += 3_600_000 + 1234;
        const rejected = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(rejected.status).toBe(429);
        expect(rejected.headers.get("retry-after")).toBe(String(Math.ceil((start + 5 * 3_600_000 - now) / 1000)));
        now = start + 5 * 3_600_000 - 1;
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(429);
        now = start + 5 * 3_600_000;
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(200);
      },
      { clock: () => now },
    );
  });
});

describe("monthly quota", () => {
  test("429 insufficient_quota with x-should-retry false and Retry-After until the 1st; the SDK does not retry", async () => {
    let now = Date.UTC(2026, 10, 30, 22, 0, 0);
    await withSluice(
      config({ tokens_per_month: 100 }, [fakeModel(upstream.url, "m", "usage-20-80")]),
      async (sluice) => {
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(200);
        const response = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(response.status).toBe(429);
        expect(response.headers.get("x-should-retry")).toBe("false");
        expect(response.headers.get("retry-after")).toBe(String(2 * 3600));
        expect(await codeOf(response)).toBe("insufficient_quota");
        const { client, calls } = countingClient(sluice);
        const error = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).catch((caught: unknown) => caught);
        expect(error).toBeInstanceOf(OpenAI.RateLimitError);
        expect(calls()).toBe(1);
        now = Date.UTC(2026, 11, 1);
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(200);
      },
      { clock: () => now },
    );
  });
});

describe("the OpenAI SDK's retries", () => {
  test("exactly one request on a 5-hour quota 429; retries on a concurrency 429", async () => {
    await withSluice(
      {
        models: [fakeModel(upstream.url, "m", "usage-20-80"), fakeModel(upstream.url, "slow", "slow-1-400")],
        plans: [{ id: "limited", models: ["*"], tokens_per_5h: 100, max_concurrency: 1 }],
      },
      async (sluice) => {
        const { client, calls } = countingClient(sluice, 2);
        // Concurrency: one slow request holds the only slot; the SDK retries (after Retry-After: 1 s) and gets through.
        const holding = sluice.post("/v1/chat/completions", { model: "slow", messages, max_tokens: 1 });
        await eventually(() => upstream.inFlight === 1);
        const retried = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 5 });
        expect(retried.choices[0]?.message.content).toBe("fixed");
        expect(calls()).toBe(2);
        await (await holding).arrayBuffer();
        // Quota: used up now (the slow request and this one); the SDK must not retry.
        const error = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).catch((caught: unknown) => caught);
        expect(error).toBeInstanceOf(OpenAI.RateLimitError);
        expect((error as InstanceType<typeof OpenAI.RateLimitError>).code).toBe("rate_limit_exceeded");
        expect(calls()).toBe(3);
      },
    );
  }, 20_000);
});

describe("every path settles", () => {
  test("300 streams cancelled at random points, 100 upstream timeouts, 100 upstream 5xx: in-flight 0, nothing reserved, one ledger row per upstream request", async () => {
    await withSluice(
      {
        models: [
          fakeModel(upstream.url, "slow", "slow-30-10"),
          fakeModel(upstream.url, "hang", "hang", { timeout_ms: 1000 }),
          fakeModel(upstream.url, "fail", "fail-500"),
        ],
        plans: [{ id: "limited", models: ["*"], tokens_per_5h: 100_000_000, tokens_per_month: 1_000_000_000, max_concurrency: 1000 }],
      },
      async (sluice) => {
        // Cancelled at a random point of the stream (after 0 to 29 of its 30 words), and a few before the first byte.
        const statuses: number[] = [];
        const requestIds: string[] = [];
        const cancelled = Array.from({ length: 300 }, async (_, index) => {
          const controller = new AbortController();
          const wordsBeforeCancel = (index * 7) % 30;
          try {
            const response = await sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true }, {}, controller.signal);
            statuses.push(response.status);
            requestIds.push(response.headers.get("x-request-id") as string);
            const reader = (response.body as ReadableStream<Uint8Array>).getReader();
            let text = "";
            while (!text.includes(`word${wordsBeforeCancel} `)) {
              const { value, done } = await reader.read();
              if (done) break;
              text += new TextDecoder().decode(value);
            }
            controller.abort();
          } catch {
            // aborted, as intended
          }
        });
        const early = Array.from({ length: 50 }, async (_, index) => {
          try {
            await sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true }, {}, AbortSignal.timeout(1 + index));
          } catch {
            // aborted before the first byte, as intended
          }
        });
        const timeouts = Array.from({ length: 100 }, () => sluice.post("/v1/chat/completions", { model: "hang", messages }).then(codeOf));
        const failures = Array.from({ length: 100 }, (_, index) =>
          sluice.post("/v1/chat/completions", { model: "fail", messages, stream: index % 2 === 0 }).then(codeOf),
        );
        await Promise.all([...cancelled, ...early]);
        expect(statuses).toEqual(Array.from({ length: 300 }, () => 200));
        expect(new Set(await Promise.all(timeouts))).toEqual(new Set(["upstream_error"]));
        expect(new Set(await Promise.all(failures))).toEqual(new Set(["upstream_error"]));
        await eventually(() => upstream.inFlight === 0 && sluice.server.admission.inFlight() === 0, 10_000);
        expect(sluice.server.admission.reservedTokens()).toBe(0);
        // A cancelled stream has no answer to hold back: its row is committed by the writer thread just after its
        // slot is released. Wait until every answered stream has its row and the ledger's total has caught up with
        // admission's (the early cancels' rows too); the assertions below still fail on any row that never comes.
        const recordedAll = () => {
          const rowsNow = sluice.ledgerRows();
          const ids = new Set(rowsNow.map((row) => row.request_id));
          const total = rowsNow.reduce((sum, row) => sum + row.prompt_tokens + row.completion_tokens, 0);
          const used =
            rowsNow.length === 0
              ? -1
              : (sluice.server.admission as MemoryAdmissionStore).snapshot(
                  rowsNow[0]!.organization_id,
                  { id: "limited", models: ["*"], tokensPer5h: 1 },
                  Date.now(),
                ).fiveHours.used;
          return requestIds.every((id) => ids.has(id)) && total === used;
        };
        await eventually(recordedAll, 5000).catch(() => undefined);
        const rows = sluice.ledgerRows();
        const bodiesFor = (model: string) => upstream.bodies.filter((body) => body.model === model).length;
        expect(new Set(rows.map((row) => row.request_id)).size).toBe(rows.length);
        expect(rows.filter((row) => row.model === "fail").length).toBe(bodiesFor("fail-500"));
        expect(bodiesFor("fail-500")).toBe(100);
        // A timed-out request is recorded (with nothing billed): the connection was made, the upstream never answered.
        // The fake, busy in this same process, may not have read every one of them before Sluice gave up.
        const hangRows = rows.filter((row) => row.model === "hang");
        expect(hangRows.length).toBe(100);
        expect(hangRows.every((row) => row.prompt_tokens + row.completion_tokens === 0)).toBe(true);
        expect(bodiesFor("hang")).toBeGreaterThan(0);
        expect(bodiesFor("hang")).toBeLessThanOrEqual(100);
        // Every slow stream that reached the upstream is in the ledger, cancelled or not, billed for what it produced.
        const slowRows = rows.filter((row) => row.model === "slow");
        const recordedIds = new Set(slowRows.map((row) => row.request_id));
        expect(requestIds.filter((id) => !recordedIds.has(id))).toEqual([]);
        // The early cancels left a row only if the upstream had accepted them: never more rows than requests it got.
        expect(slowRows.length).toBeLessThanOrEqual(bodiesFor("slow-30-10"));
        expect(slowRows.length).toBeGreaterThanOrEqual(300);
        // Each cancel point (0-29 words) is used by 10 streams; those cancelled after the last two words may finish
        // before the abort reaches the server (the answer then waits for its commit): completed, nothing else.
        expect(slowRows.filter((row) => row.outcome === "client_disconnected").length).toBeGreaterThanOrEqual(280);
        expect(slowRows.every((row) => row.outcome === "client_disconnected" || row.outcome === "completed")).toBe(true);
        expect(slowRows.filter((row) => row.completion_tokens > 0).length).toBeGreaterThanOrEqual(290);
        // What the ledger says equals what admission counted.
        const organizationId = rows[0]!.organization_id;
        const recorded = rows.reduce((sum, row) => sum + row.prompt_tokens + row.completion_tokens, 0);
        expect(
          (sluice.server.admission as MemoryAdmissionStore).snapshot(organizationId, { id: "limited", models: ["*"], tokensPer5h: 1 }, Date.now()).fiveHours
            .used,
        ).toBe(recorded);
      },
    );
  }, 60_000);
});

describe("fair queue", () => {
  test("one organization floods a model's queue; another's requests start within their fair share (order at the upstream)", async () => {
    await withSluice(
      { models: [fakeModel(upstream.url, "m", "slow-1-20", { max_concurrency: 1, queue_size: 100 })], plans: [{ id: "default", models: ["*"] }] },
      async (sluice) => {
        const other = await sluice.addOrganization("other");
        const flood = Array.from({ length: 20 }, (_, index) =>
          sluice.post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: `flood ${index}` }] }),
        );
        await eventually(() => sluice.server.queues.get("m")!.stats().queued === 19);
        const fair = Array.from({ length: 3 }, (_, index) =>
          sluice.post(
            "/v1/chat/completions",
            { model: "m", messages: [{ role: "user", content: `other ${index}` }] },
            { authorization: `Bearer ${other.key}` },
          ),
        );
        const statuses = (await Promise.all([...flood, ...fair])).map((response) => response.status);
        expect(statuses.every((status) => status === 200)).toBe(true);
        const order = upstream.bodies.map((body) => ((body.messages as { content: string }[])[0]!.content.startsWith("other") ? "B" : "A"));
        // One A was running; then turns alternate: B's three requests are among the first seven to start.
        const positions = order.flatMap((organization, index) => (organization === "B" ? [index] : []));
        expect(positions).toEqual([2, 4, 6]);
      },
    );
  });

  test("a plan's queue_weight: its organization's requests start three in a row in its turns, the other's still in between", async () => {
    await withSluice(
      {
        models: [fakeModel(upstream.url, "m", "slow-1-200", { max_concurrency: 1, queue_size: 100 })],
        plans: [
          { id: "default", models: ["*"] },
          { id: "gold", models: ["*"], queue_weight: 3 },
        ],
      },
      async (sluice) => {
        const gold = await sluice.addOrganization("gold-org", { plan: "gold" });
        const client = new OpenAI({ baseURL: sluice.baseURL, apiKey: sluice.key, maxRetries: 0 });
        const goldClient = new OpenAI({ baseURL: sluice.baseURL, apiKey: gold.key, maxRetries: 0 });
        const ask = (openai: OpenAI, content: string) => openai.chat.completions.create({ model: "m", messages: [{ role: "user", content }] });
        const flood = Array.from({ length: 8 }, (_, index) => ask(client, `flood ${index}`));
        await eventually(() => sluice.server.queues.get("m")!.stats().queued === 7);
        const weighted = Array.from({ length: 6 }, (_, index) => ask(goldClient, `gold ${index}`));
        await eventually(() => sluice.server.queues.get("m")!.stats().queued === 13);
        await Promise.all([...flood, ...weighted]);
        const order = upstream.bodies.map((body) => ((body.messages as { content: string }[])[0]!.content.startsWith("gold") ? "G" : "A"));
        // One A was running; then A's turn (1), gold's (3), A's (1), gold's (3), and the rest of A's.
        expect(order.join("")).toBe("AAGGGAGGGAAAAA");
      },
    );
  });

  test("queue full and queue timeout: 503 server_overloaded with Retry-After; a caller who leaves the queue frees its place", async () => {
    await withSluice(
      {
        models: [fakeModel(upstream.url, "m", "slow-1-300", { max_concurrency: 1, queue_size: 1, queue_timeout_ms: 100 })],
        plans: [{ id: "default", models: ["*"] }],
      },
      async (sluice) => {
        const running = sluice.post("/v1/chat/completions", { model: "m", messages });
        await eventually(() => upstream.inFlight === 1);
        const queued = sluice.post("/v1/chat/completions", { model: "m", messages });
        await eventually(() => sluice.server.queues.get("m")!.stats().queued === 1);
        const full = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(full.status).toBe(503);
        expect(full.headers.get("retry-after")).toBe("1");
        expect(await codeOf(full)).toBe("server_overloaded");
        const timedOut = await queued;
        expect(timedOut.status).toBe(503);
        expect(await codeOf(timedOut)).toBe("server_overloaded");
        const controller = new AbortController();
        const leaving = fetch(`${sluice.baseURL}/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${sluice.key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "m", messages }),
          signal: controller.signal,
        }).catch(() => undefined);
        await eventually(() => sluice.server.queues.get("m")!.stats().queued === 1);
        controller.abort();
        await leaving;
        await eventually(() => sluice.server.queues.get("m")!.stats().queued === 0);
        expect((await running).status).toBe(200);
        await eventually(() => sluice.server.admission.inFlight() === 0);
        expect(upstream.bodies.length).toBe(1);
      },
    );
  });
});

describe("durability and operations", () => {
  test("quota state survives a restart: the ledger is replayed, nothing forgotten or counted twice", async () => {
    const directory = temporaryDirectory();
    const databasePath = join(directory.path, "restart.db");
    const file = config({ tokens_per_5h: 1000 }, [fakeModel(upstream.url, "m", "usage-100-200")]);
    let remainingBefore = "";
    await withSluice(
      file,
      async (sluice) => {
        for (let index = 0; index < 2; index++) await (await sluice.post("/v1/chat/completions", { model: "m", messages, max_tokens: 300 })).arrayBuffer();
        const third = await sluice.post("/v1/chat/completions", { model: "m", messages, max_tokens: 300 });
        remainingBefore = third.headers.get("x-ratelimit-remaining-tokens") as string;
        await third.arrayBuffer();
      },
      { databasePath },
    );
    await withSluice(
      file,
      async (sluice) => {
        const org = (await sluice.organizations.findByName("acme"))!;
        const snapshot = (sluice.server.admission as MemoryAdmissionStore).snapshot(org.id, { id: "limited", models: ["*"], tokensPer5h: 1000 }, Date.now());
        expect(snapshot.fiveHours.used).toBe(900);
        expect(Number(remainingBefore)).toBeLessThan(1000 - 600);
        const response = await sluice.post("/v1/chat/completions", { model: "m", messages, max_tokens: 300 });
        expect(response.status).toBe(200);
        expect(response.headers.get("x-ratelimit-remaining-tokens")).toBe("0");
        await response.arrayBuffer();
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(429);
      },
      { databasePath },
    );
    directory.remove();
  });

  test("`sluice usage` shows the figures; `sluice usage reset` is honoured by the running server from its next request", async () => {
    await withSluice(
      config({ tokens_per_5h: 300, tokens_per_month: 10_000, requests_per_minute: 6 }, [fakeModel(upstream.url, "m", "usage-100-200")]),
      async (sluice) => {
        await (await sluice.post("/v1/chat/completions", { model: "m", messages })).arrayBuffer();
        const full = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(full.status).toBe(429);
        await full.arrayBuffer();
        const configDirectory = temporaryDirectory();
        const configPath = join(configDirectory.path, "sluice.toml");
        await Bun.write(
          configPath,
          `[[models]]\nid = "m"\nbackend = "demo"\n\n[[plans]]\nid = "limited"\nmodels = ["*"]\ntokens_per_5h = 300\ntokens_per_month = 10000\nrequests_per_minute = 6\n`,
        );
        const environment = { ...process.env, SLUICE_DB: sluice.database.sqlite.filename, SLUICE_CONFIG: configPath };
        const cli = (...args: string[]) =>
          Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), ...args], { env: environment, stdout: "pipe", stderr: "pipe" });
        const shown = cli("usage", "--org", "acme")
          .stdout.toString()
          .trim()
          .split("\n")
          .map((line) => line.split("\t"));
        expect(shown[1]!.slice(0, 4)).toEqual(["5h", "300", "300", "0"]);
        expect(shown[2]!.slice(0, 4)).toEqual(["month", "300", "10000", "9700"]);
        // One request recorded (the refused one took none), read back from the ledger as the server would at start.
        expect(shown[3]!.slice(0, 4)).toEqual(["requests/min", "1", "6", "5"]);
        expect(cli("usage", "reset", "--org", "acme").exitCode).toBe(0);
        const after = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(after.status).toBe(200);
        await after.arrayBuffer();
        const again = cli("usage", "--org", "acme")
          .stdout.toString()
          .trim()
          .split("\n")
          .map((line) => line.split("\t"));
        expect(again[1]!.slice(0, 2)).toEqual(["5h", "300"]);
        expect(cli("usage", "--org", "ghost").exitCode).toBe(2);
        configDirectory.remove();
      },
    );
  });
});

describe("server shutdown", () => {
  test("stopping the server ends open streams, settles their slots and reservations, and records them", async () => {
    const sluice = await startSluice(config({ tokens_per_5h: 1_000_000, max_concurrency: 10 }, [fakeModel(upstream.url, "slow", "slow-100-20")]));
    const responses = await Promise.all(Array.from({ length: 5 }, () => sluice.post("/v1/chat/completions", { model: "slow", messages, stream: true })));
    for (const response of responses) {
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      let text = "";
      while (!text.includes("word2 ")) text += new TextDecoder().decode((await reader.read()).value);
      reader.releaseLock();
    }
    expect(sluice.server.admission.inFlight()).toBe(5);
    await sluice.server.stop();
    expect(sluice.server.admission.inFlight()).toBe(0);
    expect(sluice.server.admission.reservedTokens()).toBe(0);
    const rows = sluice.ledgerRows();
    expect(rows.map((row) => row.outcome)).toEqual(["shutdown", "shutdown", "shutdown", "shutdown", "shutdown"]);
    expect(rows.every((row) => row.completion_tokens >= 3)).toBe(true);
    sluice.removeFiles();
    await eventually(() => upstream.inFlight === 0);
  });
});
