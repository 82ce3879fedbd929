import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { ConfigFile } from "../../../src/config/schema";
import { MemoryAdmissionStore } from "../../../src/modules/admission/memory-store";
import { requestsHeld, requestsRemaining, requestWaitMs } from "../../../src/modules/admission/request-rate";
import { AdmissionRejected } from "../../../src/modules/admission/store";
import { join } from "node:path";
import { codeOf, eventually, fakeModel, temporaryDirectory, testActor, useFakeUpstream, withSluice } from "../../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });
const messages = [{ role: "user", content: "hi" }];

function config(plan: Record<string, unknown>): ConfigFile {
  return { models: [fakeModel(upstream.url, "m", "usage-10-5")], plans: [{ id: "limited", models: ["*"], ...plan }] };
}

describe("the bucket's arithmetic", () => {
  test("a minute's worth at once, then one each 60/rate seconds, for rates that do not divide a minute", () => {
    for (const perMinute of [1, 3, 7, 13, 600, 999_983]) {
      const store = new MemoryAdmissionStore();
      const plan = { id: "p", models: ["*"], requestsPerMinute: perMinute };
      const now = Date.UTC(2026, 10, 29, 8, 0, 0, 7);
      const admitted = (at: number) => {
        try {
          store.admit({ organizationId: "o", plan, modelId: "m", promptTokens: 1, maxTokens: 1 }, at).settle(null, at);
          return true;
        } catch (error) {
          expect(error).toBeInstanceOf(AdmissionRejected);
          return false;
        }
      };
      let count = 0;
      while (count <= perMinute && admitted(now)) count++;
      expect(count).toBe(perMinute);
      // The next whole request is back 60/rate seconds later, not a millisecond before.
      const interval = 60_000 / perMinute;
      if (interval >= 2) expect(admitted(now + Math.ceil(interval) - 1)).toBe(false);
      expect(admitted(now + Math.ceil(interval))).toBe(true);
    }
  });

  test("what it holds, its wait and what is left", () => {
    const bucket = { held: 0.5, at: 1000 };
    expect(requestsHeld(bucket, 60, 1000)).toBe(0.5);
    expect(requestsHeld(bucket, 60, 1500)).toBe(1);
    expect(requestsHeld(bucket, 60, 10_000_000)).toBe(60);
    // A clock stepped back refills nothing.
    expect(requestsHeld(bucket, 60, 0)).toBe(0.5);
    expect(requestsHeld({ held: 0, at: -1 }, 60, 5)).toBe(60);
    expect(requestWaitMs(0.5, 60)).toBe(500);
    expect(requestWaitMs(0.9999999999, 60)).toBe(0);
    expect(requestsRemaining(2.9999999999)).toBe(3);
    expect(requestsRemaining(2.5)).toBe(2);
  });
});

describe("requests per minute through the server", () => {
  test("a plan's rate: headers after each request, a 429 with Retry-After when it is spent, one more each 20 s, a minute's worth after a minute", async () => {
    let now = Date.UTC(2026, 10, 29, 9, 15, 42, 300);
    await withSluice(
      config({ requests_per_minute: 3 }),
      async (sluice) => {
        for (const [remaining, reset] of [
          [2, "20s"],
          [1, "40s"],
          [0, "1m0s"],
        ] as const) {
          const response = await sluice.post("/v1/chat/completions", { model: "m", messages });
          expect(response.status).toBe(200);
          expect(response.headers.get("x-ratelimit-limit-requests")).toBe("3");
          expect(response.headers.get("x-ratelimit-remaining-requests")).toBe(String(remaining));
          expect(response.headers.get("x-ratelimit-reset-requests")).toBe(reset);
          // No token quota in this plan: no token headers.
          expect(response.headers.get("x-ratelimit-limit-tokens")).toBeNull();
        }
        now += 5_000;
        const refused = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(refused.status).toBe(429);
        expect(refused.headers.get("retry-after")).toBe("15");
        // To the millisecond as well, which the SDKs read first.
        expect(refused.headers.get("retry-after-ms")).toBe("15000");
        // The SDKs retry it on their own, as a concurrency 429.
        expect(refused.headers.get("x-should-retry")).toBeNull();
        const body = (await refused.json()) as { error: { code: string; type: string; message: string } };
        expect(body.error.code).toBe("rate_limit_exceeded");
        expect(body.error.type).toBe("rate_limit_error");
        expect(body.error.message).toContain("3 requests per minute");
        now += 14_999;
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(429);
        now += 1;
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(200);
        expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(429);
        now += 60_000;
        const statuses = [];
        for (let index = 0; index < 4; index++) statuses.push((await sluice.post("/v1/chat/completions", { model: "m", messages })).status);
        expect(statuses).toEqual([200, 200, 200, 429]);
        // Refusals are not taken from the bucket, and are counted by kind.
        expect(await (await fetch(`${sluice.url}/metrics`)).text()).toContain('sluice_quota_rejections_total{kind="requests"} 4');
        expect(sluice.ledgerRows().length).toBe(7);
      },
      { clock: () => now },
    );
  });

  test("200 concurrent requests against 50 a minute: exactly 50 reach the upstream, 150 get 429, nothing stays in flight", async () => {
    const now = Date.UTC(2026, 10, 29, 10, 0, 0);
    await withSluice(
      config({ requests_per_minute: 50, max_concurrency: 500 }),
      async (sluice) => {
        const responses = await Promise.all(Array.from({ length: 200 }, () => sluice.post("/v1/chat/completions", { model: "m", messages })));
        const statuses = responses.map((response) => response.status);
        expect(statuses.filter((status) => status === 200).length).toBe(50);
        expect(statuses.filter((status) => status === 429).length).toBe(150);
        for (const response of responses.filter((each) => each.status === 429)) {
          expect(await codeOf(response)).toBe("rate_limit_exceeded");
          expect(response.headers.get("retry-after")).toBe("2");
          expect(response.headers.get("retry-after-ms")).toBe("1200");
        }
        const remaining = responses.filter((each) => each.status === 200).map((each) => Number(each.headers.get("x-ratelimit-remaining-requests")));
        expect(remaining.sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, index) => index));
        expect(upstream.bodies.length).toBe(50);
        await eventually(() => sluice.server.admission.inFlight() === 0);
        expect(sluice.ledgerRows().length).toBe(50);
      },
      { clock: () => now },
    );
  }, 30_000);

  test("streams, the Responses and Messages APIs and embeddings take from the same bucket", async () => {
    const now = Date.UTC(2026, 10, 29, 11, 0, 0);
    await withSluice(
      {
        models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "e", "usage-10-5")],
        plans: [{ id: "limited", models: ["*"], requests_per_minute: 4 }],
      },
      async (sluice) => {
        const stream = await sluice.post("/v1/chat/completions", { model: "m", messages, stream: true });
        expect(stream.headers.get("x-ratelimit-remaining-requests")).toBe("3");
        await stream.text();
        expect((await sluice.post("/v1/responses", { model: "m", input: "hi" })).headers.get("x-ratelimit-remaining-requests")).toBe("2");
        expect((await sluice.post("/v1/messages", { model: "m", max_tokens: 10, messages })).headers.get("x-ratelimit-remaining-requests")).toBe("1");
        expect((await sluice.post("/v1/embeddings", { model: "e", input: "hi" })).headers.get("x-ratelimit-remaining-requests")).toBe("0");
        const refused = await sluice.post("/v1/messages", { model: "m", max_tokens: 10, messages });
        expect(refused.status).toBe(429);
        expect(((await refused.json()) as { type: string; error: { type: string } }).error.type).toBe("rate_limit_error");
      },
      { clock: () => now },
    );
  });

  test("the OpenAI SDK waits out retry-after-ms (not a whole second) and gets through", async () => {
    // Sluice's clock stands still while the bucket is spent and the SDK is refused, then runs on in real time: the
    // SDK's first call is refused whatever the machine's speed.
    const base = Date.UTC(2026, 10, 29, 14, 0, 0);
    let runningSince: number | undefined;
    const clock = () => (runningSince === undefined ? base : base + Date.now() - runningSince);
    // 600 a minute: one comes back every 100 ms, while Retry-After in whole seconds would say 1.
    await withSluice(
      config({ requests_per_minute: 600 }),
      async (sluice) => {
        const attempts: { at: number; status: number; waitMs: string | null }[] = [];
        const client = new OpenAI({
          baseURL: sluice.baseURL,
          apiKey: sluice.key,
          maxRetries: 5,
          fetch: async (input, init) => {
            const response = await fetch(input, init);
            attempts.push({ at: Date.now(), status: response.status, waitMs: response.headers.get("retry-after-ms") });
            if (response.status === 429) runningSince ??= Date.now();
            return response;
          },
        });
        for (let index = 0; index < 600; index++) expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(200);
        const completion = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
        expect(completion.choices[0]?.message.content).toBe("fixed");
        expect(attempts.map((attempt) => attempt.status)).toEqual([429, 200]);
        // A whole request 100 ms after the last: the SDK waited that, not the second Retry-After alone would cost.
        expect(attempts[0]?.waitMs).toBe("100");
        const gap = (attempts[1]?.at ?? 0) - (attempts[0]?.at ?? 0);
        expect(gap).toBeGreaterThanOrEqual(95);
        expect(gap).toBeLessThan(900);
      },
      { clock },
    );
  }, 20_000);

  test("a restart reads the last minute's requests back from the ledger: the organization's bucket and a paced key's stay spent", async () => {
    const directory = temporaryDirectory();
    const databasePath = join(directory.path, "restart.db");
    let now = Date.UTC(2026, 10, 29, 13, 0, 0);
    const file = config({ requests_per_minute: 4 });
    let paced = "";
    await withSluice(
      file,
      async (sluice) => {
        const organization = (await sluice.organizations.findByName("acme"))!;
        const limits = { maxConcurrency: null, tokensPer5h: null, tokensPerMonth: null, requestsPerMinute: 2 };
        paced = (await sluice.keys.create({ organizationId: organization.id, name: "paced", limits }, testActor)).secret;
        // Two on the paced key, one on the other: the key's bucket is spent, the organization's holds one.
        for (const key of [paced, paced, sluice.key]) {
          expect((await sluice.post("/v1/chat/completions", { model: "m", messages }, { authorization: `Bearer ${key}` })).status).toBe(200);
        }
      },
      { databasePath, clock: () => now },
    );
    now += 15_000;
    await withSluice(
      file,
      async (sluice) => {
        const refused = await sluice.post("/v1/chat/completions", { model: "m", messages }, { authorization: `Bearer ${paced}` });
        expect(refused.status).toBe(429);
        // The key's two requests 15 s ago: half a request back, the other half in 15 s.
        expect(refused.headers.get("retry-after")).toBe("15");
        const snapshot = await sluice.server.admission.snapshot(
          (await sluice.organizations.findByName("acme"))!.id,
          { id: "limited", models: ["*"], requestsPerMinute: 4 },
          now,
        );
        // The organization's four: three taken 15 s ago, one back since.
        expect(snapshot.requests).toMatchObject({ limit: 4, remaining: 2 });
        const other = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect([other.status, other.headers.get("x-ratelimit-remaining-requests")]).toEqual([200, "1"]);
      },
      { databasePath, clock: () => now },
    );
    now += 60_000;
    await withSluice(
      file,
      async (sluice) => {
        // A minute later, nothing recorded is left in any bucket.
        const response = await sluice.post("/v1/chat/completions", { model: "m", messages }, { authorization: `Bearer ${paced}` });
        expect([response.status, response.headers.get("x-ratelimit-remaining-requests")]).toEqual([200, "1"]);
      },
      { databasePath, clock: () => now },
    );
    directory.remove();
  });
});
