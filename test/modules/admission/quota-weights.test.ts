// A model's quota_weight: what each of its tokens counts against the token quotas (a large model's more than a small
// one's), in admission, the reservations, the ledger, a restart's rebuild, a usage reset's rebuild and a key's caps.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { ConfigFile } from "../../../src/config/schema";
import type { MemoryAdmissionStore } from "../../../src/modules/admission/memory-store";
import { quotaTokens } from "../../../src/modules/admission/quota-weight";
import { countedTokens } from "../../../src/modules/requests/row";
import { RequestLogService } from "../../../src/modules/requests/service";
import type { KeyLimits } from "../../../src/storage/types";
import { countChatTokens } from "../../../src/tokens/count";
import { eventually, expectFiveHourQuotaAnswers, fakeModel, temporaryDirectory, testActor, useFakeUpstream, withSluice, type TestSluice } from "../../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });
const messages = [{ role: "user" as const, content: "hi" }];
const plan = { id: "limited", models: ["*"], tokens_per_5h: 1000, tokens_per_month: 10_000 };

/** `m` counts its tokens once, `big` four times, `small` half (rounded up); each answer is 10 + 5 tokens. */
function config(planFields: Record<string, unknown> = {}, extraModels: ReturnType<typeof fakeModel>[] = []): ConfigFile {
  return {
    models: [
      fakeModel(upstream.url, "m", "usage-10-5"),
      fakeModel(upstream.url, "big", "usage-10-5", { quota_weight: 4 }),
      fakeModel(upstream.url, "small", "usage-10-5", { quota_weight: 0.5 }),
      ...extraModels,
    ],
    plans: [{ ...plan, ...planFields }],
  };
}

function snapshotOf(sluice: TestSluice, organizationId: string) {
  const limits = { id: "limited", models: ["*"], tokensPer5h: 1000, tokensPerMonth: 10_000 };
  return (sluice.server.admission as MemoryAdmissionStore).snapshot(organizationId, limits, Date.now());
}

/** The usage of the test's capped key (500 tokens in 5 hours and in the month). */
function keySnapshotOf(sluice: TestSluice, organizationId: string, keyId: string) {
  const key = { id: keyId, limits: { tokensPer5h: 500, tokensPerMonth: 500 } };
  return (sluice.server.admission as MemoryAdmissionStore).keySnapshot(organizationId, key, Date.now());
}

/** What the organization's 5-hour window and month count (both the same here: every request is this month's). */
function expectCounted(sluice: TestSluice, organizationId: string, tokens: number): void {
  const snapshot = snapshotOf(sluice, organizationId);
  expect([snapshot.fiveHours.used, snapshot.month.used]).toEqual([tokens, tokens]);
}

const none: KeyLimits = { maxConcurrency: null, tokensPer5h: null, tokensPerMonth: null, requestsPerMinute: null };

test("quotaTokens: times the weight in thousandths, rounded up to a whole token, exact where floating point is not", () => {
  expect(quotaTokens(15, 1)).toBe(15);
  expect(quotaTokens(15, 4)).toBe(60);
  expect(quotaTokens(15, 0.5)).toBe(8);
  expect(quotaTokens(100, 0.07)).toBe(7);
  expect(100 * 0.07).toBeGreaterThan(7);
  expect(quotaTokens(3, 0.001)).toBe(1);
  expect(quotaTokens(0, 4)).toBe(0);
  expect(quotaTokens(1_000_000, 2.125)).toBe(2_125_000);
});

describe("each model's tokens count at its weight", () => {
  test("the headers, the usage, the ledger's quota_tokens; a restart reads the same back, a key's caps count the same, and a reset's rebuild too", async () => {
    const directory = temporaryDirectory();
    const databasePath = join(directory.path, "weights.db");
    let organizationId = "";
    let keyId = "";
    let secret = "";
    const startedAt = Date.now();
    const restarted = (run: (sluice: TestSluice) => Promise<void>) => withSluice(config(), run, { databasePath });
    await withSluice(
      config(),
      async (sluice) => {
        const organization = (await sluice.organizations.findByName("acme"))!;
        organizationId = organization.id;
        const capped = await sluice.keys.create({ organizationId, name: "capped", limits: { ...none, tokensPer5h: 500, tokensPerMonth: 500 } }, testActor);
        keyId = capped.key.id;
        secret = capped.secret;
        const client = sluice.client({ apiKey: secret });
        for (const model of ["m", "big", "small"]) expect((await client.chat.completions.create({ model, messages })).usage?.total_tokens).toBe(15);
        expectCounted(sluice, organizationId, 15 + 60 + 8);
        expect(keySnapshotOf(sluice, organizationId, keyId).fiveHours.used).toBe(83);
        await eventually(() => sluice.ledgerRows().length === 3);
        const rows = sluice.ledgerRows();
        // The rows keep what was used; quota_tokens is what the quotas counted, null where that is the same.
        expect(rows.map((row) => [row.model, row.prompt_tokens + row.completion_tokens, row.quota_tokens])).toEqual([
          ["m", 15, null],
          ["big", 15, 60],
          ["small", 15, 8],
        ]);
        // The request log shows both, newest first: its rows, and its CSV's quota_tokens column.
        const log = new RequestLogService(sluice.storage.requestLog);
        const page = await log.page({ organizationId });
        expect(page.rows.map((row) => [row.model, row.promptTokens + row.completionTokens, countedTokens(row)])).toEqual([
          ["small", 15, 8],
          ["big", 15, 60],
          ["m", 15, 15],
        ]);
        const csv = (await Bun.readableStreamToText(log.csv({ organizationId }))).trim().split("\n");
        const column = (csv[0] as string).split(",").indexOf("quota_tokens");
        expect(column).toBeGreaterThan(0);
        expect(csv.slice(1).map((line) => line.split(",")[column])).toEqual(["8", "60", "15"]);
      },
      { databasePath },
    );
    await restarted(async (sluice) => {
      expectCounted(sluice, organizationId, 83);
      // The key's usage is read from its rows and the hours' aggregate (its month), as a restart reads it.
      const keySnapshot = keySnapshotOf(sluice, organizationId, keyId);
      expect(keySnapshot.fiveHours.used).toBe(83);
      expect(keySnapshot.month.used).toBe(83);
      // A reset that keeps every row (it is older than them) rebuilds the aggregates from the rows: at their weights.
      await sluice.storage.usage.reset(organizationId, startedAt - 1);
    });
    await restarted(async (sluice) => {
      expectCounted(sluice, organizationId, 83);
      // The headers count the same: what the key has left after 83 (not 45) and this request's reservation.
      const answer = sluice.client({ apiKey: secret }).chat.completions.create({ model: "m", messages, max_tokens: 5 });
      const { response } = await answer.withResponse();
      expect(response.headers.get("x-ratelimit-limit-tokens")).toBe("500");
      const remaining = Number(response.headers.get("x-ratelimit-remaining-tokens"));
      expect(remaining).toBeLessThan(500 - 83);
      expect(remaining).toBeGreaterThan(500 - 83 - 50);
    });
    directory.remove();
  });

  test("a quota runs out at the weighted count: a model of weight 4 is admitted while there is room, each answer counting 60", async () => {
    await withSluice(config({ tokens_per_5h: 100 }), async (sluice) => {
      const organizationId = (await sluice.organizations.findByName("acme"))!.id;
      let answered = 0;
      for (let attempt = 0; attempt < 10; attempt++) {
        const response = await sluice.post("/v1/chat/completions", { model: "big", messages });
        if (response.status === 429) {
          expect(((await response.json()) as { error: { code: string } }).error.code).toBe("rate_limit_exceeded");
          break;
        }
        expect(response.status).toBe(200);
        await response.arrayBuffer();
        answered++;
      }
      // Unweighted, 15 tokens an answer, six would have fit; each was admitted with room left.
      expect((answered - 1) * 60).toBeLessThan(100);
      expect(answered * 60).toBeGreaterThanOrEqual(100);
      const limits = { id: "limited", models: ["*"], tokensPer5h: 100 };
      expect((sluice.server.admission as MemoryAdmissionStore).snapshot(organizationId, limits, Date.now()).fiveHours.used).toBe(60 * answered);
      // A model of weight 1 is refused too: the quota is one, whichever model used it.
      expect((await sluice.post("/v1/chat/completions", { model: "m", messages })).status).toBe(429);
    });
  });

  test("200 concurrent requests at weight 2.5 against room for about 5: never over the quota, each answer counted at the weight, exactly the ledger's sum; nothing left reserved", async () => {
    const promptTokens = await countChatTokens([{ role: "user", text: "hi" }]);
    const maxTokens = 90;
    const perAnswer = quotaTokens(promptTokens + maxTokens, 2.5);
    const quota = 5 * perAnswer;
    const weighted = fakeModel(upstream.url, "weighted", `usage-${promptTokens}-${maxTokens}-20`, { quota_weight: 2.5 });
    await withSluice(config({ tokens_per_5h: quota }, [weighted]), async (sluice) => {
      const organizationId = (await sluice.organizations.findByName("acme"))!.id;
      const responses = await Promise.all(
        Array.from({ length: 200 }, () => sluice.post("/v1/chat/completions", { model: "weighted", messages, max_tokens: maxTokens })),
      );
      const succeeded = await expectFiveHourQuotaAnswers(responses, quota, 4);
      await eventually(() => sluice.ledgerRows().length === succeeded.length);
      const counted = sluice.ledgerRows().reduce((sum, row) => sum + (row.quota_tokens ?? 0), 0);
      expect(counted).toBe(perAnswer * succeeded.length);
      const limits = { id: "limited", models: ["*"], tokensPer5h: quota };
      const snapshot = (sluice.server.admission as MemoryAdmissionStore).snapshot(organizationId, limits, Date.now());
      expect(snapshot.fiveHours.used).toBe(counted);
      // Reserved at the weight too (the prompt and max_tokens, as the upstream counts them here): never over at all.
      expect(counted).toBeLessThanOrEqual(quota);
      expect(snapshot.reserved).toBe(0);
      expect(snapshot.inFlight).toBe(0);
      expect(sluice.server.admission.reservedTokens()).toBe(0);
    });
  }, 30_000);

  test("a fallback's answer counts at the fallback's weight; an embeddings model's input at its own", async () => {
    const models = [
      fakeModel(upstream.url, "down", "fail-500", { quota_weight: 10, fallbacks: ["small"] }),
      fakeModel(upstream.url, "vectors", "embed-40", { quota_weight: 0.25 }),
    ];
    await withSluice(config({}, models), async (sluice) => {
      const organizationId = (await sluice.organizations.findByName("acme"))!.id;
      const client = sluice.client();
      const answer = await client.chat.completions.create({ model: "down", messages });
      expect(answer.usage?.total_tokens).toBe(15);
      expect(snapshotOf(sluice, organizationId).fiveHours.used).toBe(8);
      const vectors = await client.embeddings.create({ model: "vectors", input: ["one", "two"] });
      expect(vectors.usage.prompt_tokens).toBe(40);
      expect(snapshotOf(sluice, organizationId).fiveHours.used).toBe(8 + 10);
      await eventually(() => sluice.ledgerRows().length === 2);
      expect(sluice.ledgerRows().map((row) => [row.model, row.quota_tokens])).toEqual([
        ["small", 8],
        ["vectors", 10],
      ]);
    });
  });
});
