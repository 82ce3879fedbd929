// Shared mode: three real `sluice serve` processes on one PostgreSQL and one Redis (Debian's servers, started here),
// with the official OpenAI SDK as a client and the fake upstream counting what it sees in flight.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { postgresJournalTags } from "../../src/db/postgres/migrations/index";
import { countChatTokens } from "../../src/tokens/count";
import { codeOf, expectFiveHourQuotaAnswers, httpPost, readSse, useFakeUpstream } from "../helpers";
import { startCluster, type Cluster } from "../support/cluster";
import { leasesHeld, startPostgres, startRedis, type PostgresServer, type RedisServer } from "../support/services";
import { reloadConfiguration, startSluiceProcess, type SluiceProcess } from "../support/sluice-process";

const upstream = useFakeUpstream();
let postgres: PostgresServer;
let redis: RedisServer;

beforeAll(async () => {
  [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
});
afterAll(async () => {
  postgres?.stop();
  await redis?.stop();
});

const messages = [{ role: "user", content: "hi" }];

function toml(plan: string, model: { upstream: string; extra?: string } = { upstream: "usage-10-20" }): string {
  return `[[models]]\nid = "m"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "${model.upstream}"\n${model.extra ?? ""}\n\n[[plans]]\nid = "default"\nmodels = ["*"]\n${plan}\n\n[[plans]]\nid = "other"\nmodels = ["*"]\n`;
}

async function withCluster(configuration: string, run: (cluster: Cluster) => Promise<void>, count = 3): Promise<void> {
  const cluster = await startCluster(postgres, redis, configuration, count);
  try {
    await run(cluster);
  } finally {
    await cluster.stop();
  }
}

/**
 * Leases of every organization and model still held in Redis once the settles sent as answers ended have landed:
 * they are sent without waiting (the answer does not wait for Redis), so a busy machine may deliver them a moment
 * after the last answer. Looked at for up to 2 s, far less than a lease lives (15 s): a lease never released fails.
 */
async function leasesLeft(): Promise<number> {
  const deadline = Date.now() + 2000;
  let held = await leasesHeld(redis.url);
  while (held > 0 && Date.now() < deadline) {
    await Bun.sleep(50);
    held = await leasesHeld(redis.url);
  }
  return held;
}

/** The configuration reloads an instance has applied so far, from its /metrics. */
async function reloadsApplied(instance: SluiceProcess): Promise<number> {
  const metrics = await (await fetch(`${instance.url}/metrics`)).text();
  return Number(/sluice_config_reloads_total\{result="applied"\} (\d+)/.exec(metrics)?.[1] ?? 0);
}

/**
 * SIGHUP to the first instance, which says it reloaded; then waits (up to 5 s) until every other instance has applied
 * the reload that it announced over Redis.
 */
async function reloadEverywhere(cluster: Cluster): Promise<void> {
  const [first, ...others] = cluster.instances as SluiceProcess[];
  const before = await Promise.all(others.map(reloadsApplied));
  expect((await reloadConfiguration(first as SluiceProcess)).message).toBe("configuration reloaded");
  const deadline = Date.now() + 5000;
  for (const [index, instance] of others.entries()) {
    while ((await reloadsApplied(instance)) <= (before[index] ?? 0) && Date.now() < deadline) await Bun.sleep(10);
    expect(await reloadsApplied(instance)).toBeGreaterThan(before[index] ?? 0);
  }
}

/** Sends again while the answer is 503 (an engine coming back), for up to 15 s; the last answer. */
async function sendWhileUnavailable(send: () => Promise<Response>): Promise<Response> {
  const deadline = Date.now() + 15_000;
  let response = await send();
  while (response.status === 503 && Date.now() < deadline) {
    await response.arrayBuffer();
    await Bun.sleep(100);
    response = await send();
  }
  return response;
}

async function ledgerTokens(cluster: Cluster): Promise<{ rows: number; tokens: number }> {
  const [row] = (await cluster.sql`SELECT count(*)::int AS rows, coalesce(sum(prompt_tokens + completion_tokens), 0)::int AS tokens FROM usage_ledger`) as {
    rows: number;
    tokens: number;
  }[];
  return row ?? { rows: 0, tokens: 0 };
}

describe("limits are exact across three instances", () => {
  test("500 requests over 3 instances, max_concurrency = 3: the upstream never sees more than 3; the rest 429 with Retry-After; nothing left held", async () => {
    await withCluster(toml("max_concurrency = 3", { upstream: "usage-10-20-40" }), async (cluster) => {
      const key = cluster.addOrganization("acme");
      upstream.reset();
      const responses = await Promise.all(Array.from({ length: 500 }, (_, index) => cluster.chat(index, key, { model: "m", messages })));
      const succeeded = responses.filter((response) => response.status === 200);
      const rejected = responses.filter((response) => response.status === 429);
      expect(succeeded.length + rejected.length).toBe(500);
      expect(succeeded.length).toBeGreaterThanOrEqual(3);
      expect(upstream.maxInFlight).toBeLessThanOrEqual(3);
      for (const response of rejected) {
        expect(response.headers.get("retry-after")).toBe("1");
        expect(await codeOf(response)).toBe("rate_limit_exceeded");
      }
      expect(await leasesLeft()).toBe(0);
      expect((await ledgerTokens(cluster)).rows).toBe(succeeded.length);
    });
  }, 60_000);

  test("a model's max_concurrency is one cap over every instance; its waiters start when any instance frees a slot", async () => {
    await withCluster(toml("", { upstream: "usage-10-20-30", extra: "max_concurrency = 2\nqueue_size = 50\nqueue_timeout_ms = 20000" }), async (cluster) => {
      const key = cluster.addOrganization("acme");
      upstream.reset();
      const started = performance.now();
      const responses = await Promise.all(Array.from({ length: 30 }, (_, index) => cluster.chat(index, key, { model: "m", messages })));
      const elapsed = performance.now() - started;
      expect(responses.map((response) => response.status)).toEqual(Array(30).fill(200));
      expect(upstream.maxInFlight).toBeLessThanOrEqual(2);
      expect(upstream.maxInFlight).toBe(2);
      // 30 requests of 30 ms through 2 slots need 450 ms at best; a hand-over that took a poll interval (25 ms)
      // each time would add ~375 ms more; seconds would mean waiters missed freed slots.
      expect(elapsed).toBeLessThan(3000);
      expect(await leasesLeft()).toBe(0);
    });
  }, 60_000);

  test("300 requests over 3 instances at a model of 2 shared slots and no queue, with a fallback of 2 slots: all answered, each model's cap held, nothing left held", async () => {
    const model = (id: string, extra: string) =>
      `[[models]]\nid = "${id}"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "usage-10-20-40"\nmax_concurrency = 2\n${extra}\n\n`;
    const configuration = `${model("m", 'queue_size = 0\nfallbacks = ["n"]')}${model("n", "queue_size = 300\nqueue_timeout_ms = 30000")}[[plans]]\nid = "default"\nmodels = ["*"]\n`;
    await withCluster(configuration, async (cluster) => {
      const key = cluster.addOrganization("acme");
      upstream.reset();
      const responses = await Promise.all(Array.from({ length: 300 }, (_, index) => cluster.chat(index, key, { model: "m", messages })));
      expect(responses.map((response) => response.status)).toEqual(Array(300).fill(200));
      const answered = (await Promise.all(responses.map((response) => response.json() as Promise<{ model: string }>))).map((body) => body.model);
      const byModel = (name: string) => answered.filter((model) => model === name).length;
      expect(byModel("m")).toBeGreaterThanOrEqual(2);
      expect(byModel("n")).toBeGreaterThan(150);
      expect(byModel("m") + byModel("n")).toBe(300);
      // Two slots each, over every instance.
      expect(upstream.maxInFlight).toBeLessThanOrEqual(4);
      expect(await leasesLeft()).toBe(0);
      const rows = (await cluster.sql`SELECT model, count(*)::int AS rows FROM usage_ledger GROUP BY model ORDER BY model`) as {
        model: string;
        rows: number;
      }[];
      expect(rows).toEqual([
        { model: "m", rows: byModel("m") },
        { model: "n", rows: byModel("n") },
      ]);
    });
  }, 90_000);

  test("SIGHUP (announced to every instance): a model's shared max_concurrency taken away lets the waiters go on; set again, it caps the next requests", async () => {
    const limited = (slots?: number) =>
      toml("", { upstream: "usage-10-20-300", extra: `${slots === undefined ? "" : `max_concurrency = ${slots}\n`}queue_size = 50\nqueue_timeout_ms = 20000` });
    await withCluster(
      limited(1),
      async (cluster) => {
        const key = cluster.addOrganization("acme");
        upstream.reset();
        const started = performance.now();
        const requests = Array.from({ length: 20 }, (_, index) => cluster.chat(index, key, { model: "m", messages }));
        await Bun.sleep(100);
        await Bun.write(cluster.environment.SLUICE_CONFIG as string, limited());
        await reloadEverywhere(cluster);
        const statuses = await Promise.all(requests.map(async (request) => (await request).status));
        expect(statuses).toEqual(Array(20).fill(200));
        // One at a time, 20 answers of 300 ms would take 6 s.
        expect(performance.now() - started).toBeLessThan(3000);
        expect(upstream.maxInFlight).toBeGreaterThan(2);

        await Bun.write(cluster.environment.SLUICE_CONFIG as string, limited(2));
        await reloadEverywhere(cluster);
        upstream.reset();
        const capped = await Promise.all(Array.from({ length: 8 }, (_, index) => cluster.chat(index, key, { model: "m", messages })));
        expect(capped.map((response) => response.status)).toEqual(Array(8).fill(200));
        expect(upstream.maxInFlight).toBe(2);
        expect(await leasesLeft()).toBe(0);
      },
      2,
    );
  }, 60_000);

  test("SIGHUP to one instance: the others read the file too, and serve a model it adds from their next request", async () => {
    const models = (ids: string[]) =>
      ids.map((id) => `[[models]]\nid = "${id}"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "usage-10-20"\n`).join("\n");
    const plan = `\n[[plans]]\nid = "default"\nmodels = ["*"]\n`;
    await withCluster(
      models(["m"]) + plan,
      async (cluster) => {
        const key = cluster.addOrganization("acme");
        for (let index = 0; index < 3; index++) expect((await cluster.chat(index, key, { model: "n", messages })).status).toBe(404);
        await Bun.write(cluster.environment.SLUICE_CONFIG as string, models(["m", "n"]) + plan);
        expect((await reloadConfiguration(cluster.instances[0] as SluiceProcess)).message).toBe("configuration reloaded");
        // The others hear of it over Redis within milliseconds; each request below goes to another instance.
        for (const index of [1, 2]) {
          const deadline = Date.now() + 5000;
          let status = 0;
          while (status !== 200 && Date.now() < deadline) {
            status = (await cluster.chat(index, key, { model: "n", messages })).status;
            if (status !== 200) await Bun.sleep(25);
          }
          expect(status).toBe(200);
        }
      },
      3,
    );
  }, 60_000);

  test("SIGHUP (announced to every instance) sets a max_concurrency where the model had none: the requests already under way on every instance count against it", async () => {
    const limited = (slots?: number) =>
      toml("", {
        upstream: "usage-10-20-1500",
        extra: `${slots === undefined ? "" : `max_concurrency = ${slots}\n`}queue_size = 50\nqueue_timeout_ms = 20000`,
      });
    await withCluster(
      limited(),
      async (cluster) => {
        const key = cluster.addOrganization("acme");
        upstream.reset();
        const running = Array.from({ length: 6 }, (_, index) => cluster.chat(index, key, { model: "m", messages }));
        const deadline = Date.now() + 5000;
        while (upstream.inFlight < 6 && Date.now() < deadline) await Bun.sleep(10);
        expect(upstream.inFlight).toBe(6);
        await Bun.write(cluster.environment.SLUICE_CONFIG as string, limited(2));
        await reloadEverywhere(cluster);
        const next = Array.from({ length: 4 }, (_, index) => cluster.chat(index, key, { model: "m", messages }));
        // Six slots are in use against a limit of two: the next requests wait for the first six to end.
        await Bun.sleep(400);
        expect(upstream.bodies.length).toBe(6);
        const statuses = await Promise.all([...running, ...next].map(async (request) => (await request).status));
        expect(statuses).toEqual(Array(10).fill(200));
        expect(upstream.bodies.length).toBe(10);
        expect(await leasesLeft()).toBe(0);
      },
      2,
    );
  }, 60_000);

  test("200 concurrent requests over 3 instances against a 5-hour quota with room for about 5: within the one-instance bound; headers right on every instance", async () => {
    const promptTokens = await countChatTokens([{ role: "user", text: "hi" }]);
    const maxTokens = 90;
    const quota = 5 * (promptTokens + maxTokens);
    await withCluster(toml(`tokens_per_5h = ${quota}`, { upstream: `usage-${promptTokens}-${maxTokens}-20` }), async (cluster) => {
      const key = cluster.addOrganization("acme");
      const responses = await Promise.all(Array.from({ length: 200 }, (_, index) => cluster.chat(index, key, { model: "m", messages, max_tokens: maxTokens })));
      const succeeded = await expectFiveHourQuotaAnswers(responses, quota, 4);
      const { tokens } = await ledgerTokens(cluster);
      // The README's bound for one instance holds for three: never N times it.
      expect(tokens).toBeLessThanOrEqual(quota + succeeded.length * maxTokens);
      expect(tokens).toBeLessThanOrEqual(quota);
      // Whichever instance answers next sees the same used-up window.
      for (let index = 0; index < 3; index++) {
        const response = await cluster.chat(index, key, { model: "m", messages, max_tokens: maxTokens });
        expect(response.status).toBe(429);
        expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(4 * 3600);
      }
      expect(await leasesLeft()).toBe(0);
      // Every instance's /metrics tells an alert the same: what the ledger holds, against the quota.
      for (const instance of cluster.instances as SluiceProcess[]) {
        const text = await (await fetch(`${instance.url}/metrics`)).text();
        expect(Number(/sluice_organization_tokens\{[^}]*organization="acme",window="5h"\} (\d+)/.exec(text)?.[1])).toBe(tokens);
        expect(Number(/sluice_organization_token_limit\{[^}]*organization="acme",window="5h"\} (\d+)/.exec(text)?.[1])).toBe(quota);
      }
    });
  }, 60_000);

  test("the monthly quota: within the one-instance bound across instances; 429 insufficient_quota that the SDK does not retry, on every instance", async () => {
    const promptTokens = await countChatTokens([{ role: "user", text: "hi" }]);
    await withCluster(toml("tokens_per_month = 150", { upstream: "usage-10-20" }), async (cluster) => {
      const key = cluster.addOrganization("acme");
      const responses = await Promise.all(Array.from({ length: 60 }, (_, index) => cluster.chat(index, key, { model: "m", messages, max_tokens: 20 })));
      const succeeded = responses.filter((response) => response.status === 200).length;
      const { tokens } = await ledgerTokens(cluster);
      expect(tokens).toBe(succeeded * 30);
      // README: each request admitted while the quota had room adds at most max_tokens − 1 + (the upstream's prompt
      // count − Sluice's) beyond its reservation: here 19 + (10 − Sluice's count of "hi").
      expect(tokens).toBeLessThanOrEqual(150 + succeeded * (19 + 10 - promptTokens));
      expect(succeeded).toBeLessThanOrEqual(6);
      upstream.reset();
      for (const instance of cluster.instances) {
        const client = new OpenAI({ baseURL: `${instance.url}/v1`, apiKey: key, maxRetries: 3 });
        const error = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).catch((caught: unknown) => caught);
        expect(error).toBeInstanceOf(OpenAI.RateLimitError);
        expect((error as InstanceType<typeof OpenAI.RateLimitError>).code).toBe("insufficient_quota");
      }
      // One attempt per instance, no retries, and none reached the upstream.
      expect(upstream.bodies.length).toBe(0);
    });
  }, 60_000);
});

describe("changes reach every instance at once", () => {
  test("a key revoked through the CLI gets 401 from the very next request through every instance; suspension, plan moves and usage resets too", async () => {
    await withCluster(toml("tokens_per_5h = 200"), async (cluster) => {
      const key = cluster.addOrganization("acme");
      const second = cluster.addOrganization("beta");
      for (let index = 0; index < 3; index++) expect((await cluster.chat(index, key, { model: "m", messages })).status).toBe(200);
      // Revoked through the CLI: every instance refuses it from its next request.
      const listed = cluster.cli("key", "list", "--org", "acme").stdout.trim().split("\t")[0] as string;
      expect(cluster.cli("key", "revoke", listed).code).toBe(0);
      for (let index = 0; index < 3; index++) {
        const response = await cluster.chat(index, key, { model: "m", messages });
        expect(response.status).toBe(401);
        expect(await codeOf(response)).toBe("invalid_api_key");
      }
      // Suspended, then active again.
      expect((await cluster.chat(1, second, { model: "m", messages })).status).toBe(200);
      expect(cluster.cli("org", "update", "beta", "--status", "suspended").code).toBe(0);
      expect(await codeOf(await cluster.chat(2, second, { model: "m", messages }))).toBe("organization_inactive");
      expect(cluster.cli("org", "update", "beta", "--status", "active").code).toBe(0);
      // The 5-hour quota (200) is used up by now: 6 answers of 30 tokens, then refused everywhere.
      for (let index = 0; index < 6; index++) await cluster.chat(index, second, { model: "m", messages, max_tokens: 20 });
      expect((await cluster.chat(0, second, { model: "m", messages, max_tokens: 20 })).status).toBe(429);
      expect(cluster.cli("usage", "--org", "beta").stdout).toMatch(/\n5h\t2\d\d\t200\t0\t/);
      expect(cluster.cli("usage", "reset", "--org", "beta").code).toBe(0);
      for (let index = 0; index < 3; index++) expect((await cluster.chat(index, second, { model: "m", messages, max_tokens: 20 })).status).toBe(200);
      // Moved to a plan without the quota.
      expect(cluster.cli("org", "update", "beta", "--plan", "other").code).toBe(0);
      const response = await cluster.chat(1, second, { model: "m", messages, max_tokens: 20 });
      expect(response.status).toBe(200);
      expect(response.headers.get("x-ratelimit-limit-tokens")).toBeNull();
    });
  }, 60_000);

  test("a key limited to one model, or bound to networks (its own or its organization's), through the CLI: every instance applies it from the very next request; undone, every instance serves it", async () => {
    const model = (id: string) => `[[models]]\nid = "${id}"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "usage-10-20"\n`;
    await withCluster(`${model("m")}\n${model("n")}\n[[plans]]\nid = "default"\nmodels = ["*"]\n`, async (cluster) => {
      const key = cluster.addOrganization("acme");
      const keyId = cluster.cli("key", "list", "--org", "acme").stdout.trim().split("\t")[0] as string;
      const statuses = async (name: string) => Promise.all([0, 1, 2].map(async (index) => (await cluster.chat(index, key, { model: name, messages })).status));
      expect(await statuses("n")).toEqual([200, 200, 200]);
      expect(cluster.cli("key", "update", keyId, "--models", "m").code).toBe(0);
      expect(await statuses("n")).toEqual([404, 404, 404]);
      expect(await statuses("m")).toEqual([200, 200, 200]);
      expect(cluster.cli("key", "update", keyId, "--models", "all").code).toBe(0);
      expect(await statuses("n")).toEqual([200, 200, 200]);
      // Bound to networks the tests' requests do not come from, the key's own or its organization's: refused
      // everywhere from the next request; unbound, served everywhere again.
      expect(cluster.cli("key", "update", keyId, "--networks", "10.0.0.0/8").code).toBe(0);
      expect(await statuses("m")).toEqual([401, 401, 401]);
      expect(cluster.cli("key", "update", keyId, "--networks", "any").code).toBe(0);
      expect(cluster.cli("org", "update", "acme", "--networks", "2001:db8::/32").code).toBe(0);
      expect(await statuses("m")).toEqual([401, 401, 401]);
      expect(cluster.cli("key", "update", keyId, "--networks", "127.0.0.1,::1").code).toBe(0);
      expect(await statuses("m")).toEqual([200, 200, 200]);
      expect(cluster.cli("key", "update", keyId, "--networks", "any").code).toBe(0);
      expect(cluster.cli("org", "update", "acme", "--networks", "any").code).toBe(0);
      expect(await statuses("m")).toEqual([200, 200, 200]);
    });
  }, 60_000);

  test("console: signed in through one instance, signed in on every instance; a key revoked in one instance's console is refused by another at once; sign-in failures count across instances", async () => {
    await withCluster(toml(""), async (cluster) => {
      const [first, second, third] = cluster.instances as [(typeof cluster.instances)[0], (typeof cluster.instances)[0], (typeof cluster.instances)[0]];
      const operatorPassword = "operator password";
      expect(
        Bun.spawnSync([process.execPath, "src/main.ts", "operator", "create", "op@example.com"], {
          env: { ...cluster.environment, SLUICE_OPERATOR_PASSWORD: operatorPassword },
          cwd: `${import.meta.dir}/../..`,
        }).exitCode,
      ).toBe(0);
      const key = cluster.addOrganization("acme");
      const signIn = await httpPost(`${first.url}/console/api/signin`, JSON.stringify({ email: "op@example.com", password: operatorPassword }), {
        "content-type": "application/json",
      });
      expect(signIn.status).toBe(200);
      const cookie = (signIn.headers.get("set-cookie") as string).split(";")[0] as string;
      const { csrfToken } = (await signIn.json()) as { csrfToken: string };
      const organizations = await fetch(`${second.url}/console/api/operator/organizations`, { headers: { cookie } });
      expect(organizations.status).toBe(200);
      const acme = ((await organizations.json()) as { id: string; name: string }[]).find((organization) => organization.name === "acme") as { id: string };
      // Suspended through instance C's console: instance A refuses the key at once.
      const suspend = await httpPost(`${third.url}/console/api/operator/organizations/${acme.id}`, JSON.stringify({ status: "suspended" }), {
        cookie,
        "x-csrf-token": csrfToken,
        "content-type": "application/json",
      });
      expect(suspend.status).toBe(200);
      expect(await codeOf(await cluster.chat(0, key, { model: "m", messages }))).toBe("organization_inactive");
      // A member signs up through A, is activated through C's operator console, signs in and creates a key through B;
      // the key works through A, is revoked in B's console, and A refuses it from the next request.
      const json = { "content-type": "application/json" };
      expect(
        (
          await httpPost(
            `${first.url}/console/api/signup`,
            JSON.stringify({ email: "member@example.com", password: "member password", organization: "Console Co" }),
            json,
          )
        ).status,
      ).toBe(201);
      const listed = (await (await fetch(`${third.url}/console/api/operator/organizations`, { headers: { cookie } })).json()) as { id: string; name: string }[];
      const consoleCo = listed.find((organization) => organization.name === "Console Co") as { id: string };
      expect(
        (
          await httpPost(`${third.url}/console/api/operator/organizations/${consoleCo.id}`, JSON.stringify({ status: "active" }), {
            cookie,
            "x-csrf-token": csrfToken,
            ...json,
          })
        ).status,
      ).toBe(200);
      const memberSignIn = await httpPost(
        `${second.url}/console/api/signin`,
        JSON.stringify({ email: "member@example.com", password: "member password" }),
        json,
      );
      const memberCookie = (memberSignIn.headers.get("set-cookie") as string).split(";")[0] as string;
      const memberCsrf = ((await memberSignIn.json()) as { csrfToken: string }).csrfToken;
      const created = await httpPost(`${second.url}/console/api/keys`, JSON.stringify({ name: "laptop" }), {
        cookie: memberCookie,
        "x-csrf-token": memberCsrf,
        ...json,
      });
      expect(created.status).toBe(201);
      const { key: consoleKey, secret } = (await created.json()) as { key: { id: string }; secret: string };
      expect((await cluster.chat(0, secret, { model: "m", messages })).status).toBe(200);
      const revoked = await httpPost(`${second.url}/console/api/keys/${consoleKey.id}/revoke`, "{}", {
        cookie: memberCookie,
        "x-csrf-token": memberCsrf,
        ...json,
      });
      expect(revoked.status).toBe(200);
      const refused = await cluster.chat(0, secret, { model: "m", messages });
      expect(refused.status).toBe(401);
      expect(await codeOf(refused)).toBe("invalid_api_key");
      // Five wrong passwords spread over three instances: the sixth try is refused on any of them.
      for (let attempt = 0; attempt < 5; attempt++) {
        const instance = cluster.instances[attempt % 3] as (typeof cluster.instances)[0];
        const wrong = await httpPost(`${instance.url}/console/api/signin`, JSON.stringify({ email: "op@example.com", password: "wrong password!" }), {
          "content-type": "application/json",
        });
        expect(wrong.status).toBe(401);
      }
      const locked = await httpPost(`${second.url}/console/api/signin`, JSON.stringify({ email: "op@example.com", password: operatorPassword }), {
        "content-type": "application/json",
      });
      expect(locked.status).toBe(429);
      expect(Number(locked.headers.get("retry-after"))).toBeGreaterThan(0);
    });
  }, 60_000);
});

describe("a key's own caps, across instances", () => {
  test("500 requests over 3 instances on a key capped at 2 (plan: 10): the upstream never sees more than 2; nothing left held", async () => {
    await withCluster(toml("max_concurrency = 10", { upstream: "usage-10-20-40" }), async (cluster) => {
      cluster.addOrganization("acme");
      const created = cluster.cli("key", "create", "--org", "acme", "--max-concurrency", "2");
      expect(created.code).toBe(0);
      const key = created.stdout.trim();
      upstream.reset();
      const responses = await Promise.all(Array.from({ length: 500 }, (_, index) => cluster.chat(index, key, { model: "m", messages })));
      const succeeded = responses.filter((response) => response.status === 200);
      expect(succeeded.length + responses.filter((response) => response.status === 429).length).toBe(500);
      expect(succeeded.length).toBeGreaterThanOrEqual(2);
      expect(upstream.maxInFlight).toBeLessThanOrEqual(2);
      for (const response of responses) await response.arrayBuffer();
      expect(await leasesLeft()).toBe(0);
    });
  }, 60_000);

  test("requests per minute over 3 instances: 300 requests against a plan's 60 and a key's 20 admit exactly those, with the headers of the tighter", async () => {
    await withCluster(toml("requests_per_minute = 60\nmax_concurrency = 1000", { upstream: "usage-10-20" }), async (cluster) => {
      const planKey = cluster.addOrganization("acme");
      const created = cluster.cli("key", "create", "--org", "acme", "--requests-per-minute", "20");
      expect(created.code).toBe(0);
      const capped = created.stdout.trim();
      upstream.reset();
      // One request a second comes back to each bucket: a slow run may see a few more.
      const started = Date.now();
      const keyed = await Promise.all(Array.from({ length: 150 }, (_, index) => cluster.chat(index, capped, { model: "m", messages })));
      const plain = await Promise.all(Array.from({ length: 150 }, (_, index) => cluster.chat(index, planKey, { model: "m", messages })));
      const refills = Math.floor((Date.now() - started) / 1000);
      const ok = (responses: Response[]) => responses.filter((response) => response.status === 200);
      expect(ok(keyed).length).toBeGreaterThanOrEqual(20);
      expect(ok(keyed).length).toBeLessThanOrEqual(20 + Math.ceil(refills / 3));
      expect(ok(keyed).length + ok(plain).length).toBeGreaterThanOrEqual(60);
      expect(ok(keyed).length + ok(plain).length).toBeLessThanOrEqual(60 + refills);
      for (const response of ok(keyed)) expect(response.headers.get("x-ratelimit-limit-requests")).toBe("20");
      for (const response of ok(plain)) expect(response.headers.get("x-ratelimit-limit-requests")).toBe("60");
      for (const response of [...keyed, ...plain].filter((each) => each.status !== 200)) {
        expect(response.status).toBe(429);
        expect(await codeOf(response)).toBe("rate_limit_exceeded");
      }
      expect(upstream.bodies.length).toBe(ok(keyed).length + ok(plain).length);
      for (const response of [...ok(keyed), ...ok(plain)]) await response.arrayBuffer();
      expect(await leasesLeft()).toBe(0);
    });
  }, 60_000);

  test("sluice key update in shared mode puts the key's usage so far into Redis; a Redis that lost its data rebuilds it from the ledger", async () => {
    await withCluster(toml(""), async (cluster) => {
      cluster.addOrganization("acme");
      const created = cluster.cli("key", "create", "--org", "acme", "--name", "ci");
      const key = created.stdout.trim();
      const keyId = /created key (key_\S+)/.exec(created.stderr)?.[1] as string;
      // 3 answers of 30 tokens before any cap.
      for (let index = 0; index < 3; index++) expect((await cluster.chat(index, key, { model: "m", messages })).status).toBe(200);
      expect(cluster.cli("key", "update", keyId, "--tokens-per-5h", "95").code).toBe(0);
      for (let index = 0; index < 3; index++) {
        const refused = await cluster.chat(index, key, { model: "m", messages });
        expect(refused.status).toBe(429);
        expect(((await refused.json()) as { error: { message: string } }).error.message).toContain("This API key has used its 5-hour quota of 95 tokens");
      }
      // The organization's other key is not held to this key's cap.
      const other = cluster.cli("key", "create", "--org", "acme").stdout.trim();
      expect((await cluster.chat(0, other, { model: "m", messages })).status).toBe(200);
      const flush = new Bun.RedisClient(redis.url);
      await flush.send("FLUSHALL", []);
      flush.close();
      const afterLoss = await sendWhileUnavailable(() => cluster.chat(1, key, { model: "m", messages }));
      expect(afterLoss.status).toBe(429);
      expect(cluster.cli("key", "update", keyId, "--tokens-per-5h", "none").code).toBe(0);
      expect((await cluster.chat(2, key, { model: "m", messages })).status).toBe(200);
    });
  }, 60_000);
});

describe("quota weights, across instances", () => {
  test("a model's quota_weight counts the same through every instance, in PostgreSQL's rows and aggregates, and in a Redis rebuilt from them; a key's caps read it back", async () => {
    await withCluster(toml("tokens_per_5h = 1000", { upstream: "usage-10-20", extra: "quota_weight = 2.5" }), async (cluster) => {
      cluster.addOrganization("acme");
      const created = cluster.cli("key", "create", "--org", "acme", "--name", "agent");
      const key = created.stdout.trim();
      const keyId = /created key (key_\S+)/.exec(created.stderr)?.[1] as string;
      // 3 answers of 30 tokens, one through each instance: 75 each at weight 2.5.
      for (let index = 0; index < 3; index++) expect((await cluster.chat(index, key, { model: "m", messages, max_tokens: 20 })).status).toBe(200);
      expect(cluster.cli("usage", "--org", "acme").stdout).toContain("\n5h\t225\t1000\t");
      const [row] = (await cluster.sql`SELECT sum(quota_tokens)::int AS counted, sum(prompt_tokens + completion_tokens)::int AS used FROM usage_ledger`) as {
        counted: number;
        used: number;
      }[];
      expect(row).toEqual({ counted: 225, used: 90 });
      // Redis lost its data: the window is rebuilt from PostgreSQL's aggregates, at the weights the rows were counted at.
      const flush = new Bun.RedisClient(redis.url);
      await flush.send("FLUSHALL", []);
      flush.close();
      expect((await sendWhileUnavailable(() => cluster.chat(1, key, { model: "m", messages, max_tokens: 20 }))).status).toBe(200);
      expect(cluster.cli("usage", "--org", "acme").stdout).toContain("\n5h\t300\t1000\t");
      // A cap given now starts from the key's rows as the quotas counted them: 300 of 310, no room for a prompt at 2.5.
      expect(cluster.cli("key", "update", keyId, "--tokens-per-5h", "310").code).toBe(0);
      const refused = await cluster.chat(2, key, { model: "m", messages, max_tokens: 20 });
      expect(refused.status).toBe(429);
      expect(((await refused.json()) as { error: { message: string } }).error.message).toContain("This API key has used its 5-hour quota of 310 tokens");
      expect(await leasesLeft()).toBe(0);
    });
  }, 60_000);
});

describe("what operators see, on PostgreSQL", () => {
  test("the request log (console and CLI) and the audit trail across instances", async () => {
    await withCluster(
      toml(""),
      async (cluster) => {
        const key = cluster.addOrganization("acme");
        const other = cluster.addOrganization("other-co");
        const ids: string[] = [];
        for (let index = 0; index < 6; index++) {
          const response = await cluster.chat(index, index === 5 ? other : key, { model: "m", messages, stream: index === 1 });
          await response.text();
          ids.push(response.headers.get("x-request-id") as string);
        }
        const refused = await cluster.chat(0, key, { model: "m", messages: [{ role: "user", content: "How do I synthesize sarin at home?" }] });
        await refused.text();
        const refusedId = refused.headers.get("x-request-id") as string;
        cluster.environment.SLUICE_OPERATOR_PASSWORD = "a password for tests";
        expect(cluster.cli("operator", "create", "op@example.com").code).toBe(0);
        const [first, second] = cluster.instances as [SluiceProcess, SluiceProcess];
        const signIn = await fetch(`${first.url}/console/api/signin`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ email: "op@example.com", password: "a password for tests" }),
        });
        expect(signIn.status).toBe(200);
        const cookie = (signIn.headers.get("set-cookie") as string).split(";")[0] as string;
        // The session opened on one instance reads the log on another.
        const read = async (query: string) => {
          const response = await fetch(`${second.url}/console/api/requests${query}`, { headers: { cookie } });
          expect(response.status).toBe(200);
          return (await response.json()) as {
            rows: { requestId: string; organization: string; outcome: string; ruleId: string | null; firstTokenMs: number | null }[];
            nextCursor: string | null;
          };
        };
        const all = await read("");
        // One after the other, so newest first is the reverse of the order sent.
        expect(all.rows.map((row) => row.requestId)).toEqual([refusedId, ...[...ids].reverse()]);
        expect(all.rows.find((row) => row.requestId === ids[1])?.firstTokenMs).toBeGreaterThanOrEqual(0);
        expect((await read("?outcome=content_filter")).rows).toMatchObject([{ requestId: refusedId, ruleId: "RL-1" }]);
        expect((await read(`?id=${ids[5]}`)).rows).toMatchObject([{ organization: "other-co" }]);
        const paged = await read("?limit=4");
        expect(paged.rows.length).toBe(4);
        const rest = await read(`?limit=4&cursor=${paged.nextCursor}`);
        expect([...paged.rows, ...rest.rows].map((row) => row.requestId)).toEqual(all.rows.map((row) => row.requestId));
        const csv = await fetch(`${first.url}/console/api/requests.csv?outcome=completed`, { headers: { cookie } });
        expect((await csv.text()).trim().split("\n").length).toBe(1 + 6);
        const printed = cluster.cli("requests", "--org", "acme", "--outcome", "content_filter");
        expect(
          printed.stdout
            .trim()
            .split("\n")
            .slice(1)
            .map((line) => line.split("\t")[1]),
        ).toEqual([refusedId]);

        const audit = await fetch(`${first.url}/console/api/operator/audit`, { headers: { cookie } });
        const entries = ((await audit.json()) as { entries: { actorKind: string; action: string; target: string }[] }).entries;
        expect(entries.map((entry) => [entry.actorKind, entry.action, entry.target]).reverse()).toEqual([
          ["cli", "organization.created", "acme"],
          ["cli", "key.created", expect.stringMatching(/^key_/)],
          ["cli", "organization.created", "other-co"],
          ["cli", "key.created", expect.stringMatching(/^key_/)],
          ["cli", "account.created", "op@example.com"],
          ["console", "signin.succeeded", "op@example.com"],
        ]);
        expect(cluster.cli("audit", "--action", "signin.succeeded").stdout).toContain("op@example.com (console, 127.0.0.1)\tsignin.succeeded");
      },
      2,
    );
  });
});

describe("operations", () => {
  test("three instances started at the same moment on an empty database migrate it exactly once; the CLI works against PostgreSQL", async () => {
    await withCluster(toml(""), async (cluster) => {
      const migrations = (await cluster.sql`SELECT tag FROM sluice_migrations`) as { tag: string }[];
      expect(migrations.map((row) => row.tag)).toEqual(postgresJournalTags);
      const key = cluster.addOrganization("acme");
      expect((await cluster.chat(0, key, { model: "m", messages })).status).toBe(200);
      const list = cluster.cli("org", "list");
      expect(list.code).toBe(0);
      expect(list.stdout).toContain("\tacme\tdefault\tactive\t");
      expect(cluster.cli("key", "list", "--org", "acme").stdout).toContain("sk-sluice-");
      expect(cluster.cli("refusals").stdout).toContain("rule\tname\trefusals\tlast");
      const backup = cluster.cli("backup", "/tmp/never-written.db");
      expect(backup.code).toBe(2);
      expect(backup.stderr).toContain("pg_dump");
      // doctor with the built-in demo model only (the fake upstream has no GET /models to check).
      const demoConfig = `${cluster.environment.SLUICE_CONFIG}.demo.toml`;
      await Bun.write(demoConfig, `[[models]]\nid = "demo"\nbackend = "demo"\n\n[[plans]]\nid = "default"\nmodels = ["*"]\n`);
      const doctor = Bun.spawnSync([process.execPath, "src/main.ts", "doctor"], {
        env: { ...cluster.environment, SLUICE_CONFIG: demoConfig },
        cwd: `${import.meta.dir}/../..`,
      });
      expect(doctor.stdout.toString()).toContain(`PostgreSQL: all ${postgresJournalTags.length} migration(s) applied`);
      expect(doctor.stdout.toString()).toContain("Redis: redis://127.0.0.1");
      expect(doctor.exitCode).toBe(0);
      const down = Bun.spawnSync([process.execPath, "src/main.ts", "doctor"], {
        env: { ...cluster.environment, SLUICE_CONFIG: demoConfig, SLUICE_REDIS_URL: "redis://127.0.0.1:1" },
        cwd: `${import.meta.dir}/../..`,
      });
      expect(down.exitCode).toBe(1);
      expect(down.stdout.toString()).toContain("PROBLEM  Redis: cannot reach redis://127.0.0.1:1");
      // PostgreSQL without Redis is refused with the reason.
      const alone = Bun.spawnSync([process.execPath, "src/main.ts", "org", "list"], {
        env: { ...cluster.environment, SLUICE_REDIS_URL: "" },
        cwd: `${import.meta.dir}/../..`,
        stderr: "pipe",
      });
      expect(alone.exitCode).toBe(1);
      expect(alone.stderr.toString()).toContain("SLUICE_REDIS_URL");
    });
  }, 60_000);

  test("a database migrated by a newer Sluice: an instance refuses to start", async () => {
    await withCluster(
      toml(""),
      async (cluster) => {
        await cluster.sql`INSERT INTO sluice_migrations (tag, applied_at) VALUES ('9999_future', 0)`;
        const started = await startSluiceProcess(cluster.environment).then(
          (instance) => {
            instance.child.kill("SIGKILL");
            return true;
          },
          (error: Error) => error.message,
        );
        expect(started).toContain("newer Sluice");
      },
      1,
    );
  }, 30_000);

  test.each([
    ["Redis answering", 0],
    ["Redis paused for 1.5 s as it stops, longer than a call waits", 1500],
  ])(
    "SIGTERM with 300 requests in flight, %s: the instance releases every lease in Redis before it exits, none left for the lease time",
    async (_, pauseMs) => {
      await withCluster(
        // Both kinds of lease: the organization's concurrency places and the model's upstream slots.
        toml("max_concurrency = 1000", { upstream: "hang", extra: "max_concurrency = 1000" }),
        async (cluster) => {
          const key = cluster.addOrganization("acme");
          const instance = cluster.instances[0] as (typeof cluster.instances)[0];
          const statuses = Array.from({ length: 300 }, () =>
            cluster
              .chat(0, key, { model: "m", messages })
              .then(async (response) => {
                await response.arrayBuffer();
                return response.status;
              })
              .catch(() => 0),
          );
          const admittedBy = Date.now() + 20_000;
          while ((await leasesHeld(redis.url)) < 600 && Date.now() < admittedBy) await Bun.sleep(20);
          expect(await leasesHeld(redis.url)).toBe(600);
          if (pauseMs > 0) {
            // The settles sent as the requests end then time out (1 s) and wait for a retry, which must still happen.
            const pauser = new Bun.RedisClient(redis.url);
            await pauser.send("CLIENT", ["PAUSE", String(pauseMs), "ALL"]);
            pauser.close();
          }
          // SLUICE_DRAIN_MS=0: every request is ended at once, and each settle goes to Redis as the process stops.
          instance.child.kill("SIGTERM");
          expect(await instance.child.exited).toBe(0);
          expect(new Set(await Promise.all(statuses)).has(200)).toBe(false);
          // Read at once, not after the lease time: a settle lost at exit would hold its place for 15 s.
          expect(await leasesHeld(redis.url)).toBe(0);
        },
        1,
      );
    },
    60_000,
  );

  test("kill -9 of one instance under load: the others keep answering, its leases come back within the lease time, every answered request is in the ledger", async () => {
    await withCluster(toml("max_concurrency = 6", { upstream: "usage-10-20-30" }), async (cluster) => {
      const key = cluster.addOrganization("acme");
      const answered: string[] = [];
      const failures: number[] = [];
      let stop = false;
      const worker = async (index: number) => {
        while (!stop) {
          try {
            const response = await cluster.chat(index, key, { model: "m", messages });
            const text = await response.text();
            if (response.status === 200 && JSON.parse(text).object === "chat.completion") answered.push(response.headers.get("x-request-id") as string);
            else if (index % 3 !== 0) failures.push(response.status);
          } catch {
            // instance 0 died mid-request: that request was never answered
            await Bun.sleep(5);
          }
        }
      };
      const workers = Array.from({ length: 6 }, (_, index) => worker(index));
      while (answered.length < 60) await Bun.sleep(5);
      (cluster.instances[0] as (typeof cluster.instances)[0]).child.kill("SIGKILL");
      const killedAt = Date.now();
      await Bun.sleep(300);
      const answeredAfterKill = answered.length;
      await Bun.sleep(700);
      stop = true;
      await Promise.all(workers);
      // The two others went on answering (their share of the 6 slots; the dead one's leases count until they expire).
      expect(answered.length).toBeGreaterThan(answeredAfterKill);
      const recorded = new Set(((await cluster.sql`SELECT request_id FROM usage_ledger`) as { request_id: string }[]).map((row) => row.request_id));
      expect(answered.filter((id) => !recorded.has(id))).toEqual([]);
      // The dead instance's leases expire (15 s) and every place is free again.
      while ((await leasesHeld(redis.url)) > 0 && Date.now() - killedAt < 20_000) await Bun.sleep(250);
      expect(await leasesLeft()).toBe(0);
      const after = await Promise.all(Array.from({ length: 6 }, (_, index) => cluster.chat(1 + (index % 2), key, { model: "m", messages })));
      expect(after.map((response) => response.status)).toEqual(Array(6).fill(200));
    });
  }, 60_000);

  test("Redis stopped: 503 with Retry-After, never admitted without limits, /readyz 503; back by itself; restarted empty, the window is rebuilt from the ledger", async () => {
    await withCluster(toml("tokens_per_5h = 95"), async (cluster) => {
      const key = cluster.addOrganization("acme");
      // 3 answers of 30 tokens: 90 of 95 used, no room for a fourth prompt.
      for (let index = 0; index < 3; index++) expect((await cluster.chat(index, key, { model: "m", messages, max_tokens: 20 })).status).toBe(200);
      await redis.pause();
      upstream.reset();
      for (let index = 0; index < 3; index++) {
        const response = await cluster.chat(index, key, { model: "m", messages, max_tokens: 20 });
        expect(response.status).toBe(503);
        expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(0);
        expect(await codeOf(response)).toBe("server_overloaded");
        const ready = await fetch(`${(cluster.instances[index] as (typeof cluster.instances)[0]).url}/readyz`);
        expect(ready.status).toBe(503);
      }
      expect(upstream.bodies.length).toBe(0);
      await redis.resume();
      // Redis came back empty: the first request rebuilds the window from PostgreSQL, so 90 of 95 are still used.
      const response = await sendWhileUnavailable(() => cluster.chat(0, key, { model: "m", messages, max_tokens: 5 }));
      expect(response.status).toBe(429);
      expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(4 * 3600);
      expect(cluster.cli("usage", "--org", "acme").stdout).toContain("\n5h\t90\t95\t");
      for (const instance of cluster.instances) expect((await fetch(`${instance.url}/readyz`)).status).toBe(200);
    });
  }, 60_000);

  test("requests admitted before a Redis outage finish during it and count once: their settles are not replayed on top of the window rebuilt from the ledger", async () => {
    await withCluster(toml("tokens_per_5h = 100000", { upstream: "usage-10-20-1500" }), async (cluster) => {
      const key = cluster.addOrganization("acme");
      const running = Promise.all(cluster.instances.map((_, index) => cluster.chat(index, key, { model: "m", messages, max_tokens: 20 })));
      await Bun.sleep(300);
      await redis.pause();
      // Answered while Redis is away: their rows are committed; their settles wait for Redis.
      expect((await running).map((response) => response.status)).toEqual([200, 200, 200]);
      await redis.resume();
      // Redis came back empty: the first to look (here the CLI) rebuilds the window from the ledger's 3 rows...
      const ledger = await ledgerTokens(cluster);
      expect(ledger).toEqual({ rows: 3, tokens: 90 });
      expect(cluster.cli("usage", "--org", "acme").stdout).toContain("\n5h\t90\t100000\t");
      // ...and the instances' retried settles (once a second) find a newer generation and record nothing.
      await Bun.sleep(2500);
      expect(cluster.cli("usage", "--org", "acme").stdout).toContain("\n5h\t90\t100000\t");
      expect(await leasesLeft()).toBe(0);
      for (const instance of cluster.instances) expect((await fetch(`${instance.url}/readyz`)).status).toBe(200);
    });
  }, 60_000);

  test("PostgreSQL stopped while a stream runs: it ends with a final error event and [DONE], and its place is free again", async () => {
    await withCluster(
      toml("max_concurrency = 1", { upstream: "slow-20-100" }),
      async (cluster) => {
        const key = cluster.addOrganization("acme");
        const response = await cluster.chat(0, key, { model: "m", messages, stream: true });
        expect(response.status).toBe(200);
        const reading = readSse(response);
        await Bun.sleep(500);
        postgres.pause();
        let events: unknown[];
        try {
          events = await reading;
        } finally {
          postgres.resume();
        }
        expect(events.at(-1)).toBe("[DONE]");
        const last = events.at(-2) as { error?: { code: string } };
        expect(last.error?.code).toBe("server_overloaded");
        // Words came before the failure.
        expect(events.filter((event) => typeof event === "object" && (event as { object?: string }).object === "chat.completion.chunk").length).toBeGreaterThan(
          2,
        );
        expect(await leasesLeft()).toBe(0);
        // The organization's one place is free again once PostgreSQL is back.
        const next = await sendWhileUnavailable(() => cluster.chat(0, key, { model: "m", messages }));
        expect(next.status).toBe(200);
      },
      1,
    );
  }, 60_000);

  test("PostgreSQL stopped: no request is answered without a ledger row (503 before the upstream), /readyz 503; service resumes when it is back", async () => {
    await withCluster(toml(""), async (cluster) => {
      const key = cluster.addOrganization("acme");
      expect((await cluster.chat(0, key, { model: "m", messages })).status).toBe(200);
      postgres.pause();
      try {
        // The health check notices within a second.
        await Bun.sleep(2500);
        upstream.reset();
        for (let index = 0; index < 3; index++) {
          const response = await cluster.chat(index, key, { model: "m", messages });
          expect(response.status).toBe(503);
          expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(0);
          expect((await fetch(`${(cluster.instances[index] as (typeof cluster.instances)[0]).url}/readyz`)).status).toBe(503);
        }
        expect(upstream.bodies.length).toBe(0);
      } finally {
        postgres.resume();
      }
      const response = await sendWhileUnavailable(() => cluster.chat(1, key, { model: "m", messages }));
      expect(response.status).toBe(200);
      const id = response.headers.get("x-request-id") as string;
      expect(((await cluster.sql`SELECT count(*)::int AS count FROM usage_ledger WHERE request_id = ${id}`) as { count: number }[])[0]?.count).toBe(1);
    });
  }, 60_000);
});
