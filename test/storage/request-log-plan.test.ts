// Every page and every filter of the request log is answered from an index, in order: SQLite's own plan says so.
// (How fast at a million rows, on both backends: bench/request-log.ts.)
import { expect, test } from "bun:test";
import { openDatabase } from "../../src/db/client";
import { requestLogQuery } from "../../src/storage/sqlite";
import type { RequestLogFilter } from "../../src/storage/types";

const after = { endedAt: 5, requestId: "req_x" };
const filters: Omit<RequestLogFilter, "limit">[] = [
  {},
  { after },
  { organizationId: "org_1" },
  { organizationId: "org_1", after },
  { keyId: "key_1" },
  { model: "m1" },
  { outcome: "content_filter" },
  { outcome: "upstream_error", after },
  { outcome: "completed" },
  { organizationId: "org_1", model: "m1" },
  { organizationId: "org_1", keyId: "key_1", after },
  { organizationId: "org_1", outcome: "client_disconnected" },
  { organizationId: "org_1", outcome: "completed", since: 1 },
  { since: 1, until: 5 },
  { requestId: "req_x" },
  { organizationId: "org_1", requestId: "req_x" },
];

test("no filter combination scans the table or sorts all its rows", () => {
  const database = openDatabase(":memory:");
  try {
    for (const filter of filters) {
      const { sql, params } = requestLogQuery(database, { ...filter, limit: 51 }).toSQL();
      const plan = database.sqlite
        .query<{ detail: string }, never[]>(`EXPLAIN QUERY PLAN ${sql}`)
        .all(...(params as never[]))
        .map((row) => row.detail);
      const ledger = plan.find((detail) => detail.includes("usage_ledger")) as string;
      expect({ filter, ledger }).toEqual({ filter, ledger: expect.stringMatching(/^(SEARCH|SCAN) usage_ledger USING (COVERING )?INDEX /) });
      // Sorting the rows of one millisecond (the request id breaks ties) is fine; sorting every match is not.
      expect({ filter, sorts: plan.filter((detail) => detail === "USE TEMP B-TREE FOR ORDER BY") }).toEqual({ filter, sorts: [] });
    }
  } finally {
    database.close();
  }
});
