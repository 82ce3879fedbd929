// `[console] networks`: the console (pages, API, sessions, console tokens, single sign-on) answers only callers from
// these; the model APIs and the health and metrics routes are not bound by it. Callers' addresses come through a
// trusted proxy's X-Forwarded-For, as behind a load balancer.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ConfigError, resolveConfig } from "../../../src/config/load";
import type { ConfigFile } from "../../../src/config/schema";
import { startSluice, testActor, type TestSluice } from "../../helpers";

let sluice: TestSluice;
const office = "10.20.30.40";
const outside = "203.0.113.9";

function configFile(networks?: string[]): ConfigFile {
  return {
    models: [{ id: "m", backend: "demo" }],
    plans: [{ id: "default", models: ["*"] }],
    console: networks === undefined ? {} : { networks },
  };
}

beforeAll(async () => {
  sluice = await startSluice(configFile(["10.0.0.0/8", "2001:db8::/32"]), { trustedProxies: ["127.0.0.1"] });
  await sluice.accounts.createUser({ email: "op@example.com", password: "operator password", role: "operator", organizationId: null }, testActor);
});
afterAll(async () => {
  await sluice?.stop();
});

function from(address: string, path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${sluice.url}${path}`, { ...init, headers: { ...(init.headers as Record<string, string>), "x-forwarded-for": address } });
}

async function refusedFrom(address: string, path: string, init: RequestInit = {}): Promise<void> {
  const response = await from(address, path, init);
  expect(response.status).toBe(403);
  const error = ((await response.json()) as { error: { code: string; message: string } }).error;
  expect(error.code).toBe("forbidden");
  expect(error.message).toContain(`This console answers only from its networks ([console] networks); ${address} is not among them.`);
}

describe("[console] networks", () => {
  test("the page and the API answer callers from the networks; others get 403 before any password, session or token is looked at", async () => {
    expect((await from(office, "/")).status).toBe(200);
    expect((await from("2001:db8::7", "/")).status).toBe(200);
    expect((await from(office, "/console/api/sign-up")).status).toBe(200);
    await refusedFrom(outside, "/");
    await refusedFrom(outside, "/console/api/sign-up");
    const signIn = {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "op@example.com", password: "operator password" }),
    };
    await refusedFrom(outside, "/console/api/signin", signIn);
    // Nothing was tried: no failure is counted against the account, which signs in from the office at once.
    const signedIn = await from(office, "/console/api/signin", signIn);
    expect(signedIn.status).toBe(200);
    const session = (signedIn.headers.get("set-cookie") as string).split(";")[0] as string;
    expect((await from(office, "/console/api/me", { headers: { cookie: session } })).status).toBe(200);
    // A session or a console token opened inside is no pass from outside.
    await refusedFrom(outside, "/console/api/me", { headers: { cookie: session } });
    const operator = (await sluice.accounts.findByEmail("op@example.com"))!;
    const { secret } = await sluice.accounts.tokens.create({ owner: operator, name: "script" }, testActor);
    expect((await from(office, "/console/api/operator/organizations", { headers: { authorization: `Bearer ${secret}` } })).status).toBe(200);
    await refusedFrom(outside, "/console/api/operator/organizations", { headers: { authorization: `Bearer ${secret}` } });
  });

  test("the model APIs, health and metrics are not the console's: callers from anywhere reach them", async () => {
    const models = await from(outside, "/v1/models", { headers: { authorization: `Bearer ${sluice.key}` } });
    expect(models.status).toBe(200);
    const answer = await from(outside, "/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${sluice.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(answer.status).toBe(200);
    for (const path of ["/healthz", "/readyz", "/metrics"]) expect((await from(outside, path)).status).toBe(200);
  });

  test("a reload changes them from the next request; removed, the console answers anywhere", async () => {
    await sluice.server.reconfigure(resolveConfig(configFile(["203.0.113.0/24"])), testActor);
    expect((await from(outside, "/console/api/sign-up")).status).toBe(200);
    await refusedFrom(office, "/console/api/sign-up");
    await sluice.server.reconfigure(resolveConfig(configFile()), testActor);
    expect((await from(office, "/console/api/sign-up")).status).toBe(200);
    expect((await from(outside, "/")).status).toBe(200);
    await sluice.server.reconfigure(resolveConfig(configFile(["10.0.0.0/8", "2001:db8::/32"])), testActor);
  });

  test("refused at start: entries that are not addresses or ranges, none, or too many", () => {
    for (const [networks, named] of [
      [["10.0.0.0/33"], 'invalid configuration key console.networks: "10.0.0.0/33"'],
      [["office"], "console.networks"],
      [[], "console.networks"],
      [Array.from({ length: 51 }, (_, index) => `10.0.0.${index}`), "console.networks: at most 50"],
    ] as const) {
      expect(() => resolveConfig(configFile([...networks]))).toThrow(ConfigError);
      expect(() => resolveConfig(configFile([...networks]))).toThrow(named);
    }
  });
});
