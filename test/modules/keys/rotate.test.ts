// Rotating a key: a new key with the same label, caps and models replaces the old one, which works for a grace
// period and then stops; through the console API (members and operators), the CLI, and the SDK as the client.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { ConsoleClient, consolePassword as password, startConsoleSluice } from "../console/console-client";
import { sluiceCommand, sluiceEnvironment } from "../../support/sluice-process";
import { testActor, type TestSluice } from "../../helpers";

let server: Awaited<ReturnType<typeof startConsoleSluice>>;
let sluice: TestSluice;
let member: ConsoleClient;

beforeAll(async () => {
  server = await startConsoleSluice([{ id: "default", models: ["*"] }]);
  sluice = server.sluice;
  member = new ConsoleClient(sluice.url);
  expect((await member.json("POST", "/signup", { email: "rot@example.com", password, organization: "Rotating Co" })).status).toBe(201);
  await sluice.organizations.update("Rotating Co", { status: "active" }, testActor);
  await member.signIn("rot@example.com", password);
});
afterAll(() => server.stop());

type KeyBody = {
  id: string;
  name: string;
  prefix: string;
  createdAt: number;
  expiresAt: number | null;
  revokedAt: number | null;
  maxConcurrency: number | null;
  tokensPer5h: number | null;
  models: string[] | null;
};
type Rotated = { key: KeyBody; secret: string; previous: KeyBody };

/** Whether a key is accepted now: an SDK call with it succeeds (true) or fails with 401 (false). */
async function works(secret: string): Promise<boolean> {
  const client = new OpenAI({ baseURL: sluice.baseURL, apiKey: secret, maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).catch((error: unknown) => error);
  if (answer instanceof OpenAI.AuthenticationError) return false;
  if (answer instanceof Error) throw answer;
  return true;
}

async function createKey(body: Record<string, unknown>): Promise<{ key: KeyBody; secret: string }> {
  const created = await member.json<{ key: KeyBody; secret: string }>("POST", "/keys", body);
  expect(created.status).toBe(201);
  return created.body;
}

describe("the console API", () => {
  test("the new key has the old one's label, caps, models and lifetime; both work during the grace; the audit trail links them", async () => {
    const old = await createKey({ name: "deploy", expires_in: "30d", max_concurrency: 3, tokens_per_5h: 50_000, models: ["m"] });
    const before = Date.now();
    const rotated = await member.json<Rotated>("POST", `/keys/${old.key.id}/rotate`, { grace: "1h" });
    expect(rotated.status).toBe(201);
    const { key, secret, previous } = rotated.body;
    expect(secret).toStartWith("sk-sluice-");
    expect(key.id).not.toBe(old.key.id);
    expect(key).toMatchObject({ name: "deploy", maxConcurrency: 3, tokensPer5h: 50_000, models: ["m"], revokedAt: null });
    expect((key.expiresAt as number) - key.createdAt).toBe(30 * 86_400_000);
    expect(previous.id).toBe(old.key.id);
    expect(previous.expiresAt as number).toBeGreaterThanOrEqual(before + 3_600_000);
    expect(previous.expiresAt as number).toBeLessThanOrEqual(Date.now() + 3_600_000);
    expect([await works(old.secret), await works(secret)]).toEqual([true, true]);
    const listed = (await member.json<KeyBody[]>("GET", "/keys")).body.filter((entry) => entry.name === "deploy");
    expect(listed.map((entry) => entry.id).sort()).toEqual([key.id, old.key.id].sort());

    const trail = await sluice.audit.list({ action: "key.updated", limit: 5 });
    expect(trail.find((entry) => entry.target === old.key.id)?.changes).toMatchObject({ rotatedTo: [null, key.id] });
    const made = await sluice.audit.list({ action: "key.created", limit: 5 });
    expect(made.find((entry) => entry.target === key.id)?.changes).toMatchObject({ rotatedFrom: [null, old.key.id] });
  });

  test("the grace ends: the old key fails from then on (and cannot be rotated again), the new one goes on; `now` revokes at once", async () => {
    const old = await createKey({ name: "short" });
    const rotated = (await member.json<Rotated>("POST", `/keys/${old.key.id}/rotate`, { grace: "1s" })).body;
    expect(rotated.key.expiresAt).toBeNull();
    expect(await works(old.secret)).toBe(true);
    await Bun.sleep(1100);
    expect([await works(old.secret), await works(rotated.secret)]).toEqual([false, true]);
    const expired = await member.json<{ error: { message: string } }>("POST", `/keys/${old.key.id}/rotate`, {});
    expect(expired.status).toBe(400);
    expect(expired.body.error.message).toContain("is expired: create a new key instead");

    const again = (await member.json<Rotated>("POST", `/keys/${rotated.key.id}/rotate`, { grace: "now" })).body;
    expect(again.previous.revokedAt).not.toBeNull();
    expect([await works(rotated.secret), await works(again.secret)]).toEqual([false, true]);
  });

  test("a key that expires before the grace ends keeps its own expiry; the default grace is 24 hours", async () => {
    const soon = await createKey({ name: "soon", expires_in: "1h" });
    const rotated = (await member.json<Rotated>("POST", `/keys/${soon.key.id}/rotate`, {})).body;
    expect(rotated.previous.expiresAt).toBe(soon.key.expiresAt);
    const later = await createKey({ name: "later" });
    const defaulted = (await member.json<Rotated>("POST", `/keys/${later.key.id}/rotate`, {})).body;
    expect((defaulted.previous.expiresAt as number) - Date.now()).toBeGreaterThan(23.9 * 3_600_000);
  });

  test("refused: a revoked key (400), a bad grace (400 naming grace), another organization's key (404); an operator may rotate any", async () => {
    const revoked = await createKey({ name: "gone" });
    await member.json("POST", `/keys/${revoked.key.id}/revoke`, {});
    const refused = await member.json<{ error: { code: string; message: string } }>("POST", `/keys/${revoked.key.id}/rotate`, {});
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toContain("is revoked: create a new key instead");
    const live = await createKey({ name: "live" });
    for (const grace of ["soon", "0s", "-1h", ""]) {
      const response = await member.json<{ error: { param: string } }>("POST", `/keys/${live.key.id}/rotate`, { grace });
      expect({ grace, status: response.status, param: response.body.error.param }).toEqual({ grace, status: 400, param: "grace" });
    }
    const acme = (await sluice.keys.listForOrganization((await sluice.organizations.findByName("acme"))?.id as string))[0]?.id as string;
    expect((await member.json("POST", `/keys/${acme}/rotate`, {})).status).toBe(404);
    const operator = new ConsoleClient(sluice.url);
    await operator.signIn("op@example.com", password);
    const byOperator = await operator.json<Rotated>("POST", `/keys/${acme}/rotate`, { grace: "now" });
    expect(byOperator.status).toBe(201);
    expect(await works(sluice.key)).toBe(false);
    expect(await works(byOperator.body.secret)).toBe(true);
  });
});

test("sluice key rotate: the new key alone on stdout's last line; the old one's end on stderr; mistakes exit 2", () => {
  const environment = sluiceEnvironment(sluice.database.sqlite.filename, "");
  delete environment.SLUICE_CONFIG;
  const [key] = sluice.database.sqlite.query<{ id: string }, []>("SELECT id FROM api_keys WHERE revoked_at IS NULL AND name = 'live'").all();
  const rotated = sluiceCommand(environment, "key", "rotate", key?.id as string, "--grace", "2h");
  expect(rotated.code).toBe(0);
  expect(rotated.stdout.trim().split("\n").at(-1)).toMatch(/^sk-sluice-[A-Za-z0-9_-]{43}$/);
  expect(rotated.stderr).toContain("keeps working until");
  const badGrace = sluiceCommand(environment, "key", "rotate", key?.id as string, "--grace", "soon");
  expect([badGrace.code, badGrace.stderr.split("\n")[0]]).toEqual([2, 'sluice: --grace must be now, or look like 90s, 30m, 12h or 30d, got "soon"']);
  const unknown = sluiceCommand(environment, "key", "rotate", "key_nothing");
  expect([unknown.code, unknown.stderr.trim()]).toEqual([2, 'sluice: no key with id "key_nothing"']);
});
