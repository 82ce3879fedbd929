import { expect, test } from "bun:test";
import type { SQL } from "bun";
import { PostgresLedger } from "../../src/ledger/postgres-ledger";
import { RowNotRecorded } from "../../src/ledger/not-recorded";
import type { LedgerRow } from "../../src/ledger/ledger";
import { ledgerRow } from "../helpers";

const row = (requestId: string): LedgerRow => ledgerRow({ requestId });

test("a commit PostgreSQL refuses: its rows' requests get 503 server_overloaded (answers withheld), and the failure is told once with its rows", async () => {
  // A client whose every statement fails, as one whose server is gone.
  const failing = (() => Promise.reject(new Error("connection refused"))) as unknown as SQL;
  const commits: boolean[] = [];
  const told: [string, number][] = [];
  const ledger = new PostgresLedger(
    failing,
    (ok) => commits.push(ok),
    (error, rows) => told.push([String(error), rows]),
  );
  const settled = await Promise.allSettled([ledger.record(row("req_1")), ledger.record(row("req_2"))]);
  for (const result of settled) {
    expect(result.status).toBe("rejected");
    const error = (result as PromiseRejectedResult).reason as RowNotRecorded;
    expect(error).toBeInstanceOf(RowNotRecorded);
    expect(error.status).toBe(503);
    expect(error.code).toBe("server_overloaded");
    expect(error.retryAfterSeconds).toBe(2);
  }
  // Both rows came in one turn: one commit, one failure told.
  expect(commits).toEqual([false]);
  expect(told).toEqual([["Error: connection refused", 2]]);
});
