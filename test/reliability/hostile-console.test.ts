// The console's API under hostile input, as test/reliability/hostile-input.test.ts does for the answer routes: whatever
// a signed-in member or operator (or a stranger) sends, the answer is a 2xx or a 4xx in the OpenAI error format, never
// a 5xx, and the server goes on serving with every key and organization as it was.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { anyFieldValue, expectStillServes, type TestSluice } from "../helpers";
import { ConsoleClient, consolePassword as password, startConsoleSluice } from "../modules/console/console-client";

let server: Awaited<ReturnType<typeof startConsoleSluice>>;
let sluice: TestSluice;
let operator: ConsoleClient;
let member: ConsoleClient;
let organizationId: string;
let keyId: string;
let keySecret: string;

beforeAll(async () => {
  server = await startConsoleSluice();
  sluice = server.sluice;
  operator = new ConsoleClient(sluice.url);
  await operator.signIn("op@example.com", password);
  member = new ConsoleClient(sluice.url);
  expect((await member.json("POST", "/signup", { email: "member@example.com", password, organization: "Hostile Co" })).status).toBe(201);
  await member.signIn("member@example.com", password);
  const organizations = (await operator.json<{ id: string; name: string }[]>("GET", "/operator/organizations")).body;
  organizationId = organizations.find((organization) => organization.name === "Hostile Co")?.id as string;
  expect((await operator.json("POST", `/operator/organizations/${organizationId}`, { status: "active" })).status).toBe(200);
  const created = await member.json<{ key: { id: string }; secret: string }>("POST", "/keys", { name: "kept" });
  expect(created.status).toBe(201);
  keyId = created.body.key.id;
  keySecret = created.body.secret;
});
afterAll(() => server.stop());

/** Fails on a 5xx, and on an error answer that is not an OpenAI error body; returns the status. */
async function expectClientError(response: Response, what: string): Promise<number> {
  const text = await response.text();
  if (response.status >= 500) throw new Error(`${response.status} for ${what}: ${text}`);
  if (response.status >= 400) {
    const body = JSON.parse(text) as { error?: { message?: unknown; type?: unknown; code?: unknown } };
    expect(typeof body.error?.message).toBe("string");
    expect(typeof body.error?.type).toBe("string");
    expect(typeof body.error?.code).toBe("string");
  }
  return response.status;
}

/** A path segment a client might put where an id goes: random text, percent signs that decode to nothing, dots. */
const pathSegment = fc.oneof(
  fc.string({ minLength: 1, maxLength: 40 }).map(encodeURIComponent),
  fc.constantFrom("%", "%ZZ", "%E0%A4%A", "%00", "..", "%2e%2e", "%2F", "key_%FF", "x".repeat(5000)),
);

/** The bodies a change route might receive: any JSON value, or an object of known field names with any values. */
const fieldNames = ["email", "password", "organization", "name", "expires_in", "max_concurrency", "tokens_per_5h", "tokens_per_month", "status", "plan"];
const anyBody = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }).map((value) => JSON.stringify(value)),
  fc.dictionary(fc.constantFrom(...fieldNames), anyFieldValue, { maxKeys: 5 }).map((value) => JSON.stringify(value)),
  fc.string({ maxLength: 200 }),
);

describe("property-based: the console API never answers bad input with a 5xx", () => {
  test("any body to every route that changes something, as a member and as the operator", async () => {
    const routes = ["/signup", "/signin", "/keys", `/keys/${"{key}"}/limits`, `/operator/organizations/${"{organization}"}`];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...routes), fc.boolean(), anyBody, async (route, asOperator, body) => {
        const client = asOperator ? operator : member;
        const path = route.replace("{key}", keyId).replace("{organization}", organizationId);
        await expectClientError(await client.request("POST", path, body), `POST ${path} ${body.slice(0, 200)}`);
      }),
      { numRuns: 400 },
    );
  }, 60_000);

  test("any id in a route's path", async () => {
    const routes = ["/keys/{id}/revoke", "/keys/{id}/limits", "/operator/organizations/{id}"];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...routes), pathSegment, fc.boolean(), async (route, id, asOperator) => {
        const client = asOperator ? operator : member;
        const path = route.replace("{id}", id);
        const status = await expectClientError(await client.request("POST", path, { max_concurrency: 1, status: "active" }), `POST ${path}`);
        // No id but a real one names anything.
        expect(status).toBeGreaterThanOrEqual(400);
      }),
      { numRuns: 200 },
    );
  });

  test("any query string on the request log, its CSV and the audit trail", async () => {
    const parameters = ["since", "until", "key", "model", "outcome", "id", "organization", "cursor", "limit", "action", "actor", "other"];
    const value = fc.oneof(
      fc.string({ maxLength: 30 }),
      fc.constantFrom("24h", "7d", "0", "-1", "1e400", "9".repeat(40), "2026-13-45T99:99:99Z", "NaN", "Infinity", "0x10", "500", "501", ""),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("/requests", "/requests.csv", "/operator/audit"),
        fc.array(fc.tuple(fc.constantFrom(...parameters), value), { maxLength: 4 }),
        fc.boolean(),
        async (route, pairs, asOperator) => {
          const client = asOperator ? operator : member;
          const query = new URLSearchParams(pairs).toString();
          await expectClientError(await client.request("GET", `${route}?${query}`), `GET ${route}?${query}`);
        },
      ),
      { numRuns: 300 },
    );
  }, 60_000);

  test("percent signs that decode to nothing in the query string", async () => {
    for (const query of ["since=%", "cursor=%ZZ", "key=%E0%A4%A", "id=%00", "limit=%31%30", "model=%FF%FE"]) {
      for (const route of ["/requests", "/requests.csv", "/operator/audit"]) {
        await expectClientError(await operator.request("GET", `${route}?${query}`), `GET ${route}?${query}`);
      }
    }
  });

  test("any session cookie and any CSRF token: 401 or 403, never more", async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ maxLength: 100 }), fc.option(fc.string({ maxLength: 60 })), async (cookie, csrf) => {
        const headers: Record<string, string> = { cookie: `sluice_session=${encodeURIComponent(cookie)}`, "content-type": "application/json" };
        if (csrf !== null) headers["x-csrf-token"] = encodeURIComponent(csrf);
        for (const [method, path] of [
          ["GET", "/me"],
          ["POST", "/keys"],
        ] as const) {
          const response = await fetch(`${sluice.url}/console/api${path}`, { method, headers, body: method === "POST" ? '{"name":"x"}' : undefined });
          expect(await expectClientError(response, `${method} ${path} with cookie ${cookie}`)).toBe(401);
        }
        // A real session with a wrong token.
        const response = await member.request("POST", "/keys", { name: "x" }, { csrf: csrf === member.csrf ? null : csrf });
        expect(await expectClientError(response, `POST /keys with token ${csrf}`)).toBe(403);
      }),
      { numRuns: 150 },
    );
  });

  test("afterwards: the member's key is not revoked and still answers, the organization is still active", async () => {
    const keys = (await member.json<{ id: string; revokedAt: number | null }[]>("GET", "/keys")).body;
    expect(keys.find((key) => key.id === keyId)).toMatchObject({ revokedAt: null });
    const organizations = (await operator.json<{ id: string; status: string }[]>("GET", "/operator/organizations")).body;
    expect(organizations.find((organization) => organization.id === organizationId)).toMatchObject({ status: "active" });
    // Random bodies may have given the key valid caps (a whole number is one): take them off, then use the key.
    const cleared = { max_concurrency: null, tokens_per_5h: null, tokens_per_month: null };
    expect((await member.json("POST", `/keys/${keyId}/limits`, cleared)).status).toBe(200);
    const response = await sluice.post(
      "/v1/chat/completions",
      { model: "m", messages: [{ role: "user", content: "hi" }] },
      { authorization: `Bearer ${keySecret}` },
    );
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    await expectStillServes(sluice);
  });
});
