import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect } from "node:net";
import fc from "fast-check";
import { startFakeUpstream, type FakeUpstream } from "../fake-upstream";
import { anyFieldValue, expectStillServes, fakeModel, startSluice, type TestSluice } from "../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice(
    { models: [fakeModel(upstream.url, "m", "usage-10-5")], plans: [{ id: "default", models: ["*"], tokens_per_5h: 1_000_000_000 }] },
    { maxBodyBytes: 256 * 1024, idleTimeoutSeconds: 2 },
  );
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

const good = { model: "m", messages: [{ role: "user", content: "hi" }] };

async function statusOf(body: string, headers: Record<string, string> = {}): Promise<number> {
  const response = await sluice.post("/v1/chat/completions", body, headers);
  const text = await response.text();
  if (response.status >= 500) throw new Error(`5xx for ${body.slice(0, 200)}: ${text}`);
  return response.status;
}

describe("property-based: bad input never gets a 5xx and never stops the server", () => {
  test("random JSON values as the body", async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 6 }), async (value) => {
        expect(await statusOf(JSON.stringify(value))).toBeLessThan(500);
      }),
      { numRuns: 300 },
    );
    await expectStillServes(sluice);
  });

  test("valid requests with wrong types in every field", async () => {
    const fields = [
      "model",
      "messages",
      "stream",
      "stream_options",
      "max_tokens",
      "max_completion_tokens",
      "n",
      "temperature",
      "top_p",
      "stop",
      "tools",
      "response_format",
      "seed",
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...fields),
        anyFieldValue,
        fc.constantFrom("0", "role", "content"),
        anyFieldValue,
        async (field, value, messageField, messageValue) => {
          const body: Record<string, unknown> = { ...good, messages: [{ role: "user", content: "hi", [messageField]: messageValue }], [field]: value };
          expect(await statusOf(JSON.stringify(body))).toBeLessThan(500);
        },
      ),
      { numRuns: 400 },
    );
    await expectStillServes(sluice);
  }, 60_000);

  test("mutated bytes of a valid body, invalid UTF-8 included", async () => {
    const valid = new TextEncoder().encode(JSON.stringify(good));
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 8 }), async (mutations) => {
        const bytes = valid.slice();
        for (const [index, byte] of mutations) bytes[index] = byte;
        const response = await fetch(`${sluice.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${sluice.key}`, "content-type": "application/json" },
          body: bytes,
        });
        await response.arrayBuffer();
        expect(response.status).toBeLessThan(500);
      }),
      { numRuns: 200 },
    );
    await expectStillServes(sluice);
  });
});

describe("property-based: any method on any path never gets a 5xx", () => {
  test("the routes' own prefixes, with any segment after them, percent signs that decode to nothing included", async () => {
    const prefixes = [
      "/v1/models/",
      "/v1/chat/completions/",
      "/v1/responses/",
      "/v1/messages/",
      "/v1/",
      "/",
      "/console/api/",
      "/console/api/keys/",
      "/metrics/",
      "/readyz/",
    ];
    const segment = fc.oneof(
      fc.string({ maxLength: 30 }).map(encodeURIComponent),
      fc.constantFrom("%", "%ZZ", "%E0%A4%A", "%00", "..", "%2e%2e/%2e%2e", "%2F", "m%", "a/b/c", "?%", "#x", "x".repeat(4000)),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...prefixes),
        segment,
        fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"),
        async (prefix, tail, method) => {
          const response = await fetch(`${sluice.url}${prefix}${tail}`, {
            method,
            headers: { authorization: `Bearer ${sluice.key}`, "content-type": "application/json" },
            body: method === "GET" || method === "HEAD" ? undefined : JSON.stringify(good),
          });
          const text = await response.text();
          if (response.status >= 500) throw new Error(`${response.status} for ${method} ${prefix}${tail.slice(0, 100)}: ${text.slice(0, 300)}`);
        },
      ),
      { numRuns: 400 },
    );
    await expectStillServes(sluice);
  }, 60_000);
});

describe("property-based: any value in the headers Sluice reads never gets a 5xx", () => {
  test("authorization, x-api-key, content-type, anthropic-version, accept, cookie, x-forwarded-proto", async () => {
    const printable = fc.stringMatching(/^[\x20-\x7e]{0,120}$/);
    const value = fc.oneof(
      printable,
      fc.constantFrom("Bearer", "Bearer ", "bearer KEY", "Bearer  KEY", "Basic a2V5", "Bearer KEY KEY", "application/json; charset=x", "text/plain", ""),
    );
    const names = ["authorization", "x-api-key", "content-type", "anthropic-version", "accept", "cookie", "x-forwarded-proto"];
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.constantFrom(...names), value, { minKeys: 1, maxKeys: 4 }),
        fc.constantFrom("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/models"),
        async (headers, path) => {
          for (const [name, text] of Object.entries(headers)) headers[name] = text.replaceAll("KEY", sluice.key);
          const response = await fetch(`${sluice.url}${path}`, {
            method: path === "/v1/models" ? "GET" : "POST",
            headers,
            body: path === "/v1/models" ? undefined : JSON.stringify({ ...good, max_tokens: 5, input: "hi" }),
          });
          const text = await response.text();
          if (response.status >= 500) throw new Error(`${response.status} for ${path} ${JSON.stringify(headers)}: ${text.slice(0, 300)}`);
        },
      ),
      { numRuns: 400 },
    );
    await expectStillServes(sluice);
  }, 60_000);
});

describe("hostile shapes", () => {
  test("huge numbers, deep nesting, a body over the limit", async () => {
    expect(await statusOf(JSON.stringify({ ...good, max_tokens: 1e308 }))).toBe(400);
    expect(await statusOf(JSON.stringify({ ...good, temperature: -1e308 }))).toBe(400);
    expect(await statusOf(`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":${"[".repeat(50_000)}${"]".repeat(50_000)}}`)).toBe(400);
    expect(await statusOf(`${"[".repeat(200_000)}`)).toBe(400);
    const deep = `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":${'{"a":'.repeat(5000)}1${"}".repeat(5000)}}`;
    expect(await statusOf(deep)).toBe(400);
    expect(await statusOf(JSON.stringify({ ...good, messages: [{ role: "user", content: "x".repeat(300 * 1024) }] }))).toBe(413);
    await expectStillServes(sluice);
  });

  test("a flood of headers, and one enormous header", async () => {
    const many: Record<string, string> = {};
    for (let index = 0; index < 90; index++) many[`x-flood-${index}`] = "y".repeat(50);
    expect(await statusOf(JSON.stringify(good), many)).toBe(200);
    // Bun refuses headers this large before any handler runs: 431, never a 5xx, and the server goes on.
    const huge = await fetch(`${sluice.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${sluice.key}`, "content-type": "application/json", "x-huge": "z".repeat(200_000) },
      body: JSON.stringify(good),
    });
    expect(huge.status).toBe(431);
    await expectStillServes(sluice);
  });

  test("a client that trickles its body is cut off by the idle timeout; others are served meanwhile", async () => {
    const port = Number(new URL(sluice.url).port);
    const closed = new Promise<number>((resolve) => {
      const started = Date.now();
      const socket = connect(port, "127.0.0.1", () => {
        socket.write(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${sluice.key}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":`,
        );
      });
      socket.on("close", () => resolve(Date.now() - started));
      socket.on("error", () => {});
    });
    await expectStillServes(sluice);
    const after = await closed;
    expect(after).toBeGreaterThanOrEqual(1500);
    expect(after).toBeLessThan(10_000);
  }, 15_000);

  test("two thousand idle connections do not stop good requests", async () => {
    const port = Number(new URL(sluice.url).port);
    const sockets = await Promise.all(
      Array.from(
        { length: 2000 },
        () =>
          new Promise<ReturnType<typeof connect>>((resolve) => {
            const socket = connect(port, "127.0.0.1", () => resolve(socket));
            socket.on("error", () => resolve(socket));
          }),
      ),
    );
    for (let index = 0; index < 5; index++) await expectStillServes(sluice);
    for (const socket of sockets) socket.destroy();
  }, 30_000);
});
