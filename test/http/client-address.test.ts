// The address a request comes from (src/http/client-address.ts) behind trusted proxies: X-Forwarded-For read from the
// right past them, for keys bound to networks, the console's audit trail and its sign-in limit per address; and
// without them, a proxy's address never held against its callers.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { ConsoleClient, consolePassword, startConsoleSluice } from "../modules/console/console-client";
import { capturingLogger, eventually, fakeModel, refusal, startSluice, testActor, useFakeUpstream, type TestSluice } from "../helpers";

const upstream = useFakeUpstream();
const messages = [{ role: "user" as const, content: "Hello" }];

describe("behind trusted proxies (SLUICE_TRUSTED_PROXIES = 127.0.0.1 and 10.0.0.0/8)", () => {
  let sluice: TestSluice;
  let secret: string;

  beforeAll(async () => {
    sluice = await startSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")] }, { trustedProxies: ["127.0.0.1", "10.0.0.0/8"] });
    const organizationId = (await sluice.organizations.findByName("acme"))?.id as string;
    secret = (await sluice.keys.create({ organizationId, name: "office", networks: ["203.0.113.0/24"] }, testActor)).secret;
  });
  afterAll(async () => {
    await sluice.stop();
  });

  async function sentThrough(forwardedFor: string | undefined): Promise<{ status: number; message?: string }> {
    const client = new OpenAI({
      baseURL: `${sluice.url}/v1`,
      apiKey: secret,
      maxRetries: 0,
      defaultHeaders: forwardedFor === undefined ? {} : { "x-forwarded-for": forwardedFor },
    });
    const refused = await refusal(() => client.chat.completions.create({ model: "m", messages }));
    return refused.status === 0 ? { status: 0 } : { status: refused.status, message: refused.message };
  }

  test("the address is the first hop from the right that no trusted proxy vouches for", async () => {
    expect(await sentThrough("203.0.113.9")).toEqual({ status: 0 });
    // Through two proxies of ours: the one on 10.1.1.1 forwarded for the caller.
    expect(await sentThrough("203.0.113.9, 10.1.1.1")).toEqual({ status: 0 });
    // Whatever the caller wrote on the left of the first hop we trust is not read.
    expect(await sentThrough("198.51.100.1, 203.0.113.9")).toEqual({ status: 0 });
    expect((await sentThrough("203.0.113.9, 198.51.100.1")).message).toContain("the address 198.51.100.1");
    expect((await sentThrough("::ffff:198.51.100.2")).message).toContain("the address 198.51.100.2");
  });

  test("no header, or a hop that is not an address: the address is the last proxy's own", async () => {
    expect((await sentThrough(undefined)).message).toContain("the address 127.0.0.1");
    expect((await sentThrough("203.0.113.9, unknown")).message).toContain("the address 127.0.0.1");
    expect((await sentThrough("203.0.113.9, 10.1.1.1, _hidden")).message).toContain("the address 127.0.0.1");
    // Every hop a trusted proxy: the furthest one is all that is known.
    expect((await sentThrough("10.2.2.2, 10.1.1.1")).message).toContain("the address 10.2.2.2");
  });

  test("the console's audit trail records the forwarded address of a sign-in, failed or not, and of a change", async () => {
    await sluice.accounts.createUser({ email: "op@example.com", password: consolePassword, role: "operator", organizationId: null }, testActor);
    const forwarded = (address: string) => ({ "x-forwarded-for": `${address}, 10.1.1.1` });
    const signIn = (password: string, address: string) =>
      fetch(`${sluice.url}/console/api/signin`, {
        method: "POST",
        headers: { "content-type": "application/json", ...forwarded(address) },
        body: JSON.stringify({ email: "op@example.com", password }),
      });
    expect((await signIn("not the password", "198.51.100.7")).status).toBe(401);
    const signedIn = await signIn(consolePassword, "203.0.113.5");
    expect(signedIn.status).toBe(200);
    const cookie = (signedIn.headers.get("set-cookie") as string).split(";")[0] as string;
    const { csrfToken } = (await signedIn.json()) as { csrfToken: string };
    const created = await fetch(`${sluice.url}/console/api/operator/organizations`, {
      method: "POST",
      headers: { "content-type": "application/json", cookie, "x-csrf-token": csrfToken, ...forwarded("203.0.113.6") },
      body: JSON.stringify({ name: "forwarded co" }),
    });
    expect(created.status).toBe(201);
    const operator = new ConsoleClient(sluice.url);
    await operator.signIn("op@example.com", consolePassword);
    const entries = (await operator.json<{ entries: { action: string; address: string | null }[] }>("GET", "/operator/audit?actor=op@example.com")).body
      .entries;
    expect(entries.map((entry) => [entry.action, entry.address]).reverse()).toEqual([
      ["signin.failed", "198.51.100.7"],
      ["signin.succeeded", "203.0.113.5"],
      ["organization.created", "203.0.113.6"],
      // The ConsoleClient's own, with no header: the proxy's address is all there is.
      ["signin.succeeded", "127.0.0.1"],
    ]);
  });

  test("sign-ins: 20 failures from one address, whatever the accounts, refuse that address for the window, and no other", async () => {
    const attempt = (email: string, password: string, address: string) =>
      fetch(`${sluice.url}/console/api/signin`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-forwarded-for": address },
        body: JSON.stringify({ email, password }),
      });
    // A password tried against many accounts: each account fails once, far under its own limit of 5.
    for (let index = 0; index < 20; index++) expect((await attempt(`user${index}@example.com`, "Winter2026!", "198.51.100.9")).status).toBe(401);
    const refused = await attempt("op@example.com", consolePassword, "198.51.100.9");
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(800);
    expect(((await refused.json()) as { error: { code: string; message: string } }).error).toEqual(
      expect.objectContaining({ code: "too_many_sign_in_attempts", message: "Too many failed sign-ins from this address. Try again later." }),
    );
    expect((await attempt("op@example.com", consolePassword, "198.51.100.10")).status).toBe(200);
    const operator = new ConsoleClient(sluice.url);
    await operator.signIn("op@example.com", consolePassword);
    const reasons = (
      await operator.json<{ entries: { address: string | null; changes: { reason: [null, string] } | null }[] }>(
        "GET",
        "/operator/audit?action=signin.failed&limit=1",
      )
    ).body.entries;
    expect(reasons).toEqual([expect.objectContaining({ address: "198.51.100.9", changes: { reason: [null, "too many failed attempts from this address"] } })]);
  }, 30_000);
});

describe("without trusted proxies", () => {
  test("X-Forwarded-For from a peer that is not a trusted proxy is logged once, naming the peer, and never read", async () => {
    const logs = capturingLogger();
    const sluice = await startSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")] }, { logger: logs.logger });
    try {
      const organizationId = (await sluice.organizations.findByName("acme"))?.id as string;
      const { secret } = await sluice.keys.create({ organizationId, name: "office", networks: ["203.0.113.0/24"] }, testActor);
      for (const forwardedFor of ["203.0.113.9", "203.0.113.10"]) {
        const client = new OpenAI({ baseURL: `${sluice.url}/v1`, apiKey: secret, maxRetries: 0, defaultHeaders: { "x-forwarded-for": forwardedFor } });
        expect((await refusal(() => client.chat.completions.create({ model: "m", messages }))).message).toContain("the address 127.0.0.1");
      }
      const warned = () => logs.lines.filter((line) => String(line.message).startsWith("a request came with X-Forwarded-For"));
      await eventually(() => warned().length > 0);
      expect(warned()).toEqual([expect.objectContaining({ level: "warn", peer: "127.0.0.1" })]);
    } finally {
      await sluice.stop();
    }
  });

  test("sign-ins through a proxy Sluice was not told of (X-Forwarded-For from an untrusted peer) are not held against the proxy's address", async () => {
    const server = await startConsoleSluice();
    try {
      const attempt = (email: string, password: string, headers: Record<string, string>) =>
        fetch(`${server.sluice.url}/console/api/signin`, {
          method: "POST",
          headers: { "content-type": "application/json", ...headers },
          body: JSON.stringify({ email, password }),
        });
      // Twenty callers behind one proxy each get a password wrong: every later caller behind it may still sign in.
      for (let index = 0; index < 20; index++) {
        expect((await attempt(`user${index}@example.com`, "Winter2026!", { "x-forwarded-for": `198.51.100.${index}` })).status).toBe(401);
      }
      expect((await attempt("op@example.com", consolePassword, { "x-forwarded-for": "198.51.100.99" })).status).toBe(200);
      // Straight from the address itself, the same twenty failures are counted against it.
      for (let index = 0; index < 20; index++) expect((await attempt(`user${index}@example.com`, "Winter2026!", {})).status).toBe(401);
      expect((await attempt("op@example.com", consolePassword, {})).status).toBe(429);
    } finally {
      await server.stop();
    }
    // Forty password checks, each slow on purpose.
  }, 30_000);
});

test("SLUICE_LOG_CLIENT_IP: every request's log line names its caller's address, refused ones and other routes too", async () => {
  const logs = capturingLogger();
  const sluice = await startSluice(
    { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
    { logger: logs.logger, trustedProxies: ["127.0.0.1"], logClientAddresses: true },
  );
  try {
    const client = new OpenAI({ baseURL: `${sluice.url}/v1`, apiKey: sluice.key, maxRetries: 0, defaultHeaders: { "x-forwarded-for": "198.51.100.4" } });
    const whole = await client.chat.completions.create({ model: "m", messages }).withResponse();
    const streamed = await client.chat.completions.create({ model: "m", messages, stream: true }).withResponse();
    for await (const _ of streamed.data);
    await client.models.list();
    const missingKey = await fetch(`${sluice.url}/v1/embeddings`, { method: "POST", body: "{}" });
    await missingKey.arrayBuffer();
    const requestIds = [whole.response.headers.get("x-request-id"), streamed.response.headers.get("x-request-id"), missingKey.headers.get("x-request-id")];
    const lineOf = (requestId: string | null) => logs.lines.find((line) => line.message === "request" && line.request_id === requestId);
    await eventually(() => requestIds.every((requestId) => lineOf(requestId) !== undefined));
    expect(requestIds.map((requestId) => lineOf(requestId)?.client_ip)).toEqual(["198.51.100.4", "198.51.100.4", "127.0.0.1"]);
    expect(logs.lines.find((line) => line.message === "request" && line.route === "/v1/models")?.client_ip).toBe("198.51.100.4");
  } finally {
    await sluice.stop();
  }
});
