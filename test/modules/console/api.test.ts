import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { resolveConfig } from "../../../src/config/load";
import { fakeModel, type TestSluice } from "../../helpers";
import { ConsoleClient, consolePassword as password, startConsoleSluice } from "./console-client";

let server: Awaited<ReturnType<typeof startConsoleSluice>>;
let sluice: TestSluice;

beforeAll(async () => {
  server = await startConsoleSluice([
    { id: "default", models: ["*"], tokens_per_5h: 100_000, tokens_per_month: 1_000_000 },
    { id: "pro", models: ["*"] },
  ]);
  sluice = server.sluice;
});
afterAll(() => server.stop());

async function member(email: string, organization: string, activate = true): Promise<ConsoleClient> {
  const client = new ConsoleClient(sluice.url);
  expect((await client.json("POST", "/signup", { email, password, organization })).status).toBe(201);
  await client.signIn(email, password);
  if (activate) {
    const operator = new ConsoleClient(sluice.url);
    await operator.signIn("op@example.com", password);
    const organizations = (await operator.json<{ id: string; name: string }[]>("GET", "/operator/organizations")).body;
    const id = organizations.find((candidate) => candidate.name === organization)?.id;
    expect((await operator.json("POST", `/operator/organizations/${id}`, { status: "active" })).status).toBe(200);
  }
  return client;
}

describe("sign-up, sign-in, sessions", () => {
  test("sign-up puts the organization on the waitlist: its member signs in, sees it, cannot create keys", async () => {
    const client = await member("wait@example.com", "Waiting Co", false);
    const me = await client.json<{ organization: { status: string }; role: string }>("GET", "/me");
    expect(me.body).toMatchObject({ role: "member", organization: { status: "waitlist" } });
    const key = await client.json<{ error: { code: string } }>("POST", "/keys", { name: "early" });
    expect(key.status).toBe(403);
    expect(key.body.error.code).toBe("organization_inactive");
  });

  test("validation: bad email, short password, duplicate email or organization, not JSON", async () => {
    const client = new ConsoleClient(sluice.url);
    const cases: [unknown, string][] = [
      [{ email: "nope", password, organization: "X1" }, "email"],
      [{ email: "a@b.co", password: "short", organization: "X2" }, "password"],
      [{ email: "a@b.co", password, organization: "" }, "organization"],
      [{ email: "wait@example.com", password, organization: "X3" }, "email"],
      [{ email: "new@example.com", password, organization: "Waiting Co" }, "organization"],
    ];
    for (const [body, param] of cases) {
      const response = await client.json<{ error: { param: string } }>("POST", "/signup", body);
      expect({ status: response.status, param: response.body.error.param }).toEqual({ status: 400, param });
    }
    const form = await client.request("POST", "/signup", "email=a@b.co", { contentType: "application/x-www-form-urlencoded" });
    expect(form.status).toBe(400);
  });

  test("the session cookie is HttpOnly and SameSite=Strict; sign-out ends it", async () => {
    const client = new ConsoleClient(sluice.url);
    const response = await client.request("POST", "/signin", { email: "wait@example.com", password });
    const cookie = response.headers.get("set-cookie") as string;
    expect(cookie).toContain("HttpOnly");
    expect(cookie).toContain("SameSite=Strict");
    expect(cookie).not.toContain("Secure");
    client.csrf = ((await response.json()) as { csrfToken: string }).csrfToken;
    expect((await client.request("GET", "/me")).status).toBe(200);
    expect((await client.request("POST", "/signout", {})).status).toBe(200);
    expect((await client.request("GET", "/me")).status).toBe(401);
  });

  test("wrong passwords: 401, then 429 after five failures, without telling whether the email exists", async () => {
    const client = new ConsoleClient(sluice.url);
    await member("guess@example.com", "Guess Co", false);
    for (let attempt = 0; attempt < 5; attempt++)
      expect((await client.request("POST", "/signin", { email: "guess@example.com", password: "wrong password!" })).status).toBe(401);
    const blocked = await client.request("POST", "/signin", { email: "guess@example.com", password });
    expect(blocked.status).toBe(429);
    expect(Number(blocked.headers.get("retry-after"))).toBeGreaterThan(0);
    const unknown = await client.json<{ error: { message: string } }>("POST", "/signin", { email: "nobody@example.com", password });
    expect(unknown.status).toBe(401);
    expect(unknown.body.error.message).toBe("Wrong email or password.");
  });

  test("no session: 401 on every console route", async () => {
    const client = new ConsoleClient(sluice.url);
    for (const path of ["/me", "/keys", "/usage", "/operator/organizations", "/operator/models"]) expect((await client.request("GET", path)).status).toBe(401);
    expect((await client.request("POST", "/keys", { name: "x" })).status).toBe(401);
  });
});

describe("the console's own error codes, in the OpenAI error shape", () => {
  async function errorOf(response: Response): Promise<{ status: number; code: string; type: string; param: string | null }> {
    const { error } = (await response.json()) as { error: { code: string; type: string; param: string | null; message: string } };
    expect(typeof error.message).toBe("string");
    return { status: response.status, code: error.code, type: error.type, param: error.param };
  }

  test("no session, wrong password, too many attempts, not an operator", async () => {
    const client = new ConsoleClient(sluice.url);
    expect(await errorOf(await client.request("GET", "/me"))).toEqual({ status: 401, code: "not_signed_in", type: "authentication_error", param: null });
    await member("codes@example.com", "Codes Co", false);
    expect(await errorOf(await client.request("POST", "/signin", { email: "codes@example.com", password: "not the password" }))).toMatchObject({
      status: 401,
      code: "wrong_credentials",
    });
    for (let attempt = 0; attempt < 4; attempt++) await client.request("POST", "/signin", { email: "codes@example.com", password: "not the password" });
    const blocked = await client.request("POST", "/signin", { email: "codes@example.com", password });
    expect(await errorOf(blocked)).toMatchObject({ status: 429, code: "too_many_sign_in_attempts", type: "rate_limit_error" });
    const someone = await member("plain@example.com", "Plain Co");
    expect(await errorOf(await someone.request("GET", "/operator/organizations"))).toMatchObject({ status: 403, code: "forbidden", type: "permission_error" });
  });

  test("bodies are checked by their models: wrong types name the field; an oversized body is a 413 in the same shape", async () => {
    const client = new ConsoleClient(sluice.url);
    expect(await errorOf(await client.request("POST", "/signup", { email: 42, password, organization: "Typed Co" }))).toMatchObject({
      status: 400,
      code: "invalid_request",
      param: "email",
    });
    expect(await errorOf(await client.request("POST", "/signup", { email: "typed@example.com", password }))).toMatchObject({
      status: 400,
      param: "organization",
    });
    expect(await errorOf(await client.request("POST", "/signin", [1, 2]))).toMatchObject({ status: 400, code: "invalid_request" });
    expect(await errorOf(await client.request("POST", "/signin", "{not json"))).toMatchObject({ status: 400, code: "invalid_request" });
    const keys = await member("typed@example.com", "Typed Co");
    expect(await errorOf(await keys.request("POST", "/keys", { name: "x", expires_in: 30 }))).toMatchObject({ status: 400, param: "expires_in" });
    expect(await errorOf(await keys.request("POST", "/keys", { name: "x".repeat(101) }))).toMatchObject({ status: 400, param: "name" });
    const huge = await client.request("POST", "/signin", { email: "a@b.co", password: "x".repeat(100 * 1024) });
    expect(await errorOf(huge)).toMatchObject({ status: 413, code: "request_too_large" });
  });
});

describe("keys", () => {
  test("a key is shown once, works with the API, is listed without its secret, and is revoked at once", async () => {
    const client = await member("keys@example.com", "Keys Co");
    const created = await client.json<{ secret: string; key: { id: string; name: string; prefix: string } }>("POST", "/keys", {
      name: "laptop",
      expires_in: "30d",
    });
    expect(created.status).toBe(201);
    expect(created.body.secret).toMatch(/^sk-sluice-/);
    const list = await client.request("GET", "/keys");
    const text = await list.text();
    expect(text).not.toContain(created.body.secret);
    expect(JSON.parse(text)[0]).toMatchObject({ name: "laptop", prefix: created.body.key.prefix });
    const call = () =>
      sluice.post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] }, { authorization: `Bearer ${created.body.secret}` });
    expect((await call()).status).toBe(200);
    expect((await client.json("POST", `/keys/${created.body.key.id}/revoke`, {})).status).toBe(200);
    expect((await call()).status).toBe(401);
    const bad = await client.json<{ error: { param: string } }>("POST", "/keys", { name: "x", expires_in: "forever" });
    expect(bad.body.error.param).toBe("expires_in");
  });

  test("a key's own caps: set at creation, changed later, shown with its use on the usage page, enforced from the next request", async () => {
    const client = await member("caps@example.com", "Caps Co");
    const created = await client.json<{
      secret: string;
      key: { id: string; maxConcurrency: number | null; tokensPer5h: number | null; tokensPerMonth: number | null };
    }>("POST", "/keys", {
      name: "ci",
      max_concurrency: 2,
      tokens_per_5h: 35,
    });
    expect(created.status).toBe(201);
    expect(created.body.key).toMatchObject({ maxConcurrency: 2, tokensPer5h: 35, tokensPerMonth: null, requestsPerMinute: null });
    const call = () =>
      sluice.post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] }, { authorization: `Bearer ${created.body.secret}` });
    for (let index = 0; index < 2; index++) expect((await call()).status).toBe(200);
    // 15 tokens an answer: 30 of 35 used, no room for another prompt.
    expect((await call()).status).toBe(429);
    const usage = (
      await client.json<{
        keys: { id: string; name: string; limits: Record<string, number | null>; snapshot: { fiveHours: { used: number; limit: number }; inFlight: number } }[];
      }>("GET", "/usage")
    ).body;
    expect(usage.keys).toEqual([
      {
        id: created.body.key.id,
        name: "ci",
        limits: { maxConcurrency: 2, tokensPer5h: 35, tokensPerMonth: null, requestsPerMinute: null },
        snapshot: expect.objectContaining({ inFlight: 0, fiveHours: expect.objectContaining({ used: 30, limit: 35 }) }),
      },
    ]);
    const raised = await client.json<{ tokensPer5h: number }>("POST", `/keys/${created.body.key.id}/limits`, { max_concurrency: 2, tokens_per_5h: 1000 });
    expect(raised.body.tokensPer5h).toBe(1000);
    expect((await call()).status).toBe(200);
    const paced = await client.json<{ requestsPerMinute: number }>("POST", `/keys/${created.body.key.id}/limits`, { requests_per_minute: 1 });
    expect(paced.body.requestsPerMinute).toBe(1);
    const [one, two] = [await call(), await call()];
    expect([one.status, two.status]).toEqual([200, 429]);
    expect(((await two.json()) as { error: { message: string } }).error.message).toContain("limit of 1 request per minute that the cap set on this key");
    const pacedUsage = (await client.json<{ keys: { snapshot: { requests: unknown } }[] }>("GET", "/usage")).body;
    expect(pacedUsage.keys[0]?.snapshot.requests).toMatchObject({ limit: 1, remaining: 0 });
    const cleared = await client.json<{ maxConcurrency: number | null }>("POST", `/keys/${created.body.key.id}/limits`, {});
    expect(cleared.body.maxConcurrency).toBeNull();
    expect((await client.json<{ keys: unknown[] }>("GET", "/usage")).body.keys).toEqual([]);
    for (const [body, param] of [
      [{ max_concurrency: 0 }, "max_concurrency"],
      [{ tokens_per_5h: "lots" }, "tokens_per_5h"],
      [{ tokens_per_month: 1.5 }, "tokens_per_month"],
      [{ requests_per_minute: 1_000_001 }, "requests_per_minute"],
    ] as [Record<string, unknown>, string][]) {
      const refused = await client.json<{ error: { param: string } }>("POST", `/keys/${created.body.key.id}/limits`, body);
      expect({ status: refused.status, param: refused.body.error.param }).toEqual({ status: 400, param });
    }
    const stranger = await member("stranger@example.com", "Stranger Co");
    expect((await stranger.request("POST", `/keys/${created.body.key.id}/limits`, { max_concurrency: 1 })).status).toBe(404);
  });

  test("CSRF: a change without the session's token is refused", async () => {
    const client = await member("csrf@example.com", "Csrf Co");
    for (const csrf of [null, "forged"]) {
      const refused = await client.request("POST", "/keys", { name: "x" }, { csrf });
      expect(refused.status).toBe(403);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("csrf_token_invalid");
    }
    expect((await client.request("POST", "/keys", { name: "x" })).status).toBe(201);
  });

  test("a member of organization A cannot list, create or revoke keys of organization B, nor reach operator routes", async () => {
    const alice = await member("alice@example.com", "Org A");
    const bob = await member("bob@example.com", "Org B");
    const bobKey = (await bob.json<{ key: { id: string } }>("POST", "/keys", { name: "bob's" })).body.key;
    const aliceKeys = (await alice.json<{ id: string }[]>("GET", "/keys")).body;
    expect(aliceKeys.some((key) => key.id === bobKey.id)).toBe(false);
    expect((await alice.json("POST", `/keys/${bobKey.id}/revoke`, {})).status).toBe(404);
    expect((await bob.json<{ revokedAt: number | null }[]>("GET", "/keys")).body[0]?.revokedAt).toBeNull();
    for (const path of ["/operator/organizations", "/operator/models"]) expect((await alice.request("GET", path)).status).toBe(403);
    const orgB = (await bob.json<{ organization: { id: string } }>("GET", "/me")).body.organization.id;
    expect((await alice.request("POST", `/operator/organizations/${orgB}`, { status: "suspended" })).status).toBe(403);
    // The organization in a created key always comes from the session, never from the body.
    const sneaky = await alice.json<{ key: { organizationId: string } }>("POST", "/keys", { name: "sneaky", organizationId: orgB, organization_id: orgB });
    expect(sneaky.body.key.organizationId).not.toBe(orgB);
  });
});

describe("usage and operator", () => {
  test("usage shows the 5-hour window and the month, and hourly series by model and key", async () => {
    const client = await member("usage@example.com", "Usage Co");
    const { secret } = (await client.json<{ secret: string }>("POST", "/keys", { name: "ci" })).body;
    for (let index = 0; index < 3; index++)
      await (
        await sluice.post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] }, { authorization: `Bearer ${secret}` })
      ).arrayBuffer();
    const usage = (
      await client.json<{
        snapshot: { fiveHours: { used: number; limit: number; remaining: number }; month: { used: number } };
        series: { hours: number[]; byModel: Record<string, number[]>; byKey: Record<string, number[]> };
      }>("GET", "/usage")
    ).body;
    expect(usage.snapshot.fiveHours).toMatchObject({ used: 45, limit: 100_000, remaining: 100_000 - 45 });
    expect(usage.snapshot.month.used).toBe(45);
    expect(usage.series.hours.length).toBe(24);
    expect(usage.series.byModel.m?.reduce((sum, value) => sum + value, 0)).toBe(45);
    expect(usage.series.byKey.ci?.at(-1)).toBe(45);
  });

  test("the operator lists organizations with usage, activates, suspends, moves plans, and sees models", async () => {
    const operator = new ConsoleClient(sluice.url);
    await operator.signIn("op@example.com", password);
    const organizations = (await operator.json<{ id: string; name: string; status: string }[]>("GET", "/operator/organizations")).body;
    const target = organizations.find((organization) => organization.name === "Usage Co") as { id: string };
    expect((await operator.json("POST", `/operator/organizations/${target.id}`, { plan: "pro" })).body).toMatchObject({ plan: "pro" });
    expect((await operator.json("POST", `/operator/organizations/${target.id}`, { plan: "platinum" })).status).toBe(400);
    expect((await operator.json("POST", `/operator/organizations/${target.id}`, { status: "sleeping" })).status).toBe(400);
    expect((await operator.json("POST", "/operator/organizations/org_missing", { status: "active" })).status).toBe(404);
    const models = async () => (await operator.json<Record<string, unknown>[]>("GET", "/operator/models")).body;
    const servers = [
      {
        url: server.upstream.url,
        state: "up",
        failures: 0,
        outUntil: null,
        inFlight: 0,
        recentCalls: expect.any(Number),
        recentFailures: 0,
        outFor: null,
        affinityCalls: 0,
        affinityMovedAway: 0,
        calls: { finished: expect.any(Number), failed: 0, rejected: 0, stopped: 0 },
      },
    ];
    expect(await models()).toEqual([
      {
        id: "m",
        backend: "openai",
        enabled: true,
        fallbacks: [],
        contextFallbacks: [],
        active: 0,
        queued: 0,
        maxConcurrency: null,
        queueSize: 100,
        quotaWeight: 1,
        servers,
      },
    ]);
    // The limits in force: a reloaded configuration's, at once.
    const plans = [
      { id: "default", models: ["*"], tokens_per_5h: 100_000, tokens_per_month: 1_000_000 },
      { id: "pro", models: ["*"] },
    ];
    const reloaded = {
      models: [
        fakeModel(server.upstream.url, "m", "usage-10-5", { max_concurrency: 4, queue_size: 20, fallbacks: ["n"] }),
        fakeModel(server.upstream.url, "n", "n", { quota_weight: 2.5 }),
      ],
      plans,
    };
    expect((await operator.json<{ weights: unknown }>("GET", `/operator/organizations/${target.id}/usage`)).body.weights).toEqual({});
    await sluice.server.reconfigure(resolveConfig(reloaded), { kind: "server", name: "SIGHUP" });
    expect(await models()).toMatchObject([
      { id: "m", maxConcurrency: 4, queueSize: 20, fallbacks: ["n"], quotaWeight: 1 },
      { id: "n", fallbacks: [], quotaWeight: 2.5 },
    ]);
    // What an organization's usage page says of its plan's models that count other than once.
    expect((await operator.json<{ weights: unknown }>("GET", `/operator/organizations/${target.id}/usage`)).body.weights).toEqual({ n: 2.5 });
    expect((await operator.request("GET", "/keys")).status).toBe(403);
  });
});
