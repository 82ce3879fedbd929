// The whole console path in a real browser: Debian's Chromium, driven by playwright-core. Screenshots of each page
// go to test/artifacts/ for review.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { chromium, type Browser, type Locator, type Page } from "playwright-core";
import { startFakeOidc } from "../../fake-oidc";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { resolveConfig } from "../../../src/config/load";
import type { ConfigFile } from "../../../src/config/schema";
import { fakeModel, repositoryRoot, startSluice, testActor, type TestSluice } from "../../helpers";

const artifacts = join(repositoryRoot, "test/artifacts");
const configFile = (signUp: boolean): ConfigFile => ({
  models: [
    fakeModel(upstream.url, "qwen3", "usage-12-30", { fallbacks: ["qwen3-mini"], context_fallbacks: ["qwen3-long"] }),
    fakeModel(upstream.url, "qwen3-mini", "usage-12-30"),
    fakeModel(upstream.url, "qwen3-long", "usage-12-30", { context_window: 131_072, quota_weight: 2.5 }),
  ],
  plans: [{ id: "default", models: ["*"], tokens_per_5h: 200_000, tokens_per_month: 5_000_000, requests_per_minute: 1000 }],
  console: { sign_up: signUp },
});
let upstream: FakeUpstream;
let sluice: TestSluice;
let browser: Browser;

beforeAll(async () => {
  mkdirSync(artifacts, { recursive: true });
  upstream = startFakeUpstream();
  sluice = await startSluice(configFile(true));
  await sluice.accounts.createUser({ email: "operator@example.com", password: "operator password", role: "operator", organizationId: null }, testActor);
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
});
afterAll(async () => {
  await browser?.close();
  await sluice?.stop();
  await upstream?.stop();
});

/** Waits until the element is on screen (bun:test has no Playwright matchers). */
async function visible(locator: Locator): Promise<void> {
  await locator.waitFor({ state: "visible", timeout: 10_000 });
}

/** Waits until the element's text contains `text`. */
async function showsText(locator: Locator, text: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!((await locator.textContent().catch(() => "")) ?? "").includes(text)) {
    if (Date.now() > deadline) throw new Error(`"${text}" never appeared; saw "${await locator.textContent().catch(() => "")}"`);
    await Bun.sleep(50);
  }
}

/** What Chromium refused under the console's Content-Security-Policy, per page. */
const violations: string[] = [];
function watchPolicy(page: Page): Page {
  page.on("console", (message) => {
    if (message.text().includes("Content Security Policy")) violations.push(message.text());
  });
  return page;
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
}

test("sign up, waitlist, operator activates, sign in, create a key, use it, usage moves, revoke, 401", async () => {
  const member = watchPolicy(await (await browser.newContext({ viewport: { width: 1024, height: 800 }, acceptDownloads: true })).newPage());
  const loaded = await member.goto(sluice.url);
  expect(loaded?.headers()["content-security-policy"]).toContain("frame-ancestors 'none'");
  await member.getByRole("button", { name: "No account yet? Sign up" }).click();
  await shot(member, "01-sign-up");
  await member.getByLabel("Email").fill("dana@example.com");
  await member.getByLabel("Password").fill("a long enough password");
  await member.getByLabel("Organization").fill("Dana Labs");
  await member.getByRole("button", { name: "Sign up" }).click();
  await visible(member.getByText("Your organization is on the waitlist").first());
  expect(await member.getByRole("button", { name: "Create key" }).count()).toBe(0);
  await shot(member, "02-waitlist");

  const operator = watchPolicy(await (await browser.newContext()).newPage());
  await operator.goto(sluice.url);
  await operator.getByLabel("Email").fill("operator@example.com");
  await operator.getByLabel("Password").fill("operator password");
  await operator.getByRole("button", { name: "Sign in" }).click();
  await operator.getByRole("button", { name: "Activate Dana Labs" }).click();
  await visible(operator.getByTestId("org-Dana Labs").getByText("active"));
  // Each model's upstream servers, as their circuit breakers see them.
  await visible(operator.getByTestId("server-qwen3").getByText(`${upstream.url}: up`));
  await visible(operator.getByTestId("fallbacks-qwen3").getByText("qwen3-mini; too long: qwen3-long"));
  await visible(operator.getByTestId("fallbacks-qwen3-mini").getByText("none"));
  await showsText(operator.getByTestId("quota-weight-qwen3-long"), "2.5");
  await showsText(operator.getByTestId("quota-weight-qwen3"), "1");
  await shot(operator, "03-operator-organizations");

  // The key list's answer held back: what is typed before it arrives must survive the page rendering it.
  let releaseList = () => {};
  const listHeld = new Promise<void>((resolve) => {
    releaseList = resolve;
  });
  await member.route("**/console/api/keys", async (route) => {
    if (route.request().method() === "GET") await listHeld;
    await route.continue();
  });
  await member.reload();
  await member.getByLabel("Label").fill("notebook");
  await member.getByLabel("Max concurrent requests (optional, inside your plan)").fill("4");
  const listed = member.waitForResponse((response) => response.url().endsWith("/console/api/keys") && response.request().method() === "GET");
  releaseList();
  await listed;
  // The list's render comes within a frame of its answer.
  await member.waitForTimeout(300);
  expect(await member.getByLabel("Max concurrent requests (optional, inside your plan)").inputValue()).toBe("4");
  await member.unroute("**/console/api/keys");
  await member.getByRole("button", { name: "Create key" }).click();
  const secret = (await member.getByTestId("new-key").textContent())?.trim() as string;
  expect(secret).toMatch(/^sk-sluice-/);
  await visible(member.getByText("It is shown this once and never again"));
  await shot(member, "04-key-created");
  await member.getByRole("button", { name: "I have stored it" }).click();
  expect(await member.content()).not.toContain(secret);
  await showsText(member.getByTestId("caps-notebook"), "4 at once");
  await member.getByRole("button", { name: "Change caps of notebook" }).click();
  const caps = member.getByRole("form", { name: "Caps of notebook" });
  await caps.getByLabel("Tokens per 5 hours").fill("100000");
  await caps.getByLabel("Requests per minute").fill("600");
  // Bound to the networks this test's requests come from: the key below still answers.
  await caps.getByLabel(/^Networks/).fill("127.0.0.1, ::1");
  await caps.getByRole("button", { name: "Save caps" }).click();
  await showsText(member.getByTestId("caps-notebook"), "100,000 / 5 h · 600 requests / min · from 127.0.0.1, ::1");

  const client = new OpenAI({ baseURL: sluice.baseURL, apiKey: secret, maxRetries: 0 });
  const { data: completion, response } = await client.chat.completions
    .create({ model: "qwen3", messages: [{ role: "user", content: "hello" }] })
    .withResponse();
  expect(completion.usage?.total_tokens).toBe(42);
  const completionId = response.headers.get("x-request-id") as string;

  await member.getByRole("button", { name: "Usage" }).click();
  await showsText(member.getByTestId("usage-5 hours"), "42 tokens used");
  await showsText(member.getByTestId("quota-weights"), "each token of qwen3-long counts 2.5; of the other models, 1.");
  await showsText(member.getByTestId("usage-report"), "qwen342");
  // Model, tokens, then the prompt, cached and completion tokens they are made of.
  const [, tokens, prompt, cached, completed] = await member.getByTestId("usage-report").getByRole("row").nth(1).getByRole("cell").allTextContents();
  expect([tokens, cached, Number(prompt) + Number(completed)]).toEqual(["42", "0", 42]);
  await visible(member.locator(".uplot").first());
  await showsText(member.getByTestId("key-usage"), "42 of 100,000 tokens");
  await showsText(member.getByTestId("key-usage"), "599 of 600 left");
  await showsText(member.getByTestId("usage-requests"), "of 1,000 left");
  await shot(member, "05-usage");

  await member.getByRole("button", { name: "Requests" }).click();
  const log = member.getByTestId("request-log");
  await showsText(log, completionId);
  await showsText(log, "completed");
  await showsText(log, "notebook");
  // What the quotas counted: qwen3's weight is 1, so its 42 tokens.
  await showsText(member.getByTestId(`counted-${completionId}`), "42");
  await shot(member, "05b-requests");
  await member.getByLabel("Outcome").selectOption("content_filter");
  await member.getByRole("button", { name: "Show requests" }).click();
  await visible(member.getByText("No requests match."));
  await member.getByLabel("Outcome").selectOption("");
  await member.getByLabel("Request id").fill(completionId);
  await member.getByRole("button", { name: "Show requests" }).click();
  await showsText(log, completionId);
  const download = member.waitForEvent("download");
  await member.getByRole("link", { name: "Download CSV" }).click();
  const csv = await Bun.file((await (await download).path()) as string).text();
  expect(csv.trim().split("\n").length).toBe(2);
  expect(csv).toContain(completionId);

  await operator.getByRole("button", { name: "Audit trail" }).click();
  const trail = operator.getByTestId("audit-trail");
  await showsText(trail, "organization.updated");
  await showsText(trail, "status: waitlist → active");
  await showsText(trail, "key.created");
  await shot(operator, "03b-audit-trail");
  // The model's server again, with the call it answered.
  await operator.getByRole("button", { name: "Organizations and models" }).click();
  await visible(operator.getByTestId("server-qwen3").getByText(`${upstream.url}: up, 1 call (0 failed)`));

  await member.getByRole("button", { name: "API keys" }).click();
  member.once("dialog", (dialog) => void dialog.accept());
  await member.getByRole("button", { name: "Revoke notebook" }).click();
  await visible(member.getByRole("cell", { name: "revoked" }));
  await shot(member, "06-key-revoked");
  const error = await client.chat.completions.create({ model: "qwen3", messages: [{ role: "user", content: "hello" }] }).catch((caught: unknown) => caught);
  expect(error).toBeInstanceOf(OpenAI.AuthenticationError);

  const phone = watchPolicy(await (await browser.newContext({ viewport: { width: 375, height: 740 } })).newPage());
  await phone.goto(sluice.url);
  await phone.getByLabel("Email").fill("dana@example.com");
  await phone.getByLabel("Password").fill("a long enough password");
  await phone.keyboard.press("Enter");
  await visible(phone.getByRole("heading", { name: "API keys" }));
  const overflow = (await phone.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")) as number;
  expect(overflow).toBeLessThanOrEqual(0);
  await shot(phone, "07-keys-375px");
  // Every page above worked under the policy, and nothing it loads or does was refused.
  expect(violations).toEqual([]);
}, 60_000);

test("an operator makes a console token, a script provisions with it, the operator revokes it", async () => {
  const page = watchPolicy(await (await browser.newContext()).newPage());
  await page.goto(sluice.url);
  await page.getByLabel("Email").fill("operator@example.com");
  await page.getByLabel("Password").fill("operator password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("button", { name: "Console tokens" }).click();
  await page.getByLabel("Name").fill("provisioning");
  await page.getByLabel("Expires after (optional)").selectOption("30d");
  await page.getByRole("button", { name: "Create token" }).click();
  const token = (await page.getByTestId("new-console-token").textContent())?.trim() as string;
  expect(token).toMatch(/^sluice-console-/);
  await shot(page, "08-console-token-created");
  await page.getByRole("button", { name: "I have stored it" }).click();
  expect(await page.content()).not.toContain(token);
  await visible(page.getByRole("cell", { name: "operator@example.com" }));
  expect(
    (
      await page
        .getByRole("row", { name: /provisioning/ })
        .getByRole("cell")
        .nth(4)
        .textContent()
    )?.trim(),
  ).toBe("—");

  const script = (path: string, body?: unknown) =>
    fetch(`${sluice.url}/console/api${path}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const created = await script("/operator/organizations", { name: "Scripted Co" });
  expect(created.status).toBe(201);
  await page.getByRole("button", { name: "Organizations and models" }).click();
  await visible(page.getByTestId("org-Scripted Co"));

  await page.getByRole("button", { name: "Console tokens" }).click();
  // Name, account, prefix, created, then when the script last used it.
  const lastUsed = page
    .getByRole("row", { name: /provisioning/ })
    .getByRole("cell")
    .nth(4);
  await visible(lastUsed);
  expect((await lastUsed.textContent())?.trim()).not.toBe("—");
  page.once("dialog", (dialog) => void dialog.accept());
  await page.getByRole("button", { name: "Revoke provisioning" }).click();
  await visible(page.getByRole("cell", { name: "revoked" }));
  expect((await script("/operator/organizations")).status).toBe(401);
  expect(violations).toEqual([]);
}, 60_000);

test("an operator creates an organization and manages its keys from the console: one made, used, revoked", async () => {
  const page = watchPolicy(await (await browser.newContext()).newPage());
  await page.goto(sluice.url);
  await page.getByLabel("Email").fill("operator@example.com");
  await page.getByLabel("Password").fill("operator password");
  await page.getByRole("button", { name: "Sign in" }).click();
  const form = page.getByRole("form", { name: "New organization" });
  await form.getByLabel("Organization name").fill("Console Co");
  await form.getByRole("button", { name: "Create organization" }).click();
  await visible(page.getByTestId("org-Console Co"));
  await form.getByLabel("Organization name").fill("Console Co");
  await form.getByRole("button", { name: "Create organization" }).click();
  await visible(form.getByText("An organization with this name already exists."));

  await page.getByRole("button", { name: "Keys of Console Co" }).click();
  const keys = page.getByRole("region", { name: "Keys of Console Co" });
  await keys.getByLabel("Label").fill("ops");
  await keys.getByRole("button", { name: "Create key" }).click();
  const secret = (await keys.getByTestId("new-key").textContent())?.trim() as string;
  expect(secret).toMatch(/^sk-sluice-/);
  await shot(page, "09-operator-keys");
  await keys.getByRole("button", { name: "I have stored it" }).click();
  const client = new OpenAI({ baseURL: sluice.baseURL, apiKey: secret, maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: "qwen3", messages: [{ role: "user", content: "hello" }] });
  expect(answer.usage?.total_tokens).toBe(42);

  page.once("dialog", (dialog) => void dialog.accept());
  await keys.getByRole("button", { name: "Revoke ops" }).click();
  await visible(keys.getByRole("cell", { name: "revoked" }));
  const refused = await client.chat.completions.create({ model: "qwen3", messages: [{ role: "user", content: "hello" }] }).catch((caught: unknown) => caught);
  expect(refused).toBeInstanceOf(OpenAI.AuthenticationError);

  // Rotated: a new key shown once, the old one still working through its grace.
  await keys.getByLabel("Label").fill("rotating");
  await keys.getByRole("button", { name: "Create key" }).click();
  const first = (await keys.getByTestId("new-key").textContent())?.trim() as string;
  await keys.getByRole("button", { name: "I have stored it" }).click();
  page.once("dialog", (dialog) => void dialog.accept());
  await keys.getByRole("button", { name: "Rotate rotating" }).click();
  await showsText(keys.getByTestId("new-key"), "sk-sluice-");
  const second = (await keys.getByTestId("new-key").textContent())?.trim() as string;
  expect(second).not.toBe(first);
  expect(await keys.getByRole("button", { name: "Rotate rotating" }).count()).toBe(2);
  for (const secret of [first, second]) {
    const rotatedClient = new OpenAI({ baseURL: sluice.baseURL, apiKey: secret, maxRetries: 0 });
    expect((await rotatedClient.chat.completions.create({ model: "qwen3", messages: [{ role: "user", content: "hello" }] })).usage?.total_tokens).toBe(42);
  }

  // The organization bound to a network this test's requests do not come from: its keys are refused, until it is
  // bound to one they do.
  const networks = page.getByRole("form", { name: "Networks of Console Co" });
  await networks.getByLabel(/^Networks its keys/).fill("10.0.0.0/8");
  await networks.getByRole("button", { name: "Save networks" }).click();
  await showsText(page.getByTestId("networks-Console Co"), "10.0.0.0/8");
  const bound = new OpenAI({ baseURL: sluice.baseURL, apiKey: second, maxRetries: 0 });
  const outside = await bound.chat.completions.create({ model: "qwen3", messages: [{ role: "user", content: "hello" }] }).catch((caught: unknown) => caught);
  expect((outside as InstanceType<typeof OpenAI.APIError>).code).toBe("ip_not_authorized");
  await networks.getByLabel(/^Networks its keys/).fill("10.0.0.0/8, 127.0.0.1");
  await networks.getByRole("button", { name: "Save networks" }).click();
  await showsText(page.getByTestId("networks-Console Co"), "10.0.0.0/8, 127.0.0.1");
  expect((await bound.chat.completions.create({ model: "qwen3", messages: [{ role: "user", content: "hello" }] })).usage?.total_tokens).toBe(42);
  await networks.getByLabel(/^Networks its keys/).fill("10.0.0.0/40");
  await networks.getByRole("button", { name: "Save networks" }).click();
  await visible(networks.getByText('"10.0.0.0/40" is not an IP address or CIDR range'));
  expect(violations).toEqual([]);
}, 60_000);

test("sign-up closed: the page says to ask an operator, who adds the member from the organization's row; the member signs in", async () => {
  await sluice.server.reconfigure(resolveConfig(configFile(false)), testActor);
  try {
    const visitor = watchPolicy(await (await browser.newContext()).newPage());
    await visitor.goto(sluice.url);
    await visible(visitor.getByText("Accounts are made by an operator of this Sluice"));
    expect(await visitor.getByRole("button", { name: "No account yet? Sign up" }).count()).toBe(0);

    const page = watchPolicy(await (await browser.newContext()).newPage());
    await page.goto(sluice.url);
    await page.getByLabel("Email").fill("operator@example.com");
    await page.getByLabel("Password").fill("operator password");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("button", { name: "Keys of acme" }).click();
    const form = page.getByRole("form", { name: "Add a member to acme" });
    await form.getByLabel("Member email").fill("invited@example.com");
    await form.getByLabel("Their password").fill("an invited password");
    await form.getByRole("button", { name: "Add member" }).click();
    await visible(form.getByText("invited@example.com can now sign in to acme."));

    await visitor.getByLabel("Email").fill("invited@example.com");
    await visitor.getByLabel("Password").fill("an invited password");
    await visitor.getByRole("button", { name: "Sign in" }).click();
    await visible(visitor.getByText("Organization: acme"));
    expect(violations).toEqual([]);
  } finally {
    await sluice.server.reconfigure(resolveConfig(configFile(true)), testActor);
  }
}, 60_000);

test("single sign-on through a provider of another site: the button, the provider, back signed in; a refusal is shown on the sign-in page", async () => {
  const provider = await startFakeOidc("localhost");
  const withSso = (allowedDomains: string[], passwords = true): ConfigFile => ({
    ...configFile(true),
    console: {
      sign_up: true,
      sso: {
        issuer: provider.issuer,
        client_id: provider.clientId,
        client_secret_env: "BROWSER_SSO_SECRET",
        redirect_url: `${sluice.url}/console/api/sso/callback`,
        allowed_domains: allowedDomains,
        label: "Sign in with Acme ID",
        passwords,
      },
    },
  });
  process.env.BROWSER_SSO_SECRET = provider.clientSecret;
  await sluice.server.reconfigure(resolveConfig(withSso(["example.com"])), testActor);
  try {
    provider.user = { email: "operator@example.com", emailVerified: true };
    // The way back is a navigation from the provider's page, another site: the flow's cookie must be sent with it.
    provider.consentPage = true;
    const page = watchPolicy(await (await browser.newContext()).newPage());
    await page.goto(sluice.url);
    await page.getByRole("link", { name: "Sign in with Acme ID" }).click();
    await page.getByRole("link", { name: "Continue as operator@example.com" }).click();
    // Back from the provider (another site) with the flow's cookie, and signed in: the console shows the operator's pages.
    await visible(page.getByRole("button", { name: "Organizations and models" }));
    expect(provider.authorizations.length).toBe(1);
    await shot(page, "10-single-sign-on");

    await sluice.server.reconfigure(resolveConfig(withSso(["example.org"])), testActor);
    const refused = watchPolicy(await (await browser.newContext()).newPage());
    await refused.goto(sluice.url);
    await refused.getByRole("link", { name: "Sign in with Acme ID" }).click();
    await refused.getByRole("link", { name: "Continue as operator@example.com" }).click();
    await visible(refused.getByText("operator@example.com is not of a domain this console accepts (example.org)"));
    await visible(refused.getByRole("button", { name: "Sign in" }));
    // A link cannot put words of its own on the sign-in page: the reason comes in a cookie the callback set, once.
    await refused.reload();
    await visible(refused.getByRole("button", { name: "Sign in" }));
    expect(await refused.getByText("is not of a domain this console accepts").count()).toBe(0);
    const forged = watchPolicy(await (await browser.newContext()).newPage());
    await forged.goto(`${sluice.url}/?sign_in_error=${encodeURIComponent("Your account is locked: call 555-0100")}`);
    await visible(forged.getByRole("button", { name: "Sign in" }));
    expect(await forged.getByText("Your account is locked").count()).toBe(0);

    // Passwords off: the button is the only way in the page offers.
    await sluice.server.reconfigure(resolveConfig(withSso(["example.com"], false)), testActor);
    const ssoOnly = watchPolicy(await (await browser.newContext()).newPage());
    await ssoOnly.goto(sluice.url);
    await visible(ssoOnly.getByRole("link", { name: "Sign in with Acme ID" }));
    expect(await ssoOnly.getByLabel("Password").count()).toBe(0);
    expect(await ssoOnly.getByRole("button", { name: "No account yet? Sign up" }).count()).toBe(0);
    expect(violations).toEqual([]);
  } finally {
    await sluice.server.reconfigure(resolveConfig(configFile(true)), testActor);
    delete process.env.BROWSER_SSO_SECRET;
    await provider.stop();
  }
}, 60_000);

test("another site cannot frame the console", async () => {
  const page = await (await browser.newContext()).newPage();
  const refused: string[] = [];
  page.on("console", (message) => void refused.push(message.text()));
  await page.setContent(`<iframe id="frame" src="${sluice.url}/"></iframe>`);
  await Bun.sleep(500);
  const framed = page.frames().find((frame) => frame !== page.mainFrame());
  const framedText = (await framed?.evaluate("document.body?.innerText ?? ''").catch(() => "")) as string;
  expect(framedText).not.toContain("Sign in");
  expect(refused.join("\n")).toContain("frame-ancestors");
});
