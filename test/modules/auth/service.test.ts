import { expect, test } from "bun:test";
import { openDatabase } from "../../../src/db/client";
import { AuditLog } from "../../../src/modules/audit/service";
import { AuthService } from "../../../src/modules/auth/service";
import { KeyService } from "../../../src/modules/keys/service";
import { OrganizationService } from "../../../src/modules/organizations/service";
import { resolveConfig } from "../../../src/config/load";
import { sqliteStorage } from "../../../src/storage/sqlite";
import type { ChangeFeed } from "../../../src/storage/types";
import { testActor } from "../../helpers";

test("the requests of one turn of the event loop share one read of the change feed; the next turn reads again", async () => {
  const database = openDatabase(":memory:");
  const storage = sqliteStorage(database);
  const organization = await new OrganizationService(storage.organizations, new Set(["default"]), new AuditLog(storage.audit)).create(
    { name: "acme" },
    testActor,
  );
  const { secret } = await new KeyService(storage.keys, new AuditLog(storage.audit)).create({ organizationId: organization.id, name: "k" }, testActor);
  let reads = 0;
  const counted: ChangeFeed = {
    ...storage.changes,
    check() {
      reads++;
      return storage.changes.check();
    },
  };
  const plans = new Map(resolveConfig({}).plans.map((plan) => [plan.id, plan]));
  const auth = new AuthService(storage.keys, counted, plans, () => {});
  await auth.authenticate(secret);
  // The writes above moved the feed: the turn that saw it goes the slow way; the next one starts clean.
  await new Promise((resolve) => setImmediate(resolve));
  const readsBefore = reads;
  for (let index = 0; index < 10; index++) expect((auth.authenticate(secret) as { organizationId: string }).organizationId).toBe(organization.id);
  expect(reads - readsBefore).toBe(1);
  await new Promise((resolve) => setImmediate(resolve));
  auth.authenticate(secret);
  expect(reads - readsBefore).toBe(2);
  auth.close();
  database.close();
});

test("a cached key is refused from the moment it expires; an inactive organization's key stays refused while cached", async () => {
  const database = openDatabase(":memory:");
  const storage = sqliteStorage(database);
  const audit = new AuditLog(storage.audit);
  const organizations = new OrganizationService(storage.organizations, new Set(["default"]), audit);
  const organization = await organizations.create({ name: "acme" }, testActor);
  const now = Date.now();
  const keys = new KeyService(storage.keys, audit);
  const { secret } = await keys.create({ organizationId: organization.id, name: "k", expiresInMs: 60_000, now }, testActor);
  const plans = new Map(resolveConfig({}).plans.map((plan) => [plan.id, plan]));
  const touched: string[] = [];
  const auth = new AuthService(storage.keys, storage.changes, plans, (entries) => touched.push(...entries.map(([keyId]) => keyId)));
  const first = await auth.authenticate(secret, now);
  await new Promise((resolve) => setImmediate(resolve));
  // The same caller object for the next request: it is made once per cached key.
  expect(auth.authenticate(secret, now + 1)).toBe(first);
  expect(() => auth.authenticate(secret, now + 60_000)).toThrow(expect.objectContaining({ code: "invalid_api_key" }));
  expect(auth.authenticate(secret, now + 59_999)).toBe(first);

  await organizations.update("acme", { status: "suspended" }, testActor);
  // The next turn of the event loop reads the change feed, which drops the cache.
  await new Promise((resolve) => setImmediate(resolve));
  auth.flushLastUsed();
  touched.length = 0;
  const refused = async () => {
    try {
      await auth.authenticate(secret, now + 2);
      return "accepted";
    } catch (error) {
      return (error as { code: string }).code;
    }
  };
  expect(await refused()).toBe("organization_inactive");
  await new Promise((resolve) => setImmediate(resolve));
  expect(await refused()).toBe("organization_inactive");
  auth.flushLastUsed();
  expect(touched).toEqual([]);
  auth.close();
  database.close();
});
