import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import fc from "fast-check";
import { openDatabase } from "../../src/db/client";
import { moveStagedRows } from "../../src/ledger/inbox";
import type { LedgerRow } from "../../src/ledger/ledger";
import { monthOf } from "../../src/usage-periods";
import { ledgerRow, stageRows, temporaryDirectory } from "../helpers";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

// Around the turn of a month, so that one move can hold rows of two months, several hours and many minutes.
const monthStart = Date.UTC(2026, 11, 1);

const stagedRow = fc.record({
  id: fc.integer({ min: 0, max: 60 }),
  organizationId: fc.constantFrom("org_a", "org_b"),
  keyId: fc.constantFrom("key_a", "key_b"),
  model: fc.constantFrom("large", "small"),
  promptTokens: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 50 })),
  completionTokens: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 50 })),
  // A few minutes either side of the month's first instant and of its second hour: rows share minutes often.
  endedAt: fc.oneof(
    fc.integer({ min: monthStart - 90_000, max: monthStart + 90_000 }),
    fc.integer({ min: monthStart + 3_600_000 - 60_000, max: monthStart + 3_600_000 + 60_000 }),
  ),
});

interface Totals {
  minutes: unknown[];
  months: unknown[];
  hours: unknown[];
}

/** The aggregates as every row in usage_ledger says they should be: only rows with tokens count. */
function expectedTotals(rows: LedgerRow[]): Totals {
  const minutes = new Map<string, { organizationId: string; minute: number; tokens: number; lastTime: number }>();
  const months = new Map<string, { organizationId: string; month: number; tokens: number }>();
  const hours = new Map<string, { organizationId: string; hour: number; keyId: string; model: string; tokens: number }>();
  for (const row of rows) {
    const tokens = row.promptTokens + row.completionTokens;
    if (tokens === 0) continue;
    const minute = Math.floor(row.endedAt / 60_000);
    const minuteEntry = minutes.get(`${row.organizationId} ${minute}`) ?? { organizationId: row.organizationId, minute, tokens: 0, lastTime: 0 };
    minuteEntry.tokens += tokens;
    minuteEntry.lastTime = Math.max(minuteEntry.lastTime, row.endedAt);
    minutes.set(`${row.organizationId} ${minute}`, minuteEntry);
    const month = monthOf(row.endedAt);
    const monthEntry = months.get(`${row.organizationId} ${month}`) ?? { organizationId: row.organizationId, month, tokens: 0 };
    monthEntry.tokens += tokens;
    months.set(`${row.organizationId} ${month}`, monthEntry);
    const hour = Math.floor(row.endedAt / 3_600_000);
    const hourKey = `${row.organizationId} ${hour} ${row.keyId} ${row.model}`;
    const hourEntry = hours.get(hourKey) ?? { organizationId: row.organizationId, hour, keyId: row.keyId, model: row.model, tokens: 0 };
    hourEntry.tokens += tokens;
    hours.set(hourKey, hourEntry);
  }
  const sorted = <T>(entries: Map<string, T>) => [...entries].sort(([left], [right]) => (left < right ? -1 : 1)).map(([, value]) => value);
  return { minutes: sorted(minutes), months: sorted(months), hours: sorted(hours) };
}

test("a move adds each new row to the ledger and the aggregates once, whatever the batch holds: rows of no tokens, two months, rows staged twice or moved before", () => {
  const directory = temporaryDirectory();
  cleanups.push(() => directory.remove());
  let run = 0;
  fc.assert(
    fc.property(fc.array(fc.array(stagedRow, { maxLength: 40 }), { minLength: 1, maxLength: 4 }), (moves) => {
      const handle = openDatabase(join(directory.path, `inbox-${run++}.db`));
      try {
        // The first row staged under an id is the one the ledger keeps; a later one is a replay.
        const kept = new Map<string, LedgerRow>();
        for (const batch of moves) {
          const rows = batch.map(({ id, ...fields }) => ledgerRow({ ...fields, requestId: `req_${String(id).padStart(4, "0")}`, startedAt: fields.endedAt }));
          stageRows(handle.sqlite, rows);
          const keptBefore = kept.size;
          for (const row of rows) if (!kept.has(row.requestId)) kept.set(row.requestId, row);
          expect(moveStagedRows(handle.sqlite)).toBe(kept.size - keptBefore);
          const read = (sql: string) => handle.sqlite.query(sql).all();
          expect(read("SELECT count(*) AS rows FROM usage_ledger_inbox")).toEqual([{ rows: 0 }]);
          expect(read("SELECT count(*) AS rows FROM usage_ledger")).toEqual([{ rows: kept.size }]);
          const expected = expectedTotals([...kept.values()]);
          expect({
            minutes: read(
              "SELECT organization_id AS organizationId, minute, tokens, last_time AS lastTime FROM usage_minutes ORDER BY organization_id || ' ' || minute",
            ),
            months: read("SELECT organization_id AS organizationId, month, tokens FROM usage_months ORDER BY organization_id || ' ' || month"),
            hours: read(
              "SELECT organization_id AS organizationId, hour, key_id AS keyId, model, tokens FROM usage_hours ORDER BY organization_id || ' ' || hour || ' ' || key_id || ' ' || model",
            ),
          }).toEqual(expected);
        }
      } finally {
        handle.close();
      }
    }),
    {
      numRuns: 60,
      examples: [
        // A row of no tokens last in its minute leaves the minute's last time alone; a replay in the next move counts
        // nothing.
        [
          [
            [
              { id: 0, organizationId: "org_b", keyId: "key_a", model: "large", promptTokens: 1, completionTokens: 0, endedAt: monthStart },
              { id: 1, organizationId: "org_b", keyId: "key_a", model: "large", promptTokens: 0, completionTokens: 0, endedAt: monthStart + 1 },
            ],
            [{ id: 0, organizationId: "org_b", keyId: "key_a", model: "large", promptTokens: 1, completionTokens: 0, endedAt: monthStart }],
          ],
        ],
      ],
    },
  );
});
