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
