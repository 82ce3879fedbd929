// Console sign-in through an OpenID Connect provider (a fake one: test/fake-oidc.ts), followed redirect by redirect as
// a browser would, with its cookies.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ConfigError, resolveConfig } from "../../../src/config/load";
import type { ConfigFile } from "../../../src/config/schema";
import { startFakeOidc, type FakeOidc, type TokenMode } from "../../fake-oidc";
import { startSluice, testActor, type TestSluice } from "../../helpers";

let oidc: FakeOidc;
let sluice: TestSluice;
const password = "a long enough password";

function configFile(issuer: string, sso: Record<string, unknown> = {}): ConfigFile {
  return {
    models: [{ id: "m", backend: "demo" }],
    plans: [{ id: "default", models: ["*"] }],
    console: {
      sso: {
        issuer,
        client_id: "sluice-console",
        client_secret_env: "SSO_SECRET",
        redirect_url: "http://127.0.0.1:1/console/api/sso/callback",
        label: "Sign in with Acme ID",
        ...sso,
      },
    },
  };
}

beforeAll(async () => {
  oidc = await startFakeOidc();
  // The redirect address is the test server's own, known once it listens: started once to learn the port, then for good.
  sluice = await startSluice(configFile(oidc.issuer, { allowed_domains: ["example.com", "Example.org"] }), { environment: { SSO_SECRET: oidc.clientSecret } });
  const redirectUrl = `${sluice.url}/console/api/sso/callback`;
  await sluice.server.reconfigure(
    resolveConfig(configFile(oidc.issuer, { allowed_domains: ["example.com", "Example.org"], redirect_url: redirectUrl })),
    testActor,
  );
  const organization = (await sluice.organizations.findByName("acme"))!;
  await sluice.accounts.createUser({ email: "dana@example.com", password, role: "member", organizationId: organization.id }, testActor);
  await sluice.accounts.createUser({ email: "root@example.org", password, role: "operator", organizationId: null }, testActor);
});
afterAll(async () => {
  await sluice?.stop();
  await oidc?.stop();
});

/** What the browser ends on after the callback: where it is sent, and the session cookie it was given, if any. */
interface Landing {
  status: number;
  location: string;
  session: string | undefined;
  setCookies: string[];
}

/** Start → the provider (which signs `oidc.user` in at once) → the callback, carrying the flow cookie as a browser does. */
async function signInThroughProvider(tamper: { state?: string; dropFlowCookie?: boolean } = {}): Promise<Landing> {
  const start = await fetch(`${sluice.url}/console/api/sso/start`, { redirect: "manual" });
  expect(start.status).toBe(302);
  const flowCookie = start.headers.getSetCookie().find((cookie) => cookie.startsWith("sluice_sso="));
  expect(flowCookie).toContain("HttpOnly");
  expect(flowCookie).toContain("SameSite=Lax");
  const atProvider = await fetch(start.headers.get("location") as string, { redirect: "manual" });
  const callback = new URL(atProvider.headers.get("location") as string);
  if (tamper.state !== undefined) callback.searchParams.set("state", tamper.state);
  const headers: Record<string, string> = tamper.dropFlowCookie ? {} : { cookie: (flowCookie as string).split(";")[0] as string };
  const back = await fetch(callback, { redirect: "manual", headers });
  const setCookies = back.headers.getSetCookie();
  const session = setCookies.find((cookie) => cookie.startsWith("sluice_session=") && !cookie.startsWith("sluice_session=;"));
  return { status: back.status, location: back.headers.get("location") ?? "", session: session?.split(";")[0], setCookies };
}

/** The reason the sign-in page is given: a short-lived cookie, never the address (which a link could write). */
function reasonIn(setCookies: string[]): string {
  const cookie = setCookies.find((entry) => entry.startsWith("sluice_sign_in_error="));
  expect(cookie).toContain("Max-Age=60");
  expect(cookie).toContain("HttpOnly");
  return decodeURIComponent(((cookie as string).split(";")[0] as string).slice("sluice_sign_in_error=".length));
}

function errorShown(landing: Landing): string {
  expect(landing.status).toBe(302);
  expect(landing.session).toBeUndefined();
  expect(landing.location).toBe("/");
  return reasonIn(landing.setCookies);
}

describe("single sign-on", () => {
  test("the console says how to sign in; a member signs in through the provider and gets a working session; the audit trail says so", async () => {
    expect(await (await fetch(`${sluice.url}/console/api/sign-up`)).json()).toEqual({ open: true, sso: "Sign in with Acme ID", passwords: true });
    oidc.user = { email: "Dana@Example.com", emailVerified: true };
    const landing = await signInThroughProvider();
    expect(landing.status).toBe(302);
    expect(landing.location).toBe("/");
    expect(landing.session).toBeDefined();
    // The flow cookie is spent.
    expect(landing.setCookies.some((cookie) => cookie.startsWith("sluice_sso=;") || /^sluice_sso=[^;]*;.*Max-Age=0/i.test(cookie))).toBe(true);
    const me = await fetch(`${sluice.url}/console/api/me`, { headers: { cookie: landing.session as string } });
    expect(me.status).toBe(200);
    const body = (await me.json()) as { email: string; role: string; csrfToken: string; organization: { name: string } };
    expect(body).toMatchObject({ email: "dana@example.com", role: "member", organization: { name: "acme" } });
    // The session is a session like any other: a change with its CSRF token works.
    const created = await fetch(`${sluice.url}/console/api/keys`, {
      method: "POST",
      headers: { cookie: landing.session as string, "x-csrf-token": body.csrfToken, "content-type": "application/json" },
      body: JSON.stringify({ name: "through sso" }),
    });
    expect(created.status).toBe(201);
    // What the provider was asked: the code flow with PKCE (S256), the configured redirect, a state and a nonce.
    const asked = oidc.authorizations.at(-1) as URLSearchParams;
    expect(asked.get("response_type")).toBe("code");
    expect(asked.get("client_id")).toBe("sluice-console");
    expect(asked.get("scope")).toBe("openid email");
    expect(asked.get("redirect_uri")).toBe(`${sluice.url}/console/api/sso/callback`);
    expect(asked.get("code_challenge_method")).toBe("S256");
    for (const name of ["state", "nonce", "code_challenge"]) expect((asked.get(name) ?? "").length).toBeGreaterThanOrEqual(32);
    expect(oidc.tokenRequests.at(-1)?.form.get("code_verifier")?.length).toBeGreaterThanOrEqual(43);
    const entries = await sluice.audit.list({ since: 0, limit: 20 });
    const signedIn = entries.find((entry) => entry.action === "signin.succeeded" && entry.target === "dana@example.com");
    expect(signedIn?.changes).toMatchObject({ method: [null, "sso"] });
  });

  test("a provider that signs with ES256 (P-256) is taken as well", async () => {
    oidc.user = { email: "dana@example.com", emailVerified: true };
    oidc.algorithm = "ES256";
    try {
      const landing = await signInThroughProvider();
      expect(landing.session).toBeDefined();
      // Signed with a curve key the provider does not hold: refused as any forged signature is.
      oidc.mode = "bad-signature";
      expect(errorShown(await signInThroughProvider())).toContain("signature is not the identity provider's");
    } finally {
      oidc.algorithm = "RS256";
      oidc.mode = "ok";
    }
  });

  test("an operator signs in the same way, and sees the operator's pages; a reload that leaves [console.sso] alone keeps what was fetched", async () => {
    oidc.user = { email: "root@example.org" };
    const discovered = oidc.discoveries;
    const redirectUrl = `${sluice.url}/console/api/sso/callback`;
    await sluice.server.reconfigure(
      resolveConfig(configFile(oidc.issuer, { allowed_domains: ["example.com", "Example.org"], redirect_url: redirectUrl })),
      testActor,
    );
    const landing = await signInThroughProvider();
    expect(landing.session).toBeDefined();
    expect(oidc.discoveries).toBe(discovered);
    expect((await fetch(`${sluice.url}/console/api/operator/organizations`, { headers: { cookie: landing.session as string } })).status).toBe(200);
  });

  test("an email without a console account is not let in, and no account is made", async () => {
    oidc.user = { email: "stranger@example.com", emailVerified: true };
    const landing = await signInThroughProvider();
    const reason = errorShown(landing);
    expect(reason).toContain("No console account for stranger@example.com");
    // The sign-in page is told once, by the setting it reads as it loads.
    const told = (landing.setCookies.find((entry) => entry.startsWith("sluice_sign_in_error=")) as string).split(";")[0] as string;
    const setting = await fetch(`${sluice.url}/console/api/sign-up`, { headers: { cookie: told } });
    expect(((await setting.json()) as { error?: string }).error).toBe(reason);
    expect(setting.headers.getSetCookie().some((entry) => entry.startsWith("sluice_sign_in_error=;") && /Max-Age=0/i.test(entry))).toBe(true);
    expect(await sluice.accounts.findByEmail("stranger@example.com")).toBeUndefined();
    const entries = await sluice.audit.list({ since: 0, limit: 50 });
    expect(entries.some((entry) => entry.action === "signin.failed" && entry.target === "stranger@example.com")).toBe(true);
  });

  test("refused: a token the provider did not sign, for another client or issuer, expired, of another sign-in, unsigned; an unverified email; another domain", async () => {
    oidc.user = { email: "dana@example.com", emailVerified: true };
    const cases: [TokenMode, string][] = [
      ["bad-signature", "signature is not the identity provider's"],
      ["unknown-key", "a key the identity provider does not publish"],
      ["other-audience", "for another client"],
      ["other-issuer", "issued by https://elsewhere.example"],
      ["expired", "has expired"],
      ["other-nonce", "nonce differs"],
      ["none-algorithm", "signed with none"],
      ["es256-with-rsa-key", "a key the identity provider does not publish"],
    ];
    for (const [mode, reason] of cases) {
      oidc.mode = mode;
      expect(errorShown(await signInThroughProvider())).toContain(reason);
    }
    oidc.mode = "ok";
    oidc.user = { email: "dana@example.com", emailVerified: false };
    expect(errorShown(await signInThroughProvider())).toContain("has not verified dana@example.com");
    oidc.user = { email: "dana@elsewhere.net", emailVerified: true };
    expect(errorShown(await signInThroughProvider())).toContain("not of a domain this console accepts (example.com, example.org)");
    oidc.user = { email: "dana@example.com", emailVerified: true };
    expect((await signInThroughProvider()).session).toBeDefined();
  });

  test("refused: a callback whose state is not the flow's (a forged link), or that comes without the flow's cookie", async () => {
    oidc.user = { email: "dana@example.com", emailVerified: true };
    expect(errorShown(await signInThroughProvider({ state: "forged" }))).toContain("state does not match");
    expect(errorShown(await signInThroughProvider({ dropFlowCookie: true }))).toContain("began in another browser");
    // A callback from the provider carrying its own refusal.
    const refused = await fetch(`${sluice.url}/console/api/sso/callback?error=access_denied&error_description=not+assigned`, { redirect: "manual" });
    expect(refused.headers.get("location")).toBe("/");
    expect(reasonIn(refused.headers.getSetCookie())).toContain("access_denied (not assigned)");
  });

  test("a provider that does not answer: the sign-in page says so", async () => {
    const down = await startFakeOidc();
    const issuer = down.issuer;
    await down.stop();
    const other = await startSluice(configFile(issuer), { environment: { SSO_SECRET: "x" } });
    try {
      const start = await fetch(`${other.url}/console/api/sso/start`, { redirect: "manual" });
      expect(start.status).toBe(302);
      expect(start.headers.get("location")).toBe("/");
      expect(reasonIn(start.headers.getSetCookie())).toContain("did not answer");
    } finally {
      await other.stop();
    }
  });

  test("without [console.sso]: no button, and its routes are 404", async () => {
    const plain = await startSluice({ models: [{ id: "m", backend: "demo" }], plans: [{ id: "default", models: ["*"] }] });
    try {
      expect(await (await fetch(`${plain.url}/console/api/sign-up`)).json()).toEqual({ open: true, sso: null, passwords: true });
      const start = await fetch(`${plain.url}/console/api/sso/start`, { redirect: "manual" });
      expect(start.status).toBe(404);
      expect(((await start.json()) as { error: { code: string } }).error.code).toBe("not_found");
    } finally {
      await plain.stop();
    }
  });

  test("passwords = false: single sign-on is the only way in; password sign-in and sign-up are 403, console tokens still work", async () => {
    const redirectUrl = `${sluice.url}/console/api/sso/callback`;
    const settings = { allowed_domains: ["example.com", "Example.org"], redirect_url: redirectUrl };
    await sluice.server.reconfigure(resolveConfig(configFile(oidc.issuer, { ...settings, passwords: false })), testActor);
    try {
      expect(await (await fetch(`${sluice.url}/console/api/sign-up`)).json()).toEqual({ open: false, sso: "Sign in with Acme ID", passwords: false });
      const post = (path: string, body: unknown) =>
        fetch(`${sluice.url}/console/api${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      for (const [path, body] of [
        ["/signin", { email: "dana@example.com", password }],
        ["/signup", { email: "new@example.com", password, organization: "New Co" }],
      ] as const) {
        const refused = await post(path, body);
        expect(refused.status).toBe(403);
        expect(((await refused.json()) as { error: { message: string } }).error.message).toContain("Passwords are off on this console");
      }
      expect(await sluice.organizations.findByName("New Co")).toBeUndefined();
      oidc.user = { email: "dana@example.com", emailVerified: true };
      expect((await signInThroughProvider()).session).toBeDefined();
      const dana = (await sluice.accounts.findByEmail("dana@example.com"))!;
      const { secret } = await sluice.accounts.tokens.create({ owner: dana, name: "script" }, testActor);
      expect((await fetch(`${sluice.url}/console/api/me`, { headers: { authorization: `Bearer ${secret}` } })).status).toBe(200);
    } finally {
      await sluice.server.reconfigure(resolveConfig(configFile(oidc.issuer, settings)), testActor);
    }
  });

  test("organization set: a verified email without an account joins it as a member, once; one that does not exist is named", async () => {
    const redirectUrl = `${sluice.url}/console/api/sso/callback`;
    const settings = { allowed_domains: ["example.com", "Example.org"], redirect_url: redirectUrl };
    await sluice.server.reconfigure(resolveConfig(configFile(oidc.issuer, { ...settings, organization: "acme" })), testActor);
    try {
      oidc.user = { email: "newcomer@example.com", emailVerified: true };
      const landing = await signInThroughProvider();
      expect(landing.session).toBeDefined();
      const me = (await (await fetch(`${sluice.url}/console/api/me`, { headers: { cookie: landing.session as string } })).json()) as Record<string, unknown>;
      expect(me).toMatchObject({ email: "newcomer@example.com", role: "member", organization: { name: "acme" } });
      const entries = await sluice.audit.list({ since: 0, limit: 50 });
      expect(entries.filter((entry) => entry.action === "account.created" && entry.target === "newcomer@example.com").length).toBe(1);
      // The second sign-in finds the account: none made again.
      expect((await signInThroughProvider()).session).toBeDefined();
      expect(
        (await sluice.audit.list({ since: 0, limit: 50 })).filter((entry) => entry.action === "account.created" && entry.target === "newcomer@example.com")
          .length,
      ).toBe(1);
      // Its password is random and never shown: it signs in through the provider only.
      const byPassword = await fetch(`${sluice.url}/console/api/signin`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ email: "newcomer@example.com", password: "a guessed password" }),
      });
      expect(byPassword.status).toBe(401);
      // The domain rule still comes first: an email of another domain joins nothing.
      oidc.user = { email: "outsider@elsewhere.net", emailVerified: true };
      expect(errorShown(await signInThroughProvider())).toContain("not of a domain this console accepts");
      expect(await sluice.accounts.findByEmail("outsider@elsewhere.net")).toBeUndefined();
      await sluice.server.reconfigure(resolveConfig(configFile(oidc.issuer, { ...settings, organization: "Ghost Co" })), testActor);
      oidc.user = { email: "another@example.com", emailVerified: true };
      expect(errorShown(await signInThroughProvider())).toContain("Ghost Co, the organization new members join, does not exist");
      expect(await sluice.accounts.findByEmail("another@example.com")).toBeUndefined();
      const refusals = (await sluice.audit.list({ since: 0, limit: 50 })).filter((entry) => entry.action === "signin.failed");
      expect(refusals.some((entry) => String(entry.changes?.reason?.[1]).includes("Ghost Co"))).toBe(true);
    } finally {
      await sluice.server.reconfigure(resolveConfig(configFile(oidc.issuer, settings)), testActor);
    }
  });

  test("configuration mistakes are refused at start, naming the key", () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ issuer: "login.example.com" }, "console.sso.issuer"],
      [{ redirect_url: "https://sluice.example.com/callback" }, "console.sso.redirect_url: it must end in /console/api/sso/callback"],
      [{ client_secret_file: "/run/secrets/sso" }, "give console.sso.client_secret_env or console.sso.client_secret_file, not both"],
      [{ client_secret_env: undefined }, "console.sso: client_secret_env or client_secret_file is required"],
      [{ allowed_domains: ["not a domain"] }, "console.sso.allowed_domains"],
    ];
    for (const [fields, named] of cases) {
      const file = configFile("https://login.example.com", fields);
      expect(() => resolveConfig(file)).toThrow(ConfigError);
      expect(() => resolveConfig(file)).toThrow(named);
    }
    expect(resolveConfig(configFile("https://login.example.com", { allowed_domains: ["Example.COM"] })).console.sso).toMatchObject({
      issuer: "https://login.example.com",
      clientId: "sluice-console",
      allowedDomains: ["example.com"],
      label: "Sign in with Acme ID",
    });
  });
});
