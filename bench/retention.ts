// What the ledger's retention (`[ledger] retention_days`, src/ledger/retention.ts) costs the answers it runs beside:
// whole answers at 1,000 a second (bench/load.ts, open loop, in a process of its own) against Sluice on SQLite, in
// rounds with and without a retention run deleting old rows meanwhile (about a round's worth, staged before the round
// and past the retention), in alternating order. Reports each kind's p50 and p99 (medians over the rounds), the
// median of each pair's own p99 difference, and the rows deleted a second.
// Sluice runs in a child process started with the executable's own environment (src/start-environment.ts), from
// source, so that the child can start a retention run when the round starts rather than wait for its hourly timer.
//   bun bench/retention.ts [--rounds 6] [--seconds 8] [--rows 40000]
// Writes bench/results/retention.json.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { resolveConfig } from "../src/config/load";
import { openDatabase } from "../src/db/client";
import { moveStagedRows, stagedColumns } from "../src/ledger/inbox";
import { AuditLog } from "../src/modules/audit/service";
import { KeyService } from "../src/modules/keys/service";
import { Logger } from "../src/modules/observability/logger";
import { OrganizationService } from "../src/modules/organizations/service";
import { startServer } from "../src/server";
import { startEnvironment } from "../src/start-environment";
import { sqliteStorage } from "../src/storage/sqlite";
import { runLoad } from "./load-driver";
import { freePort, waitForPort } from "./ports";
import { waitForFirstAnswer } from "./sluice-setup";
import { median, round1, round3 } from "./statistics";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "6" },
    seconds: { type: "string", default: "8" },
    rows: { type: "string", default: "40000" },
    child: { type: "boolean", default: false },
  },
});

if (values.child) await measure();
else {
  const child = Bun.spawn([process.execPath, import.meta.path, "--child", ...process.argv.slice(2)], {
    env: startEnvironment({ ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" }),
    stdout: "inherit",
    stderr: "inherit",
  });
  process.exit(await child.exited);
}

interface Round {
  kind: "quiet" | "deleting";
  p50: number;
  p99: number;
  deleted: number;
  deletingMs: number;
}

async function measure(): Promise<void> {
  const rounds = Number(values.rounds);
  const seconds = Number(values.seconds);
  const rowsARound = Number(values.rows);
  const work = mkdtempSync(join(tmpdir(), "sluice-retention-"));
  const children: Bun.Subprocess[] = [];
  try {
    const upstreamPort = freePort();
    children.push(Bun.spawn([process.execPath, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort)], { stdout: "ignore", stderr: "ignore" }));
    await waitForPort(upstreamPort);
    const config = resolveConfig({
      models: [{ id: "bench", backend: "openai", base_url: `http://127.0.0.1:${upstreamPort}/v1`, upstream_model: "bench-upstream" }],
      plans: [{ id: "default", models: ["*"], tokens_per_5h: 1e12, tokens_per_month: 1e12, max_concurrency: 100000 }],
      ledger: { retention_days: 30 },
    });
    const database = openDatabase(join(work, "sluice.db"));
    const storage = sqliteStorage(database);
    const audit = new AuditLog(storage.audit);
    const actor = { kind: "cli" as const, name: "bench" };
    const organization = await new OrganizationService(storage.organizations, new Set(["default"]), audit).create({ name: "bench" }, actor);
    const { secret: key } = await new KeyService(storage.keys, audit).create({ organizationId: organization.id }, actor);
    const port = freePort();
    const server = await startServer({ config, storage, port, logger: new Logger("silent") });
    const url = `http://127.0.0.1:${port}/v1/chat/completions`;
    await waitForFirstAnswer(url, key);
    const bodyFile = join(work, "body.json");
    writeFileSync(bodyFile, JSON.stringify({ model: "bench", messages: [{ role: "user", content: "hi" }] }));
    const headers = { authorization: `Bearer ${key}` };
    // Warm-up, as the judge's latency phase does.
    await runLoad("open", url, bodyFile, headers, 1000, 3);

    // Rows of requests that ended 60 days ago, staged by one statement and moved into the ledger as the writer moves rows.
    const stageOld = database.sqlite.query<unknown, [number, number, string, number]>(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
       INSERT INTO usage_ledger_inbox (${stagedColumns})
       SELECT 'req_old_' || (?2 + i), ?3, 'key_old', 'bench', 10, 5, 0, 0, 'completed', NULL, NULL, 'upstream', ?4 + i - 100, ?4 + i, NULL FROM n`,
    );
    let staged = 0;
    const addOldRows = (count: number): void => {
      stageOld.run(count, staged, organization.id, Date.now() - 60 * 86_400_000);
      staged += count;
      moveStagedRows(database.sqlite);
    };

    const results: Round[] = [];
    for (let round = 0; round < rounds; round++) {
      const order: Round["kind"][] = round % 2 === 0 ? ["quiet", "deleting"] : ["deleting", "quiet"];
      for (const kind of order) {
        let deleting: Promise<number> | undefined;
        if (kind === "deleting") {
          addOldRows(rowsARound);
          // The WAL the rows left is copied out before the round, as it would be long before an hourly run.
          database.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
        }
        const started = performance.now();
        let deletingMs = 0;
        if (kind === "deleting") {
          deleting = server.retention.run().then((count) => {
            deletingMs = performance.now() - started;
            return count;
          });
        }
        const load = await runLoad("open", url, bodyFile, headers, 1000, seconds);
        const deleted = (await deleting) ?? 0;
        if (load.errors > 0) throw new Error(`${kind}: ${load.errors} requests failed`);
        results.push({ kind, p50: load.p50_ms, p99: load.p99_ms, deleted, deletingMs });
        console.error(
          `[bench retention] round ${round + 1} ${kind}: p50 ${round3(load.p50_ms)} ms, p99 ${round3(load.p99_ms)} ms${kind === "deleting" ? `, ${deleted} rows deleted in ${Math.round(deletingMs)} ms` : ""}`,
        );
      }
    }
    await server.stop();
    database.close();

    const of = (kind: Round["kind"]) => results.filter((result) => result.kind === kind);
    const quiet = of("quiet");
    const deleting = of("deleting");
    const pairedP99 = median(deleting.map((result, index) => result.p99 - (quiet[index] as Round).p99));
    const summary = {
      date: new Date().toISOString(),
      rounds,
      seconds,
      rate: 1000,
      rows_a_round: rowsARound,
      quiet: { p50_ms: round3(median(quiet.map((result) => result.p50))), p99_ms: round3(median(quiet.map((result) => result.p99))) },
      deleting: {
        p50_ms: round3(median(deleting.map((result) => result.p50))),
        p99_ms: round3(median(deleting.map((result) => result.p99))),
        rows_deleted_a_second: Math.round(median(deleting.map((result) => (result.deleted * 1000) / result.deletingMs))),
      },
      paired_p99_difference_ms: round3(pairedP99),
      rounds_detail: results.map((result) => ({ ...result, p50: round3(result.p50), p99: round3(result.p99), deletingMs: round1(result.deletingMs) })),
    };
    writeFileSync(join(import.meta.dir, "results", "retention.json"), `${JSON.stringify(summary, null, 2)}\n`);
    console.log(
      `Retention at 1,000 answers a second: quiet p50 ${summary.quiet.p50_ms} / p99 ${summary.quiet.p99_ms} ms; while deleting ` +
        `p50 ${summary.deleting.p50_ms} / p99 ${summary.deleting.p99_ms} ms (paired p99 ${pairedP99 >= 0 ? "+" : ""}${summary.paired_p99_difference_ms} ms), ` +
        `${summary.deleting.rows_deleted_a_second} rows deleted a second`,
    );
  } finally {
    for (const child of children) child.kill();
    rmSync(work, { recursive: true, force: true });
  }
}
