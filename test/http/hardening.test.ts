// What a security review checks at the HTTP level: the console's headers on every console response, and an error
// body an SDK can read for any body over the limit (Bun's own limit would answer first with an empty 413).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream } from "../fake-upstream";
import { fakeModel, startSluice, type TestSluice } from "../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  upstream = startFakeUpstream();
  // The default body limit (10 MB): the case Bun's own limit used to answer.
  sluice = await startSluice({ models: [fakeModel(upstream.url, "ok", "usage-10-5")], plans: [{ id: "default", models: ["*"] }] });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

function expectSecurityHeaders(response: Response): void {
  const policy = response.headers.get("content-security-policy") ?? "";
  expect(policy).toContain("script-src 'self'");
  expect(policy).toContain("style-src 'self'");
  expect(policy).toContain("frame-ancestors 'none'");
  expect(policy).not.toContain("unsafe-inline");
  expect(response.headers.get("x-content-type-options")).toBe("nosniff");
  expect(response.headers.get("referrer-policy")).toBe("no-referrer");
}

describe("console security headers", () => {
  test("the page, its script and stylesheet, API answers and API errors all carry them", async () => {
    const page = await fetch(`${sluice.url}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toContain("text/html");
    expectSecurityHeaders(page);
    const html = await page.text();
    const files = [...html.matchAll(/(?:src|href)="\.?(\/[^"]+)"/g)].map((match) => match[1] as string);
    expect(files.some((file) => file.endsWith(".js"))).toBe(true);
    expect(files.some((file) => file.endsWith(".css"))).toBe(true);
    // No inline script or style: the policy would block it.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toContain("<style");
    for (const file of files) {
      const asset = await fetch(`${sluice.url}${file}`);
      expect(asset.status).toBe(200);
      expect(asset.headers.get("content-type")).toMatch(file.endsWith(".js") ? /javascript/ : /text\/css/);
      expectSecurityHeaders(asset);
    }
    for (const path of ["/console/api/me", "/console/api/nothing-here", "/no-such-file.js"]) {
      const response = await fetch(`${sluice.url}${path}`);
      expect(response.status).toBeGreaterThanOrEqual(400);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBeString();
      expectSecurityHeaders(response);
    }
    const signUp = await fetch(`${sluice.url}/console/api/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "headers@example.com", password: "a long enough password", organization: "Headers Co" }),
    });
    expect(signUp.status).toBe(201);
    expectSecurityHeaders(signUp);
    // One value each, not the same header twice.
    expect(signUp.headers.get("x-content-type-options")).toBe("nosniff");
  });
});

describe("a body over the limit is a 413 the client can read", () => {
  const twelveMegabytes = "x".repeat(12 * 1024 * 1024);
  const bodies: Record<string, (text: string) => unknown> = {
    "/v1/chat/completions": (text) => ({ model: "ok", messages: [{ role: "user", content: text }] }),
    "/v1/responses": (text) => ({ model: "ok", input: text }),
    "/v1/messages": (text) => ({ model: "ok", max_tokens: 10, messages: [{ role: "user", content: text }] }),
    "/v1/messages/count_tokens": (text) => ({ model: "ok", messages: [{ role: "user", content: text }] }),
    "/console/api/signin": (text) => ({ email: "a@b.co", password: text }),
  };

  for (const [path, body] of Object.entries(bodies)) {
    for (const framing of ["content-length", "chunked"] as const) {
      test(`${path}, 12 MB, ${framing}`, async () => {
        const encoded = new TextEncoder().encode(JSON.stringify(body(twelveMegabytes)));
        const payload =
          framing === "content-length"
            ? encoded
            : new ReadableStream<Uint8Array>({
                start(controller) {
                  for (let offset = 0; offset < encoded.length; offset += 1024 * 1024) controller.enqueue(encoded.subarray(offset, offset + 1024 * 1024));
                  controller.close();
                },
              });
        const response = await fetch(`${sluice.url}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${sluice.key}`, "x-api-key": sluice.key },
          body: payload,
          duplex: "half",
        } as RequestInit);
        expect(response.status).toBe(413);
        const error = ((await response.json()) as { error: { type: string; code?: string; message: string } }).error;
        expect(error.message).toContain(path.startsWith("/console/") ? "65536" : "10485760");
        if (path.startsWith("/v1/messages")) expect(error.type).toBe("request_too_large");
        else expect(error.code).toBe("request_too_large");
      });
    }
  }

  test("the official SDKs see their own 413 error class with the code", async () => {
    const openai = new OpenAI({ baseURL: sluice.baseURL, apiKey: sluice.key, maxRetries: 0 });
    const chat = await openai.chat.completions.create({ model: "ok", messages: [{ role: "user", content: twelveMegabytes }] }).catch((error: unknown) => error);
    expect(chat).toBeInstanceOf(OpenAI.APIError);
    expect((chat as InstanceType<typeof OpenAI.APIError>).status).toBe(413);
    expect((chat as InstanceType<typeof OpenAI.APIError>).code).toBe("request_too_large");
    const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
    const message = await anthropic.messages
      .create({ model: "ok", max_tokens: 10, messages: [{ role: "user", content: twelveMegabytes }] })
      .catch((error: unknown) => error);
    expect(message).toBeInstanceOf(Anthropic.APIError);
    expect((message as InstanceType<typeof Anthropic.APIError>).status).toBe(413);
    expect(JSON.stringify((message as InstanceType<typeof Anthropic.APIError>).error)).toContain("request_too_large");
  });

  test("after all that, the server still answers", async () => {
    const answer = await new OpenAI({ baseURL: sluice.baseURL, apiKey: sluice.key, maxRetries: 0 }).chat.completions.create({
      model: "ok",
      messages: [{ role: "user", content: "hi" }],
    });
    expect(answer.choices[0]?.message.content).toBeString();
  });
});
