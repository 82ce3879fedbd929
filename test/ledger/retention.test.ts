// The ledger's retention through a real server on SQLite: rows past `[ledger] retention_days` go, a batch at a time,
// while the server answers; the reports keep their totals, and no row of the current month goes whatever the setting.
import { expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { resolveConfig } from "../../src/config/load";
import type { ConfigFile } from "../../src/config/schema";
import { moveStagedRows } from "../../src/ledger/inbox";
import { retentionBatchRows, retentionCutoff } from "../../src/ledger/retention";
import { usageReport } from "../../src/modules/usage/report";
import { startOfMonth } from "../../src/usage-periods";
import { capturingLogger, fakeModel, ledgerRow, stageRows, startSluice, type TestSluice, useFakeUpstream } from "../helpers";

const upstream = useFakeUpstream();
const dayMs = 86_400_000;
const now = Date.parse("2026-11-20T12:00:00Z");

function configuration(retentionDays?: number): ConfigFile {
  return {
    models: [fakeModel(upstream.url, "m", "usage-10-5")],
    plans: [{ id: "default", models: ["*"] }],
    ...(retentionDays === undefined ? {} : { ledger: { retention_days: retentionDays } }),
  };
}

/** `count` moved ledger rows of the test's organization that ended at `endedAt` (and the milliseconds after it). */
function addRows(sluice: TestSluice, organizationId: string, prefix: string, endedAt: number, count: number): void {
  const rows = Array.from({ length: count }, (_, index) =>
    ledgerRow({ requestId: `req_${prefix}_${index}`, organizationId, keyId: "key_old", startedAt: endedAt + index - 100, endedAt: endedAt + index }),
  );
  stageRows(sluice.database.sqlite, rows);
  moveStagedRows(sluice.database.sqlite);
}

function rowsWith(sluice: TestSluice, prefix: string): number {
  return sluice.ledgerRows().filter((row) => row.request_id.startsWith(`req_${prefix}_`)).length;
}

test("the cutoff: the retention's days, but never into the current UTC month or the 6 hours before it", () => {
  expect(retentionCutoff(now, 30)).toBe(now - 30 * dayMs);
  // One day would reach into November: the month and the evening of October 31 stay.
  expect(retentionCutoff(now, 1)).toBe(Date.parse("2026-10-31T18:00:00Z"));
  expect(retentionCutoff(Date.parse("2026-12-01T02:00:00Z"), 3650)).toBe(Date.parse("2016-12-03T02:00:00Z"));
});

test("rows past the retention are deleted in batches; newer rows, the current month and the reports' totals stay", async () => {
  const { logger, lines } = capturingLogger();
  const sluice = await startSluice(configuration(30), { clock: () => now, logger });
  try {
    const { organizationId } = await sluice.addOrganization("acme");
    const old = retentionBatchRows * 2 + 201;
    addRows(sluice, organizationId, "september", Date.parse("2026-09-10T08:00:00Z"), old);
    addRows(sluice, organizationId, "october", Date.parse("2026-10-25T08:00:00Z"), 40);
    addRows(sluice, organizationId, "november", Date.parse("2026-11-02T08:00:00Z"), 30);
    const report = () => usageReport(sluice.storage.usage, { month: "2026-09" }, now, organizationId);
    const before = await report();
    expect(before.total).toMatchObject({ tokens: old * 15, promptTokens: old * 10, completionTokens: old * 5 });

    expect(await sluice.server.retention.run()).toBe(old);
    expect(rowsWith(sluice, "september")).toBe(0);
    expect(rowsWith(sluice, "october")).toBe(40);
    expect(rowsWith(sluice, "november")).toBe(30);
    // The month's report is read from the aggregates, which stay.
    expect(await report()).toEqual(before);
    // The request log no longer has them.
    const page = await sluice.storage.requestLog.page({ organizationId, until: Date.parse("2026-10-01T00:00:00Z"), limit: 10 });
    expect(page).toEqual([]);
    const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(metrics).toContain(`sluice_ledger_deleted_rows_total ${old}\n`);
    expect(lines.find((line) => line.message === "ledger rows past their retention deleted")).toMatchObject({
      rows: old,
      ended_before: new Date(now - 30 * dayMs).toISOString(),
    });
    // Nothing more to delete.
    expect(await sluice.server.retention.run()).toBe(0);

    // A retention of one day still keeps the month (and the 6 hours before it), so a key's caps and a reset read it.
    await sluice.server.reconfigure(resolveConfig(configuration(1)), { kind: "cli", name: "test" });
    expect(await sluice.server.retention.run()).toBe(40);
    expect(rowsWith(sluice, "november")).toBe(30);
    const [audited] = await sluice.storage.audit.list({ action: "config.reloaded", limit: 1 });
    expect(audited?.changes).toMatchObject({ "ledger.retentionDays": [30, 1] });
  } finally {
    await sluice.stop();
  }
});

test("without a retention nothing is deleted", async () => {
  const sluice = await startSluice(configuration(), { clock: () => now });
  try {
    const { organizationId } = await sluice.addOrganization("acme");
    addRows(sluice, organizationId, "ancient", Date.parse("2020-01-01T00:00:00Z"), 20);
    expect(await sluice.server.retention.run()).toBe(0);
    expect(rowsWith(sluice, "ancient")).toBe(20);
  } finally {
    await sluice.stop();
  }
});

test("a database another connection is writing: the delete does not wait for it (SQLITE_BUSY at once), and the run goes on once it is free", async () => {
  const sluice = await startSluice(configuration(30), { clock: () => now });
  try {
    const { organizationId } = await sluice.addOrganization("acme");
    addRows(sluice, organizationId, "old", Date.parse("2026-08-01T00:00:00Z"), 50);
    const other = new Database(sluice.database.sqlite.filename);
    other.run("BEGIN IMMEDIATE");
    try {
      const refused = await sluice.storage.requestLog.deleteBefore(now, 10).catch((error: unknown) => error);
      expect((refused as { code?: string }).code).toStartWith("SQLITE_BUSY");
      const running = sluice.server.retention.run();
      await Bun.sleep(250);
      other.run("COMMIT");
      expect(await running).toBe(50);
    } finally {
      other.close();
    }
    // The server's own connection waits for locks as before (its other writes are not made to fail).
    expect(sluice.database.sqlite.query<{ timeout: number }, []>("PRAGMA busy_timeout").get()?.timeout).toBe(5000);
  } finally {
    await sluice.stop();
  }
});

// 200, not more: the test's client and the server's upstream calls share this process's fetch, which runs 256 at once.
test("200 concurrent requests answered while 5,000 old rows are deleted: every answer has its row, only the old rows go", async () => {
  const sluice = await startSluice(configuration(30));
  try {
    const { organizationId } = await sluice.addOrganization("acme");
    const aYearAgo = Date.now() - 365 * dayMs;
    addRows(sluice, organizationId, "old", Math.min(aYearAgo, startOfMonth(Date.now()) - 40 * dayMs), 5000);
    const client = sluice.client();
    const [deleted, answers] = await Promise.all([
      sluice.server.retention.run(),
      Promise.all(
        Array.from({ length: 200 }, () => client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).withResponse()),
      ),
    ]);
    expect(deleted).toBe(5000);
    expect(rowsWith(sluice, "old")).toBe(0);
    const ids = new Set(sluice.ledgerRows().map((row) => row.request_id));
    for (const { response } of answers) expect(ids.has(response.headers.get("x-request-id") as string)).toBe(true);
    expect(ids.size).toBe(200);
  } finally {
    await sluice.stop();
  }
}, 30_000);
