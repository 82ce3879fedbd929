// Console tokens: the console API driven by scripts with `Authorization: Bearer`, each token acting as its account;
// and the operator routes a provisioning script needs (organizations, their keys, caps, usage).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { User } from "../../../src/storage/types";
import { testActor, type TestSluice } from "../../helpers";
import { ConsoleClient, consolePassword as password, startConsoleSluice } from "./console-client";

let server: Awaited<ReturnType<typeof startConsoleSluice>>;
let sluice: TestSluice;
let operator: User;

beforeAll(async () => {
  server = await startConsoleSluice([
    { id: "default", models: ["*"], tokens_per_5h: 100_000 },
    { id: "pro", models: ["*"] },
  ]);
  sluice = server.sluice;
  operator = (await sluice.accounts.findByEmail("op@example.com")) as User;
});
afterAll(() => server.stop());

/** A request with a bearer token and nothing else: no cookie, no CSRF token. */
async function withToken<T = Record<string, unknown>>(
  token: string,
  method: "GET" | "POST",
  path: string,
  body?: unknown,
): Promise<{ status: number; body: T }> {
  const response = await fetch(`${sluice.url}/console/api${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as T };
}

async function tokenFor(user: User, name: string, expiresInMs?: number): Promise<string> {
  return (await sluice.accounts.tokens.create({ owner: user, name, expiresInMs }, testActor)).secret;
}

async function member(email: string, organization: string): Promise<{ client: ConsoleClient; user: User; organizationId: string }> {
  const client = new ConsoleClient(sluice.url);
  expect((await client.json("POST", "/signup", { email, password, organization })).status).toBe(201);
  await client.signIn(email, password);
  const created = (await sluice.organizations.findByName(organization)) as { id: string; name: string };
  await sluice.organizations.update(created.name, { status: "active" }, testActor);
  return { client, user: (await sluice.accounts.findByEmail(email)) as User, organizationId: created.id };
}

type Created = { key: { id: string; organizationId: string; prefix: string }; secret: string };

describe("an operator's token provisions through the console API, without a session", () => {
  test("creates an organization and a capped key in it that works with the SDK; caps it, reads its usage, revokes it; the audit trail names the token", async () => {
    const token = await tokenFor(operator, "provisioning");
    expect(token).toStartWith("sluice-console-");

    const organization = await withToken<{ id: string; name: string; status: string; plan: string }>(token, "POST", "/operator/organizations", {
      name: "Tokened Co",
    });
    expect(organization.status).toBe(201);
    expect(organization.body).toMatchObject({ name: "Tokened Co", status: "active", plan: "default" });
    const organizationId = organization.body.id;

    const created = await withToken<Created>(token, "POST", `/operator/organizations/${organizationId}/keys`, {
      name: "ci",
      tokens_per_5h: 5000,
      models: ["m"],
    });
    expect(created.status).toBe(201);
    expect(created.body.key.organizationId).toBe(organizationId);
    expect(created.body.secret).toStartWith("sk-sluice-");
    const client = new OpenAI({ baseURL: sluice.baseURL, apiKey: created.body.secret, maxRetries: 0 });
    const answer = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(answer.usage?.total_tokens).toBe(15);

    const listed = await withToken<{ id: string }[]>(token, "GET", `/operator/organizations/${organizationId}/keys`);
    expect(listed.body.map((key) => key.id)).toEqual([created.body.key.id]);

    const capped = await withToken<{ maxConcurrency: number; tokensPer5h: number | null }>(token, "POST", `/keys/${created.body.key.id}/limits`, {
      max_concurrency: 2,
    });
    expect(capped.status).toBe(200);
    expect(capped.body).toMatchObject({ maxConcurrency: 2, tokensPer5h: null });

    const usage = await withToken<{ plan: string; snapshot: { fiveHours: { used: number } } }>(token, "GET", `/operator/organizations/${organizationId}/usage`);
    expect(usage.status).toBe(200);
    expect(usage.body.snapshot.fiveHours.used).toBe(15);

    expect((await withToken(token, "POST", `/keys/${created.body.key.id}/revoke`)).status).toBe(200);
    const refused = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.AuthenticationError);

    const trail = await sluice.audit.list({ organizationId, limit: 20 });
    expect(trail.map((entry) => [entry.action, entry.actorKind, entry.actor])).toEqual([
      ["key.revoked", "token", "op@example.com [provisioning]"],
      ["key.updated", "token", "op@example.com [provisioning]"],
      ["key.created", "token", "op@example.com [provisioning]"],
      ["organization.created", "token", "op@example.com [provisioning]"],
    ]);
  });

  test("bad input gets a 400 naming the field; an unknown organization 404; a waitlisted one no keys", async () => {
    const token = await tokenFor(operator, "validation");
    const cases: [unknown, string][] = [
      [{ name: "" }, "name"],
      [{ name: "Tokened Co" }, "name"],
      [{ name: "X", status: "sleepy" }, "status"],
      [{ name: "X", plan: "platinum" }, "plan"],
      [{ name: 42 }, "name"],
    ];
    for (const [body, param] of cases) {
      const response = await withToken<{ error: { param: string } }>(token, "POST", "/operator/organizations", body);
      expect({ status: response.status, param: response.body.error.param }).toEqual({ status: 400, param });
    }
    expect((await withToken(token, "POST", "/operator/organizations/org_nothing/keys", { name: "k" })).status).toBe(404);
    expect((await withToken(token, "GET", "/operator/organizations/org_nothing/usage")).status).toBe(404);
    const waiting = await withToken<{ id: string }>(token, "POST", "/operator/organizations", { name: "Later Co", status: "waitlist", plan: "pro" });
    expect(waiting.status).toBe(201);
    const key = await withToken<{ error: { code: string } }>(token, "POST", `/operator/organizations/${waiting.body.id}/keys`, { name: "early" });
    expect(key.status).toBe(403);
    expect(key.body.error.code).toBe("organization_inactive");
  });
});

describe("the same organization asked for twenty times at once", () => {
  test("one is created; the other nineteen get 400 naming `name`, never a 500", async () => {
    const token = await tokenFor(operator, "racing");
    const responses = await Promise.all(
      Array.from({ length: 20 }, () => withToken<{ error?: { param: string } }>(token, "POST", "/operator/organizations", { name: "Racing Co" })),
    );
    const statuses = responses.map((response) => response.status).sort();
    expect(statuses).toEqual([201, ...Array(19).fill(400)]);
    for (const response of responses.filter((candidate) => candidate.status === 400)) expect(response.body.error?.param).toBe("name");
    expect((await sluice.organizations.list()).filter((organization) => organization.name === "Racing Co").length).toBe(1);
  });
});

describe("a member's token acts as the member", () => {
  test("its own organization's keys and usage; operator routes 403; another organization's key 404", async () => {
    const alice = await member("alice@tokens.example", "Alice Co");
    const bob = await member("bob@tokens.example", "Bob Co");
    const bobsKey = (await bob.client.json<Created>("POST", "/keys", { name: "bob's" })).body;
    const token = await tokenFor(alice.user, "ci");

    const created = await withToken<Created>(token, "POST", "/keys", { name: "from ci" });
    expect(created.status).toBe(201);
    expect(created.body.key.organizationId).toBe(alice.organizationId);
    expect((await withToken<{ id: string }[]>(token, "GET", "/keys")).body.map((key) => key.id)).toEqual([created.body.key.id]);
    expect((await withToken(token, "GET", "/usage")).status).toBe(200);

    for (const [method, path, body] of [
      ["GET", "/operator/organizations", undefined],
      ["POST", "/operator/organizations", { name: "Mine Now" }],
      ["GET", `/operator/organizations/${bob.organizationId}/keys`, undefined],
      ["POST", `/operator/organizations/${bob.organizationId}/keys`, { name: "sneaky" }],
      ["GET", `/operator/organizations/${bob.organizationId}/usage`, undefined],
      ["GET", "/operator/audit", undefined],
    ] as const) {
      const response = await withToken<{ error: { code: string } }>(token, method, path, body);
      expect({ path, status: response.status, code: response.body.error.code }).toEqual({ path, status: 403, code: "forbidden" });
    }
    expect((await withToken(token, "POST", `/keys/${bobsKey.key.id}/revoke`)).status).toBe(404);
    expect((await withToken(token, "POST", `/keys/${bobsKey.key.id}/limits`, { max_concurrency: 1 })).status).toBe(404);
    expect((await sluice.keys.find(bobsKey.key.id))?.revokedAt).toBeNull();
  });
});

describe("tokens are made and revoked from a session", () => {
  test("created once with its secret; listed without it; a member sees its own, an operator everyone's; revoked, it fails from its next use", async () => {
    const carol = await member("carol@tokens.example", "Carol Co");
    const made = await carol.client.json<{ token: { id: string; name: string; email: string; prefix: string; expiresAt: number }; secret: string }>(
      "POST",
      "/tokens",
      { name: "deploy", expires_in: "1h" },
    );
    expect(made.status).toBe(201);
    expect(made.body.secret).toStartWith("sluice-console-");
    expect(made.body.secret.startsWith(made.body.token.prefix)).toBe(true);
    expect(made.body.token).toMatchObject({ name: "deploy", email: "carol@tokens.example" });
    expect(made.body.token.expiresAt - Date.now()).toBeGreaterThan(3_500_000);
    const secret = made.body.secret;
    expect((await withToken(secret, "GET", "/keys")).status).toBe(200);

    const listed = await carol.client.json<Record<string, unknown>[]>("GET", "/tokens");
    expect(listed.body.map((token) => token.id)).toEqual([made.body.token.id]);
    expect(JSON.stringify(listed.body)).not.toContain(secret.slice(made.body.token.prefix.length));
    expect(Object.keys(listed.body[0] ?? {})).not.toContain("tokenHash");

    const operatorClient = new ConsoleClient(sluice.url);
    await operatorClient.signIn("op@example.com", password);
    const everyone = (await operatorClient.json<{ id: string }[]>("GET", "/tokens")).body.map((token) => token.id);
    expect(everyone).toContain(made.body.token.id);
    expect(everyone.length).toBeGreaterThan(1);

    // Another member's token is "not found"; the member's own is revoked, once.
    const dave = await member("dave@tokens.example", "Dave Co");
    expect((await dave.client.json("POST", `/tokens/${made.body.token.id}/revoke`)).status).toBe(404);
    const revoked = await carol.client.json<{ revokedAt: number }>("POST", `/tokens/${made.body.token.id}/revoke`);
    expect(revoked.status).toBe(200);
    expect(revoked.body.revokedAt).toBeGreaterThan(0);
    const after = await withToken<{ error: { code: string } }>(secret, "GET", "/keys");
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe("not_signed_in");
    expect((await sluice.audit.list({ action: "token.revoked", limit: 10 })).map((entry) => entry.target)).toContain(made.body.token.id);
  });

  test("last used: none until used, then the time of a use, written at most once a minute by an instance", async () => {
    const erin = await member("erin@tokens.example", "Erin Co");
    const made = await erin.client.json<{ token: { id: string; lastUsedAt: number | null }; secret: string }>("POST", "/tokens", { name: "poller" });
    expect(made.body.token.lastUsedAt).toBeNull();
    const lastUsed = async () =>
      (await erin.client.json<{ id: string; lastUsedAt: number | null }[]>("GET", "/tokens")).body.find((token) => token.id === made.body.token.id)?.lastUsedAt;
    expect(await lastUsed()).toBeNull();
    // Written beside the request, not before its answer: read until it shows (or 2 s).
    const settled = async (isDone: (value: number | null | undefined) => boolean) => {
      const deadline = Date.now() + 2000;
      let value = await lastUsed();
      while (!isDone(value) && Date.now() < deadline) {
        await Bun.sleep(10);
        value = await lastUsed();
      }
      return value;
    };
    const before = Date.now();
    expect((await withToken(made.body.secret, "GET", "/keys")).status).toBe(200);
    const first = (await settled((value) => value !== null)) as number;
    expect(first).toBeGreaterThanOrEqual(before);
    // Another instance (this test's own service): its first use writes; within the minute it writes nothing more; a
    // minute on, it writes again.
    const tokens = sluice.accounts.tokens;
    const second = first + 10_000;
    await tokens.actorOf(made.body.secret, second);
    expect(await settled((value) => value === second)).toBe(second);
    await tokens.actorOf(made.body.secret, second + 30_000);
    await Bun.sleep(50);
    expect(await lastUsed()).toBe(second);
    await tokens.actorOf(made.body.secret, second + 61_000);
    expect(await settled((value) => value === second + 61_000)).toBe(second + 61_000);
  });

  test("a token cannot list, make or revoke tokens (a leaked one cannot mint others that outlive it), nor sign out", async () => {
    const token = await tokenFor(operator, "no minting");
    const id = (await sluice.accounts.tokens.list(operator.id))[0]?.id as string;
    for (const [method, path, body] of [
      ["GET", "/tokens", undefined],
      ["POST", "/tokens", { name: "second" }],
      ["POST", `/tokens/${id}/revoke`, undefined],
      ["POST", "/signout", undefined],
    ] as const) {
      const response = await withToken<{ error: { code: string } }>(token, method, path, body);
      expect({ path, status: response.status, code: response.body.error.code }).toEqual({ path, status: 403, code: "forbidden" });
    }
  });

  test("bad input: a name missing or too long, an expiry that is not a duration", async () => {
    const client = new ConsoleClient(sluice.url);
    await client.signIn("op@example.com", password);
    const cases: [unknown, string][] = [
      [{ name: "   " }, "name"],
      [{ name: "x".repeat(101) }, "name"],
      [{ name: "x", expires_in: "soon" }, "expires_in"],
      [{}, "name"],
    ];
    for (const [body, param] of cases) {
      const response = await client.json<{ error: { param: string } }>("POST", "/tokens", body);
      expect({ status: response.status, param: response.body.error.param }).toEqual({ status: 400, param });
    }
  });
});

describe("what a token is not", () => {
  test("mistyped, expired, an API key, or a session's cookie value: 401; a console token is no API key", async () => {
    const expired = await tokenFor(operator, "short-lived", 1);
    await Bun.sleep(5);
    const valid = await tokenFor(operator, "valid");
    const session = new ConsoleClient(sluice.url);
    await session.signIn("op@example.com", password);
    const sessionToken = session.cookie.split("=")[1] as string;
    expect((await session.json("GET", "/operator/organizations")).status).toBe(200);
    for (const token of [`${valid}x`, valid.slice(0, -1), expired, sluice.key, sessionToken, "sluice-console-", "Bearer"]) {
      const response = await withToken<{ error: { code: string; type: string } }>(token, "GET", "/operator/organizations");
      expect({ status: response.status, code: response.body.error.code }).toEqual({ status: 401, code: "not_signed_in" });
    }
    const asKey = new OpenAI({ baseURL: sluice.baseURL, apiKey: valid, maxRetries: 0 });
    const refused = await asKey.models.list().catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.AuthenticationError);
  });

  test("the database holds its SHA-256 and prefix, never the token", async () => {
    const token = await tokenFor(operator, "stored");
    const rows = sluice.database.sqlite.query<Record<string, unknown>, []>("SELECT * FROM console_tokens").all();
    const stored = JSON.stringify(rows);
    expect(stored).not.toContain(token);
    expect(stored).toContain(new Bun.CryptoHasher("sha256").update(token).digest("hex"));
  });
});
