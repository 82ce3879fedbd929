// A key's own caps, inside its organization's plan: a request must fit both, checked and reserved in one step, with
// the same error codes, headers and exactness as the plan's limits.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { ConfigFile } from "../../../src/config/schema";
import type { KeyLimits } from "../../../src/storage/types";
import { countChatTokens } from "../../../src/tokens/count";
import { sluiceCommand } from "../../support/sluice-process";
import {
  eventually,
  expectFiveHourQuotaAnswers,
  fakeModel,
  repositoryRoot,
  temporaryDirectory,
  testActor,
  useFakeUpstream,
  withSluice,
  type TestSluice,
} from "../../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });
const messages = [{ role: "user", content: "hi" }];

function config(plan: Record<string, unknown>, upstreamModel: string): ConfigFile {
  return { models: [fakeModel(upstream.url, "m", upstreamModel)], plans: [{ id: "limited", models: ["*"], ...plan }] };
}

const none: KeyLimits = { maxConcurrency: null, tokensPer5h: null, tokensPerMonth: null, requestsPerMinute: null };

/** A second key of the test organization, with caps of its own. */
async function cappedKey(sluice: TestSluice, limits: Partial<KeyLimits>): Promise<{ id: string; secret: string }> {
  const organization = (await sluice.organizations.findByName("acme"))!;
  const { key, secret } = await sluice.keys.create({ organizationId: organization.id, name: "capped", limits: { ...none, ...limits } }, testActor);
  return { id: key.id, secret };
}

function post(sluice: TestSluice, secret: string, body: Record<string, unknown> = {}) {
  return sluice.post("/v1/chat/completions", { model: "m", messages, ...body }, { authorization: `Bearer ${secret}` });
}

async function errorOf(response: Response): Promise<{ code: string; message: string }> {
  return ((await response.json()) as { error: { code: string; message: string } }).error;
}

describe("a key's max_concurrency", () => {
  test("500 concurrent requests on a key capped at 2 (the plan allows 10): the upstream never sees more than 2; 429s name the key; nothing leaks", async () => {
    await withSluice(config({ max_concurrency: 10 }, "usage-10-5-30"), async (sluice) => {
      const key = await cappedKey(sluice, { maxConcurrency: 2 });
      const responses = await Promise.all(Array.from({ length: 500 }, () => post(sluice, key.secret)));
      const succeeded = responses.filter((response) => response.status === 200);
      const rejected = responses.filter((response) => response.status === 429);
      expect(succeeded.length + rejected.length).toBe(500);
      expect(succeeded.length).toBeGreaterThanOrEqual(2);
      expect(upstream.maxInFlight).toBeLessThanOrEqual(2);
      for (const response of rejected) {
        expect(response.headers.get("retry-after")).toBe("1");
        const error = await errorOf(response);
        expect(error.code).toBe("rate_limit_exceeded");
        expect(error.message).toContain("This API key already has 2 requests in flight");
      }
      await Promise.all(succeeded.map((response) => response.arrayBuffer()));
      await eventually(() => upstream.inFlight === 0);
      expect(sluice.server.admission.inFlight()).toBe(0);
      expect(sluice.ledgerRows().length).toBe(succeeded.length);
    });
  }, 30_000);

  test("both at once: a key capped at 2 and an uncapped key share an organization capped at 3; neither cap is ever exceeded", async () => {
    await withSluice(config({ max_concurrency: 3 }, "usage-10-5-30"), async (sluice) => {
      const key = await cappedKey(sluice, { maxConcurrency: 2 });
      const mixed = Array.from({ length: 600 }, (_, index) => (index % 2 === 0 ? post(sluice, key.secret) : post(sluice, sluice.key)));
      const responses = await Promise.all(mixed);
      expect(responses.every((response) => response.status === 200 || response.status === 429)).toBe(true);
      expect(upstream.maxInFlight).toBeLessThanOrEqual(3);
      await Promise.all(responses.map((response) => response.arrayBuffer()));
      const rows = sluice.ledgerRows();
      // Every 200 of the capped key ran while at most one other of its requests did: its rows never overlap by three.
      const capped = rows.filter((row) => row.key_id === key.id).map((row) => [row.started_at, row.ended_at] as const);
      for (const [start] of capped) expect(capped.filter(([otherStart, otherEnd]) => otherStart <= start && otherEnd > start).length).toBeLessThanOrEqual(2);
      expect(rows.some((row) => row.key_id !== key.id)).toBe(true);
      expect(sluice.server.admission.inFlight()).toBe(0);
    });
  }, 30_000);
});

describe("a key's token quotas", () => {
  test("tokens_per_5h on a key: 200 concurrent requests against room for about 5, the plan unlimited; other keys unaffected", async () => {
    const promptTokens = await countChatTokens([{ role: "user", text: "hi" }]);
    const maxTokens = 90;
    const quota = 5 * (promptTokens + maxTokens);
    await withSluice(config({}, `usage-${promptTokens}-${maxTokens}-20`), async (sluice) => {
      const key = await cappedKey(sluice, { tokensPer5h: quota });
      const responses = await Promise.all(Array.from({ length: 200 }, () => post(sluice, key.secret, { max_tokens: maxTokens })));
      const succeeded = await expectFiveHourQuotaAnswers(responses, quota, 4);
      const recorded = sluice
        .ledgerRows()
        .filter((row) => row.key_id === key.id)
        .reduce((sum, row) => sum + row.prompt_tokens + row.completion_tokens, 0);
      expect(recorded).toBeLessThanOrEqual(quota + succeeded.length * maxTokens);
      expect(recorded).toBeLessThanOrEqual(quota);
      const refused = await post(sluice, key.secret);
      expect((await errorOf(refused)).message).toContain(`This API key has used its 5-hour quota of ${quota} tokens`);
      // The organization's other key is held only to the plan, which has no quota.
      const other = await post(sluice, sluice.key);
      expect(other.status).toBe(200);
      expect(other.headers.get("x-ratelimit-limit-tokens")).toBeNull();
      await other.arrayBuffer();
      expect(sluice.server.admission.reservedTokens()).toBe(0);
    });
  }, 30_000);

  test("tokens_per_month on a key: 429 insufficient_quota, x-should-retry false", async () => {
    await withSluice(config({}, "usage-10-5"), async (sluice) => {
      // 15 tokens an answer: after two, 30 used, and no prompt fits in the last one.
      const key = await cappedKey(sluice, { tokensPerMonth: 31 });
      for (let index = 0; index < 2; index++) expect((await post(sluice, key.secret)).status).toBe(200);
      const refused = await post(sluice, key.secret);
      expect(refused.status).toBe(429);
      expect(refused.headers.get("x-should-retry")).toBe("false");
      const error = await errorOf(refused);
      expect(error.code).toBe("insufficient_quota");
      expect(error.message).toContain("This API key has used its monthly quota of 31 tokens");
    });
  });

  test("the tighter 5-hour quota is the one in x-ratelimit headers; the plan's still binds a key with a looser cap", async () => {
    await withSluice(config({ tokens_per_5h: 100 }, "usage-10-5"), async (sluice) => {
      const tight = await cappedKey(sluice, { tokensPer5h: 40 });
      const first = await post(sluice, tight.secret);
      expect(first.headers.get("x-ratelimit-limit-tokens")).toBe("40");
      await first.arrayBuffer();
      const loose = await cappedKey(sluice, { tokensPer5h: 10_000 });
      let answered = 1;
      for (;;) {
        const response = await post(sluice, loose.secret);
        if (response.status !== 200) {
          expect((await errorOf(response)).message).toContain("Your organization has used its 5-hour quota of 100 tokens");
          break;
        }
        expect(response.headers.get("x-ratelimit-limit-tokens")).toBe("100");
        await response.arrayBuffer();
        answered++;
      }
      // Each was admitted with room left (the overspend bound of the README: one answer's output at most).
      expect((answered - 1) * 15).toBeLessThan(100);
      expect(answered * 15).toBeGreaterThanOrEqual(100);
    });
  });
});

describe("caps over time", () => {
  test("a key's usage survives a restart: its ledger rows are read back", async () => {
    const directory = temporaryDirectory();
    const databasePath = join(directory.path, "restart.db");
    const file = config({}, "usage-10-5");
    let secret = "";
    await withSluice(
      file,
      async (sluice) => {
        secret = (await cappedKey(sluice, { tokensPer5h: 50 })).secret;
        for (let index = 0; index < 3; index++) expect((await post(sluice, secret)).status).toBe(200);
      },
      { databasePath },
    );
    await withSluice(
      file,
      async (sluice) => {
        // 45 of 50 used before the restart: the next request would go over.
        const refused = await post(sluice, secret);
        expect(refused.status).toBe(429);
        expect((await errorOf(refused)).message).toContain("This API key has used its 5-hour quota of 50 tokens");
      },
      { databasePath },
    );
    directory.remove();
  });

  test("`sluice key update` from another process: the running server applies the caps, with the key's usage so far, from its next request", async () => {
    await withSluice(config({}, "usage-10-5-200"), async (sluice) => {
      const organization = (await sluice.organizations.findByName("acme"))!;
      const { key, secret } = await sluice.keys.create({ organizationId: organization.id, name: "later" }, testActor);
      for (let index = 0; index < 4; index++) expect((await post(sluice, secret)).status).toBe(200);
      const cli = (...args: string[]) =>
        sluiceCommand(
          { ...process.env, SLUICE_DB: sluice.database.sqlite.filename, SLUICE_CONFIG: join(repositoryRoot, "test/fixtures/demo.toml") },
          "key",
          ...args,
        );
      const updated = cli("update", key.id, "--tokens-per-5h", "50", "--max-concurrency", "1");
      expect(updated.code).toBe(0);
      expect(updated.stdout).toBe(`${key.id}\t1\t50\t-\t-\tall\tany\n`);
      // 60 tokens used before the cap existed: already over it.
      const refused = await post(sluice, secret);
      expect(refused.status).toBe(429);
      expect((await errorOf(refused)).message).toContain("5-hour quota of 50 tokens");
      expect(cli("update", key.id, "--tokens-per-5h", "none").code).toBe(0);
      const [slow, second] = await Promise.all([post(sluice, secret), Bun.sleep(50).then(() => post(sluice, secret))]);
      expect([slow.status, second.status].sort()).toEqual([200, 429]);
      expect(cli("update", key.id, "--max-concurrency", "0").stderr).toContain("--max-concurrency must be a whole number of at least 1, or none");
      expect(cli("update", key.id).stderr).toContain("give at least one of");
      const listed = cli("list", "--org", "acme").stdout;
      expect(listed).toContain(`${key.id}\tlater\t`);
      expect(
        listed
          .split("\n")
          .find((line) => line.startsWith(key.id))
          ?.endsWith("\t1\t-\t-\t-\tall\tany"),
      ).toBe(true);
      const audit = sluice.database.sqlite
        .query<{ changes: string }, [string]>("SELECT changes FROM audit_log WHERE action = 'key.updated' AND target = ? ORDER BY id")
        .all(key.id);
      expect(audit.map((row) => JSON.parse(row.changes))).toEqual([{ maxConcurrency: [null, 1], tokensPer5h: [null, 50] }, { tokensPer5h: [50, null] }]);
    });
  }, 30_000);
});

describe("a key's requests per minute", () => {
  test("set from another process inside a plan's rate: the tighter one's headers, the key's 429, the plan's still counted, cleared again", async () => {
    const now = Date.UTC(2026, 10, 29, 12, 0, 0);
    await withSluice(
      config({ requests_per_minute: 10 }, "usage-10-5"),
      async (sluice) => {
        const organization = (await sluice.organizations.findByName("acme"))!;
        const { key, secret } = await sluice.keys.create({ organizationId: organization.id, name: "ci" }, testActor);
        const first = await post(sluice, secret);
        expect(first.headers.get("x-ratelimit-limit-requests")).toBe("10");
        expect(first.headers.get("x-ratelimit-remaining-requests")).toBe("9");
        const cli = (...args: string[]) =>
          sluiceCommand(
            { ...process.env, SLUICE_DB: sluice.database.sqlite.filename, SLUICE_CONFIG: join(repositoryRoot, "test/fixtures/demo.toml") },
            "key",
            ...args,
          );
        const updated = cli("update", key.id, "--requests-per-minute", "2");
        expect(updated.stdout).toBe(`${key.id}\t-\t-\t-\t2\tall\tany\n`);
        // The key's bucket starts full when its cap is set; the plan's already holds one request fewer.
        const second = await post(sluice, secret);
        expect([second.headers.get("x-ratelimit-limit-requests"), second.headers.get("x-ratelimit-remaining-requests")]).toEqual(["2", "1"]);
        expect((await post(sluice, secret)).status).toBe(200);
        const refused = await post(sluice, secret);
        expect(refused.status).toBe(429);
        expect(refused.headers.get("retry-after")).toBe("30");
        expect((await errorOf(refused)).message).toBe(
          "This API key has reached the limit of 2 requests per minute that the cap set on this key allows. Retry after the time in Retry-After.",
        );
        // The organization's other key still has the plan's rate: 3 of its 10 taken.
        const other = await sluice.post("/v1/chat/completions", { model: "m", messages });
        expect(other.headers.get("x-ratelimit-remaining-requests")).toBe("6");
        expect(cli("update", key.id, "--requests-per-minute", "1000001").stderr).toContain("requestsPerMinute must be at most 1,000,000");
        expect(cli("update", key.id, "--requests-per-minute", "none").code).toBe(0);
        const cleared = await post(sluice, secret);
        expect(cleared.status).toBe(200);
        expect(cleared.headers.get("x-ratelimit-limit-requests")).toBe("10");
        const audit = sluice.database.sqlite
          .query<{ changes: string }, [string]>("SELECT changes FROM audit_log WHERE action = 'key.updated' AND target = ? ORDER BY id")
          .all(key.id);
        expect(audit.map((row) => JSON.parse(row.changes))).toEqual([{ requestsPerMinute: [null, 2] }, { requestsPerMinute: [2, null] }]);
      },
      { clock: () => now },
    );
  }, 30_000);
});
