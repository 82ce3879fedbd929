import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { freePort, waitForPort } from "../bench/ports";
import { figuresOf, tally } from "../bench/runs";
import { prepareSluice, writeSourceCli } from "../bench/sluice-setup";
import { repositoryRoot, temporaryDirectory } from "./helpers";

// Benchmarks are not tests; these runs with tiny numbers only keep the runners working.

/** Runs a runner of bench/ to its end, with the HTTP client's connection limit lifted as `make bench` does. */
function runBench(script: string, ...args: string[]) {
  return Bun.spawnSync([process.execPath, join(repositoryRoot, "bench", script), ...args], {
    cwd: repositoryRoot,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
  });
}

test("the benchmark runner completes every phase and writes every key (smoke run)", async () => {
  const run = runBench("run.ts", "--smoke");
  expect(run.exitCode).toBe(0);
  const results = (await Bun.file(join(repositoryRoot, "bench/results/smoke.json")).json()) as Record<string, Record<string, unknown>>;
  expect(Object.keys(results.nonstream ?? {})).toEqual(
    expect.arrayContaining([
      "direct_rps",
      "bare_proxy_rps",
      "sluice_rps",
      "portkey_rps",
      "sluice_vs_bare",
      "sluice_vs_portkey",
      "sluice_vs_durable_reference",
      "sluice_vs_bare_paired",
      "full_reference_vs_bare_paired",
      "sluice_vs_full_reference_paired",
    ]),
  );
  // One round in a smoke run: its paired ratio is that round's own.
  const nonstream = results.nonstream as Record<string, number>;
  expect(nonstream.sluice_vs_bare_paired).toBeCloseTo((nonstream.sluice_rps as number) / (nonstream.bare_proxy_rps as number), 6);
  // CPU an answer by thread, for the bare proxy, Sluice and the full reference: the event loop is part of the whole.
  const cpu = (results.nonstream as unknown as { cpu_us_per_answer: Record<string, Record<string, number>> }).cpu_us_per_answer;
  for (const name of ["bare", "sluice", "full_reference"]) {
    const threads = cpu[name] ?? {};
    expect(threads["event loop"]).toBeGreaterThan(0);
    expect(threads.process).toBeGreaterThanOrEqual(threads["event loop"] as number);
  }
  // Sluice's ledger rows are moved by its writer thread.
  expect(cpu.sluice?.Worker).toBeGreaterThan(0);
  // The reference servers answered (a reference that failed every request would report NaN).
  expect(Number(results.nonstream?.parse_reference_rps)).toBeGreaterThan(0);
  expect(Number(results.nonstream?.durable_reference_rps)).toBeGreaterThan(0);
  expect(Number(results.nonstream?.full_reference_rps)).toBeGreaterThan(0);
  expect(Object.keys(results.latency ?? {})).toEqual(
    expect.arrayContaining([
      "rate",
      "direct_p50_ms",
      "direct_p99_ms",
      "bare_p50_ms",
      "bare_p99_ms",
      "sluice_p50_ms",
      "sluice_p99_ms",
      "durable_reference_p99_ms",
      "full_reference_p99_ms",
    ]),
  );
  // The full reference answered the open loop too (a reference that failed every request would report NaN).
  expect(Number(results.latency?.full_reference_p99_ms)).toBeGreaterThan(0);
  expect(Object.keys(results.streams ?? {})).toEqual(
    expect.arrayContaining([
      "concurrent",
      "completed",
      "bare_peak_rss_mb",
      "sluice_peak_rss_mb",
      "bare_ttft_p99_ms",
      "sluice_ttft_p99_ms",
      "durable_reference_peak_rss_mb",
      "durable_reference_ttft_p99_ms",
      "full_reference_peak_rss_mb",
      "full_reference_ttft_p99_ms",
      "full_reference_no_generations_peak_rss_mb",
      "full_reference_no_generations_ttft_p99_ms",
    ]),
  );
  expect(Object.keys(results.scale ?? {})).toEqual(expect.arrayContaining(["keys", "ledger_rows", "rps_full_vs_empty"]));
  expect(Object.keys(results.binary ?? {})).toEqual(expect.arrayContaining(["startup_ms", "idle_rss_mb", "size_mb"]));
  expect(results.streams?.completed).toBe(results.streams?.concurrent);
  expect(results.streams?.durable_reference_completed).toBe(results.streams?.concurrent);
  expect(results.streams?.full_reference_completed).toBe(results.streams?.concurrent);
  expect(results.streams?.full_reference_no_generations_completed).toBe(results.streams?.concurrent);
  expect(Number(results.nonstream?.sluice_rps)).toBeGreaterThan(0);
}, 120_000);

test("the GC pause runner: every server answers, and each side reports its collections (smoke run)", () => {
  // The runner measures the executable that the smoke run above builds.
  expect(Bun.file(join(repositoryRoot, "dist/sluice")).size).toBeGreaterThan(0);
  const run = Bun.spawnSync([process.execPath, join(repositoryRoot, "bench/gc-pauses.ts"), "--smoke"], { cwd: repositoryRoot, stdout: "pipe", stderr: "pipe" });
  expect(run.exitCode).toBe(0);
  const report = JSON.parse(run.stdout.toString()) as Record<string, Record<string, number>>;
  for (const side of ["sluice", "durable_reference", "full_reference"]) {
    expect(report[side]?.p99_ms).toBeGreaterThan(0);
    expect(Object.keys(report[side] ?? {})).toEqual(
      expect.arrayContaining([
        "eden_collections",
        "eden_pause_median_ms",
        "eden_visited_median_kb",
        "late_answers",
        "busiest_phase_share",
        "busiest_phase_ms_by_round",
      ]),
    );
  }
}, 60_000);

test("the shared-mode runner: every phase beside SQLite, streams and scale included (smoke run)", async () => {
  // The runner measures the executable that the smoke run above builds, on PostgreSQL and Redis it starts itself.
  expect(Bun.file(join(repositoryRoot, "dist/sluice")).size).toBeGreaterThan(0);
  const run = runBench("shared.ts", "--smoke");
  expect(run.exitCode).toBe(0);
  const { shared } = (await Bun.file(join(repositoryRoot, "bench/results/shared-smoke.json")).json()) as {
    shared: Record<string, Record<string, unknown>>;
  };
  expect(Number(shared.nonstream?.shared_rps)).toBeGreaterThan(0);
  for (const side of ["sqlite", "shared"]) {
    const streams = shared.streams?.[side] as Record<string, number>;
    expect(streams.completed).toBe(shared.streams?.concurrent as number);
    expect(streams.peak_mb).toBeGreaterThan(0);
  }
  expect(Number(shared.scale?.full_rps)).toBeGreaterThan(0);
  expect(Number(shared.scale?.empty_rps)).toBeGreaterThan(0);
  expect(shared.burst_max_concurrency_3?.leases_held_after).toBe(0);
}, 120_000);

interface SoakSummary {
  verdict: Record<string, boolean>;
  requests: number;
  ledger: { answered: number; sampled: number; found: number };
  leases_left?: number;
}

test("the soak runner: a short run keeps memory, in-flight and open files flat, and every sampled answer has its ledger row", () => {
  const run = runBench("soak.ts", "--seconds", "6");
  const summary = JSON.parse(run.stdout.toString().trim().split("\n").at(-1) as string) as SoakSummary;
  expect(summary.requests).toBeGreaterThan(100);
  expect(summary.ledger.sampled).toBe(Math.floor(summary.ledger.answered / 50));
  expect(summary.ledger.found).toBe(summary.ledger.sampled);
  expect(summary.verdict).toEqual({ memory_flat: true, in_flight_zero: true, files_flat: true, no_server_errors: true, every_sampled_answer_recorded: true });
  expect(run.exitCode).toBe(0);
}, 60_000);

test("the soak runner on PostgreSQL + Redis (short run): the same verdicts, and no lease left in Redis", () => {
  const run = runBench("soak.ts", "--seconds", "6", "--shared");
  const summary = JSON.parse(run.stdout.toString().trim().split("\n").at(-1) as string) as SoakSummary;
  expect(summary.requests).toBeGreaterThan(100);
  expect(summary.ledger.sampled).toBeGreaterThan(0);
  expect(summary.ledger.found).toBe(summary.ledger.sampled);
  expect(summary.leases_left).toBe(0);
  expect(summary.verdict).toEqual({
    memory_flat: true,
    in_flight_zero: true,
    files_flat: true,
    no_server_errors: true,
    every_sampled_answer_recorded: true,
    no_lease_left: true,
  });
  expect(run.exitCode).toBe(0);
}, 90_000);

test("the same-process runner: Sluice, the full reference and a copy of it with Sluice's components answer from one process, and each side reports its CPU (smoke run)", () => {
  const written = join(repositoryRoot, "bench/results/same-process-smoke.json");
  // A report left by an earlier run must not pass for this one's.
  rmSync(written, { force: true });
  const run = runBench("same-process.ts", "--smoke", "--with", "parts=ledger+backend+observability+idle-timeout");
  expect(run.exitCode).toBe(0);
  interface Measures {
    rps: number;
    event_loop_us: number;
    process_us: number;
    threads_us: Record<string, number>;
    paired: Record<string, number>;
    sluice_parts?: string;
  }
  const report = JSON.parse(readFileSync(written, "utf8")) as {
    sluice: Measures;
    reference: Measures;
    paired: Record<string, number>;
    with: Record<string, Measures>;
  };
  const copy = report.with.parts as Measures;
  expect(copy.sluice_parts).toBe("ledger,backend,observability,idle-timeout");
  for (const side of [report.sluice, report.reference, copy]) {
    expect(side.rps).toBeGreaterThan(0);
    expect(side.event_loop_us).toBeGreaterThan(0);
    expect(side.process_us).toBeGreaterThanOrEqual(side.event_loop_us);
    // By thread: the event loop's share is the figure above; every side calls its upstream through fetch's thread.
    expect(side.threads_us["event loop"]).toBe(side.event_loop_us);
    expect(side.threads_us["HTTP Client"]).toBeGreaterThan(0);
  }
  for (const ratio of [...Object.values(report.paired), ...Object.values(copy.paired)]) expect(Number.isFinite(ratio) && ratio > 0).toBe(true);
}, 60_000);

// wrk's closed loop, and an open loop at a fixed rate (--rate), where each request is a turn of its own.
test.each([
  [[], "wrk -t2 -c64"],
  [["--rate", "400"], "open loop at 400 requests a second"],
])(
  "the switch runner: phases of both states under load (%p), each with its CPU and requests, compared in pairs (smoke run)",
  (extra, load) => {
    const run = runBench("switch.ts", "--smoke", ...extra);
    expect(run.exitCode).toBe(0);
    const report = JSON.parse(run.stdout.toString()) as {
      load: string;
      pairs: number;
      process_cpu: Record<string, number | number[]>;
      event_loop_cpu: Record<string, number | number[]>;
      requests: Record<string, number>;
      microseconds_per_request: Record<"on" | "off", { process: number; event_loop: number }>;
    };
    expect(report.load).toBe(load);
    expect(report.pairs).toBeGreaterThanOrEqual(3);
    for (const figures of [report.process_cpu, report.event_loop_cpu]) {
      for (const ratio of [figures.median, figures.standard_error, figures.totals]) expect(Number.isFinite(ratio) && (ratio as number) >= 0).toBe(true);
      // Blocks of about 10 s: a 2 s smoke run fills none.
      expect(figures.totals_by_block).toEqual([]);
    }
    for (const ratio of [report.requests.median, report.requests.standard_error]) expect(Number.isFinite(ratio) && (ratio as number) >= 0).toBe(true);
    for (const state of ["on", "off"] as const) {
      const spent = report.microseconds_per_request[state];
      expect(spent.event_loop).toBeGreaterThan(0);
      expect(spent.process).toBeGreaterThanOrEqual(spent.event_loop);
    }
  },
  60_000,
);

// The second run does the same work through Sluice's own ledger, upstream client, log line and metrics, and idle
// timeout (REFERENCE_SLUICE, which bench/same-process.ts --with sets).
test.each(["", "ledger,backend,observability,idle-timeout"])(
  "the full reference does Sluice's checks (Sluice's own components: '%s'): a good key is answered and recorded, streamed or whole; a wrong key and a red-line prompt are refused",
  async (sluiceParts) => {
    const temporary = temporaryDirectory();
    const directory = temporary.path;
    // prepareSluice runs the CLI of an executable: here the source, through a wrapper.
    const cli = writeSourceCli(directory);
    const upstreamPort = freePort();
    const upstream = Bun.spawn([process.execPath, join(repositoryRoot, "bench/fake-upstream.ts"), String(upstreamPort), "5", "0"], { stdout: "ignore" });
    const port = freePort();
    let reference: Bun.Subprocess | undefined;
    try {
      await waitForPort(upstreamPort);
      const { environment, key } = await prepareSluice(cli, directory, upstreamPort);
      const databasePath = environment.SLUICE_DB as string;
      reference = Bun.spawn(
        [process.execPath, join(repositoryRoot, "bench/full-reference.ts"), String(port), `http://127.0.0.1:${upstreamPort}`, databasePath],
        {
          env: { ...process.env, REFERENCE_SLUICE: sluiceParts },
          stdout: "pipe",
        },
      );
      await waitForPort(port);
      const ask = (authorization: string, content: string, stream = false) =>
        fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization },
          body: JSON.stringify({ model: "bench", messages: [{ role: "user", content }], stream }),
        });
      const answered = await ask(`Bearer ${key}`, "What is 2+2?");
      expect(answered.status).toBe(200);
      const requestId = answered.headers.get("x-request-id") as string;
      expect(requestId).toStartWith("req_");
      expect(answered.headers.get("x-ratelimit-remaining-tokens")).not.toBeNull();
      expect(((await answered.json()) as { model: string }).model).toBe("bench");
      const streamed = await ask(`Bearer ${key}`, "What is 2+2?", true);
      expect(streamed.status).toBe(200);
      expect(streamed.headers.get("content-type")).toBe("text/event-stream");
      const streamId = streamed.headers.get("x-request-id") as string;
      const events = (await streamed.text()).trim().split("\n\n");
      expect(events.at(-1)).toBe("data: [DONE]");
      const chunks = events
        .slice(0, -1)
        .map((event) => JSON.parse(event.slice(6)) as { id: string; model: string; choices: { delta: { reasoning_content?: string } }[] });
      expect(chunks.filter((chunk) => chunk.choices[0]?.delta.reasoning_content).length).toBe(5);
      expect(new Set(chunks.map((chunk) => `${chunk.id} ${chunk.model}`))).toEqual(new Set([`chatcmpl-${streamId.slice(4)} bench`]));
      expect((await ask("Bearer sk-sluice-wrong", "What is 2+2?")).status).toBe(401);
      expect((await ask(`Bearer ${key}`, "How to synthesize sarin at home, step by step?")).status).toBe(400);
      // Moved from the inbox into usage_ledger within 100 ms (the reference's moves; Sluice's ledger moves after 25).
      await Bun.sleep(200);
      const database = new Database(databasePath, { readonly: true });
      const rows = database
        .query<{ request_id: string; completion_tokens: number; first_token_ms: number | null }, []>(
          "SELECT request_id, completion_tokens, first_token_ms FROM usage_ledger ORDER BY request_id",
        )
        .all();
      database.close();
      expect(rows.map((row) => row.request_id)).toEqual([requestId, streamId]);
      // The stream's row: the upstream's usage, and when its first token came.
      expect(rows[1]?.completion_tokens).toBe(5);
      expect(rows[1]?.first_token_ms).not.toBeNull();
      // The log lines are Sluice's (with the caller's key and the usage) exactly when its observability was asked for.
      reference.kill();
      const lines = (await new Response(reference.stdout as ReadableStream).text()).trim().split("\n");
      const answeredLine = JSON.parse(lines.find((line) => line.includes(requestId)) as string) as Record<string, unknown>;
      if (sluiceParts.includes("observability")) {
        expect(answeredLine).toMatchObject({
          message: "request",
          status: 200,
          route: "/v1/chat/completions",
          outcome: "completed",
          prompt_tokens: expect.any(Number),
        });
        expect(answeredLine.key_id).toStartWith("key_");
      } else {
        expect(answeredLine).toMatchObject({ level: "info", status: 200 });
        expect(answeredLine.key_id).toBeUndefined();
      }
    } finally {
      reference?.kill();
      upstream.kill();
      temporary.remove();
    }
  },
  60_000,
);

test("the judge's runs table: each recorded run's figures against the targets, beside the full reference's", () => {
  const latest = {
    date: "2026-11-28T07:03:51.187Z",
    smoke: false,
    nonstream: { sluice_vs_bare: 0.74, full_reference_vs_bare: 0.81, sluice_vs_portkey: 3.7 },
    latency: { bare_p50_ms: 0.19, bare_p99_ms: 1.18, sluice_p50_ms: 0.29, sluice_p99_ms: 2.89, full_reference_p99_ms: 2.1 },
    streams: {
      concurrent: 2000,
      completed: 2000,
      sluice_peak_rss_mb: 173,
      bare_ttft_p99_ms: 259,
      sluice_ttft_p99_ms: 330,
      full_reference_ttft_p99_ms: 380,
      full_reference_no_generations_ttft_p99_ms: 364,
    },
    scale: { rps_full_vs_empty: 1.0 },
    binary: { startup_ms: 50, idle_rss_mb: 56 },
  };
  const run = figuresOf(latest, "eaca565");
  expect(run).toBeDefined();
  if (!run) return;
  expect(run.p99OverBareMs).toBeCloseTo(1.71, 6);
  expect(run.referenceP99OverBareMs).toBeCloseTo(0.92, 6);
  // The full reference as Sluice runs on SQLite, where the run has it.
  expect(run.referenceTtftVsBare).toBeCloseTo(364 / 259, 6);
  expect(figuresOf({ ...latest, smoke: true }, "x")).toBeUndefined();
  // A run from before the full reference: its cells are empty, not counted as missed.
  const early = figuresOf(
    { ...latest, nonstream: { sluice_vs_bare: 0.5, sluice_vs_portkey: 2 }, latency: { ...latest.latency, full_reference_p99_ms: undefined } },
    "y",
  );
  expect(early?.referenceVsBare).toBeNull();
  const incomplete = figuresOf({ ...latest, streams: { ...latest.streams, completed: 1999, sluice_peak_rss_mb: 150 } }, "z");
  const counts = Object.fromEntries(tally([run, early, incomplete].filter((figures) => figures !== undefined)).map((line) => [line.target, line]));
  expect(counts["whole answers ÷ bare ≥ 0.8"]).toMatchObject({ sluice: 0, reference: 2, referenceRuns: 2, runs: 3 });
  expect(counts["p99 at 1,000/s over bare ≤ +1 ms"]).toMatchObject({ sluice: 0, reference: 2, referenceRuns: 2 });
  // TTFT 330 ÷ 259 = 1.27: met by Sluice in every run; the reference's 1.41 in none.
  expect(counts["TTFT p99 ÷ bare ≤ 1.3"]).toMatchObject({ sluice: 3, reference: 0, referenceRuns: 3 });
  // 1,999 of 2,000 streams is a miss whatever the peak.
  expect(counts["2,000 streams complete, peak < 200 MB"]).toMatchObject({ sluice: 2 });
  expect(counts["÷ Portkey ≥ 3"]).toMatchObject({ sluice: 2, reference: null });

  // The tool itself, on this repository's history of latest.json.
  const table = runBench("runs.ts", "--json");
  expect(table.exitCode).toBe(0);
  const recorded = JSON.parse(table.stdout.toString()) as { runs: { date: string }[] };
  expect(recorded.runs.length).toBeGreaterThan(0);
  expect(new Set(recorded.runs.map((figures) => figures.date)).size).toBe(recorded.runs.length);
});
