// Web pages calling the API (SLUICE_CORS_ORIGINS): preflights answered for the allowed origins only, every API
// answer (whole, streamed, refused) readable by them, the console never; and a real browser's page doing it.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chromium, type Browser } from "playwright-core";
import { fakeModel, startSluice, useFakeUpstream, type TestSluice } from "../helpers";

const upstream = useFakeUpstream();
const allowed = "http://allowed.test:8080";
const chat = { model: "m", messages: [{ role: "user", content: "Hello" }] };

describe("SLUICE_CORS_ORIGINS names one origin", () => {
  let sluice: TestSluice;

  beforeAll(async () => {
    sluice = await startSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")] }, { corsOrigins: { any: false, origins: [allowed] } });
  });
  afterAll(async () => {
    await sluice.stop();
  });

  const preflight = (path: string, origin: string) =>
    fetch(`${sluice.url}${path}`, {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type, x-stainless-os" },
    });

  test("a preflight from it is 204 with the methods, the headers asked for and the origin; from another, 204 without them", async () => {
    for (const path of [
      "/v1/chat/completions",
      "/v1/responses",
      "/v1/messages",
      "/v1/completions",
      "/v1/embeddings",
      "/v1/models",
      "/v1/messages/count_tokens",
    ]) {
      const response = await preflight(path, allowed);
      expect({ path, status: response.status }).toEqual({ path, status: 204 });
      expect(Object.fromEntries(response.headers)).toMatchObject({
        "access-control-allow-origin": allowed,
        "access-control-allow-methods": "GET, POST, OPTIONS",
        "access-control-allow-headers": "authorization, content-type, x-stainless-os",
        "access-control-max-age": "600",
        vary: "Origin",
      });
      const refused = await preflight(path, "http://elsewhere.test");
      expect(refused.status).toBe(204);
      expect(refused.headers.get("access-control-allow-origin")).toBeNull();
      expect(refused.headers.get("access-control-allow-headers")).toBeNull();
    }
  });

  test("every answer of the API carries the origin and the headers a page may read: whole, streamed, refused, listed", async () => {
    const headers = { origin: allowed, "content-type": "application/json", authorization: `Bearer ${sluice.key}` };
    const answers = {
      whole: await fetch(`${sluice.url}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify(chat) }),
      streamed: await fetch(`${sluice.url}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify({ ...chat, stream: true }) }),
      badKey: await fetch(`${sluice.url}/v1/chat/completions`, { method: "POST", headers: { ...headers, authorization: "Bearer nope" }, body: "{}" }),
      // Refused by a route Elysia serves: its one error mapping's answer carries them too.
      badKeyModels: await fetch(`${sluice.url}/v1/models`, { headers: { ...headers, authorization: "Bearer nope" } }),
      unknownModel: await fetch(`${sluice.url}/v1/responses`, { method: "POST", headers, body: JSON.stringify({ model: "nothing", input: "Hi" }) }),
      models: await fetch(`${sluice.url}/v1/models`, { headers }),
      embeddings: await fetch(`${sluice.url}/v1/embeddings`, { method: "POST", headers, body: JSON.stringify({ model: "m", input: "Hi" }) }),
      viaElysia: await fetch(`${sluice.url}/v1/chat/completions/`, { method: "POST", headers, body: JSON.stringify(chat) }),
    };
    const seen = Object.fromEntries(
      await Promise.all(
        Object.entries(answers).map(async ([name, response]) => {
          await response.arrayBuffer();
          return [
            name,
            [
              response.status,
              response.headers.get("access-control-allow-origin"),
              response.headers.get("access-control-expose-headers")?.includes("x-request-id"),
            ],
          ];
        }),
      ),
    );
    expect(seen).toEqual({
      whole: [200, allowed, true],
      streamed: [200, allowed, true],
      badKey: [401, allowed, true],
      badKeyModels: [401, allowed, true],
      unknownModel: [404, allowed, true],
      models: [200, allowed, true],
      embeddings: [200, allowed, true],
      // A trailing slash: the same handler, served by Elysia rather than Bun's router.
      viaElysia: [200, allowed, true],
    });
  });

  test("answers to another origin, and the console's to any, carry none of it", async () => {
    const headers = { origin: "http://elsewhere.test", "content-type": "application/json", authorization: `Bearer ${sluice.key}` };
    const whole = await fetch(`${sluice.url}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify(chat) });
    await whole.arrayBuffer();
    expect([whole.status, whole.headers.get("access-control-allow-origin")]).toEqual([200, null]);
    // Still keyed on the origin, so that a cache never hands one origin's answer to another.
    expect(whole.headers.get("vary")).toBe("Origin");
    const signIn = await fetch(`${sluice.url}/console/api/signin`, {
      method: "OPTIONS",
      headers: { origin: allowed, "access-control-request-method": "POST" },
    });
    expect(signIn.headers.get("access-control-allow-origin")).toBeNull();
    const me = await fetch(`${sluice.url}/console/api/me`, { headers: { origin: allowed } });
    expect(me.headers.get("access-control-allow-origin")).toBeNull();
  });
});

test("without SLUICE_CORS_ORIGINS nothing changes: no preflight answered, no header added", async () => {
  const sluice = await startSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")] });
  try {
    const preflight = await fetch(`${sluice.url}/v1/chat/completions`, {
      method: "OPTIONS",
      headers: { origin: allowed, "access-control-request-method": "POST" },
    });
    expect(preflight.headers.get("access-control-allow-origin")).toBeNull();
    const whole = await fetch(`${sluice.url}/v1/chat/completions`, {
      method: "POST",
      headers: { origin: allowed, "content-type": "application/json", authorization: `Bearer ${sluice.key}` },
      body: JSON.stringify(chat),
    });
    await whole.arrayBuffer();
    expect([whole.status, whole.headers.get("access-control-allow-origin")]).toEqual([200, null]);
  } finally {
    await sluice.stop();
  }
});

describe("a real browser's page", () => {
  let sluice: TestSluice;
  let browser: Browser;
  let page: ReturnType<typeof Bun.serve>;

  beforeAll(async () => {
    // The page's own origin: a server of its own, on another port than Sluice's.
    page = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: () => new Response("<!doctype html><title>app</title>", { headers: { "content-type": "text/html" } }),
    });
    sluice = await startSluice(
      { models: [fakeModel(upstream.url, "m", "usage-10-5")] },
      { corsOrigins: { any: false, origins: [`http://127.0.0.1:${page.port}`] } },
    );
    browser = await chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  });
  afterAll(async () => {
    await browser?.close();
    await sluice?.stop();
    page?.stop(true);
  });

  /** What a page of this origin gets from calling Sluice with fetch, as a web app would. */
  async function callFrom(origin: string, body: unknown, key = sluice.key) {
    const tab = await browser.newPage();
    try {
      await tab.goto(`${origin}/`);
      return await tab.evaluate(
        async ({ url, key, body }) => {
          try {
            const response = await fetch(`${url}/v1/chat/completions`, {
              method: "POST",
              headers: { "content-type": "application/json", authorization: `Bearer ${key}`, "x-stainless-lang": "js" },
              body: JSON.stringify(body),
            });
            return { status: response.status, requestId: response.headers.get("x-request-id"), text: await response.text() };
          } catch (error) {
            return { failed: String(error) };
          }
        },
        { url: sluice.url, key, body },
      );
    } finally {
      await tab.close();
    }
  }

  test("of the allowed origin calls the API and reads the answer, a stream and a refusal; of another origin, the browser refuses", async () => {
    const origin = `http://127.0.0.1:${page.port}`;
    const whole = await callFrom(origin, chat);
    expect(whole).toMatchObject({ status: 200, requestId: expect.stringMatching(/^req_/) });
    expect(JSON.parse((whole as { text: string }).text).choices).toHaveLength(1);
    const streamed = await callFrom(origin, { ...chat, stream: true });
    expect((streamed as { text: string }).text).toContain("data: [DONE]");
    const refused = await callFrom(origin, chat, "sk-sluice-wrong");
    expect(refused).toMatchObject({ status: 401 });
    expect(JSON.parse((refused as { text: string }).text).error.code).toBe("invalid_api_key");
    // The same page served as localhost is another origin.
    expect(await callFrom(`http://localhost:${page.port}`, chat)).toEqual({ failed: "TypeError: Failed to fetch" });
  }, 30_000);
});
