import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { openDatabase } from "../../../src/db/client";
import { AuditLog } from "../../../src/modules/audit/service";
import { KeyService } from "../../../src/modules/keys/service";
import { sqliteStorage } from "../../../src/storage/sqlite";
import { OrganizationService } from "../../../src/modules/organizations/service";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { eventually, fakeModel, startSluice, testActor, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice({
    models: [fakeModel(upstream.url, "echo")],
    plans: [
      { id: "default", models: ["*"] },
      { id: "other", models: [] },
    ],
  });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

const chat = { model: "echo", messages: [{ role: "user", content: "hi" }] };

/** A second connection to the same file, as the CLI in another process would open. */
function otherProcess() {
  const path = sluice.database.sqlite.filename;
  const database = openDatabase(path);
  const storage = sqliteStorage(database);
  return {
    keys: new KeyService(storage.keys, new AuditLog(storage.audit)),
    organizations: new OrganizationService(storage.organizations, new Set(["default", "other"]), new AuditLog(storage.audit)),
    close: () => database.close(),
  };
}

async function errorOf(response: Response) {
  return { status: response.status, code: ((await response.json()) as { error: { code: string } }).error.code };
}

describe("keys (spec section 5)", () => {
  test("no key: 401 missing_api_key; the SDK raises AuthenticationError", async () => {
    expect(await errorOf(await sluice.post("/v1/chat/completions", chat, { authorization: "" }))).toEqual({ status: 401, code: "missing_api_key" });
    const response = await fetch(`${sluice.url}/v1/models`);
    expect(await errorOf(response)).toEqual({ status: 401, code: "missing_api_key" });
  });

  test("a key in the access_token query parameter is not accepted (Authorization: Bearer only)", async () => {
    const response = await fetch(`${sluice.url}/v1/models?access_token=${sluice.key}`);
    expect(await errorOf(response)).toEqual({ status: 401, code: "missing_api_key" });
  });

  test("a wrong key: 401 invalid_api_key", async () => {
    for (const wrong of ["sk-sluice-wrong", "sk-other", sluice.key.slice(0, -1) + (sluice.key.endsWith("A") ? "B" : "A")]) {
      expect(await errorOf(await sluice.post("/v1/chat/completions", chat, { authorization: `Bearer ${wrong}` }))).toEqual({
        status: 401,
        code: "invalid_api_key",
      });
    }
    const error = await sluice
      .client({ apiKey: "sk-sluice-nope" })
      .models.list()
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
  });

  test("keys are stored only as SHA-256 hashes", () => {
    const dump = JSON.stringify(sluice.database.sqlite.query("SELECT * FROM api_keys").all());
    expect(dump).not.toContain(sluice.key);
    expect(dump).toContain(new Bun.CryptoHasher("sha256").update(sluice.key).digest("hex"));
    expect(sluice.key).toMatch(/^sk-sluice-[A-Za-z0-9_-]{43}$/);
  });

  test("a revocation made by another process applies to the very next request", async () => {
    const { key, keyId } = await sluice.addOrganization("revoke-org");
    const headers = { authorization: `Bearer ${key}` };
    expect((await sluice.post("/v1/chat/completions", chat, headers)).status).toBe(200);
    const other = otherProcess();
    await other.keys.revoke(keyId, testActor);
    other.close();
    expect(await errorOf(await sluice.post("/v1/chat/completions", chat, headers))).toEqual({ status: 401, code: "invalid_api_key" });
  });

  test("under load, every request sent after another process's revocation is refused (the feed is read once a turn)", async () => {
    const { key, keyId } = await sluice.addOrganization("revoke-under-load");
    const headers = { authorization: `Bearer ${key}` };
    let revokedAt = Number.POSITIVE_INFINITY;
    const late: number[] = [];
    let stop = false;
    // 64 clients in closed loops keep the server's turns full; each notes the status of what it sent after the revocation.
    const clients = Array.from({ length: 64 }, async () => {
      while (!stop) {
        const sentAt = performance.now();
        const response = await sluice.post("/v1/chat/completions", chat, headers);
        await response.arrayBuffer();
        if (sentAt > revokedAt) late.push(response.status);
      }
    });
    await Bun.sleep(300);
    const other = otherProcess();
    await other.keys.revoke(keyId, testActor);
    other.close();
    revokedAt = performance.now();
    await Bun.sleep(300);
    stop = true;
    await Promise.all(clients);
    expect(late.length).toBeGreaterThan(64);
    expect(late.filter((status) => status !== 401)).toEqual([]);
  });

  test("an expired key: 401 invalid_api_key", async () => {
    const organization = (await sluice.organizations.findByName("acme"))!;
    const { secret } = await sluice.keys.create({ organizationId: organization.id, expiresInMs: 1000, now: Date.now() - 2000 }, testActor);
    expect(await errorOf(await sluice.post("/v1/chat/completions", chat, { authorization: `Bearer ${secret}` }))).toEqual({
      status: 401,
      code: "invalid_api_key",
    });
  });

  test("an organization on the waitlist or suspended: 403 organization_inactive, from the next request", async () => {
    const waiting = await sluice.addOrganization("waiting-org", { status: "waitlist" });
    expect(await errorOf(await sluice.post("/v1/chat/completions", chat, { authorization: `Bearer ${waiting.key}` }))).toEqual({
      status: 403,
      code: "organization_inactive",
    });
    const active = await sluice.addOrganization("soon-suspended");
    const headers = { authorization: `Bearer ${active.key}` };
    expect((await sluice.post("/v1/chat/completions", chat, headers)).status).toBe(200);
    const other = otherProcess();
    await other.organizations.update("soon-suspended", { status: "suspended" }, testActor);
    expect(await errorOf(await sluice.post("/v1/chat/completions", chat, headers))).toEqual({ status: 403, code: "organization_inactive" });
    await other.organizations.update("soon-suspended", { status: "active" }, testActor);
    other.close();
    expect((await sluice.post("/v1/chat/completions", chat, headers)).status).toBe(200);
    const error = await sluice
      .client({ apiKey: waiting.key })
      .models.list()
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.PermissionDeniedError);
  });

  test("a plan change by another process applies to the next request", async () => {
    const { key } = await sluice.addOrganization("plan-change");
    const headers = { authorization: `Bearer ${key}` };
    expect((await sluice.post("/v1/chat/completions", chat, headers)).status).toBe(200);
    const other = otherProcess();
    await other.organizations.update("plan-change", { plan: "other" }, testActor);
    other.close();
    expect(await errorOf(await sluice.post("/v1/chat/completions", chat, headers))).toEqual({ status: 404, code: "model_not_found" });
  });

  test("last_used_at is recorded in batches, not per request", async () => {
    const { key, keyId } = await sluice.addOrganization("last-used");
    expect((await sluice.keys.find(keyId))!.lastUsedAt).toBeNull();
    const before = Date.now();
    for (let index = 0; index < 5; index++) await sluice.post("/v1/chat/completions", chat, { authorization: `Bearer ${key}` });
    await eventually(
      () => sluice.database.sqlite.query<{ last: number | null }, [string]>("SELECT last_used_at AS last FROM api_keys WHERE id = ?").get(keyId)?.last != null,
      3000,
    );
    expect((await sluice.keys.find(keyId))!.lastUsedAt!).toBeGreaterThanOrEqual(before);
  });
});
