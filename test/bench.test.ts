import { expect, test } from "bun:test";
import { join } from "node:path";
import { repositoryRoot } from "./helpers";

// Benchmarks are not tests; these runs with tiny numbers only keep the runners working.
test("the benchmark runner completes every phase and writes every key (smoke run)", async () => {
  const run = Bun.spawnSync([process.execPath, join(repositoryRoot, "bench/run.ts"), "--smoke"], {
    cwd: repositoryRoot,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
  });
  expect(run.exitCode).toBe(0);
  const results = (await Bun.file(join(repositoryRoot, "bench/results/smoke.json")).json()) as Record<string, Record<string, unknown>>;
  expect(Object.keys(results.nonstream ?? {})).toEqual(
    expect.arrayContaining(["direct_rps", "bare_proxy_rps", "sluice_rps", "portkey_rps", "sluice_vs_bare", "sluice_vs_portkey", "sluice_vs_durable_reference"]),
  );
  // The reference servers answered (a reference that failed every request would report NaN).
  expect(Number(results.nonstream?.parse_reference_rps)).toBeGreaterThan(0);
  expect(Number(results.nonstream?.durable_reference_rps)).toBeGreaterThan(0);
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
    ]),
  );
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
    ]),
  );
  expect(Object.keys(results.scale ?? {})).toEqual(expect.arrayContaining(["keys", "ledger_rows", "rps_full_vs_empty"]));
  expect(Object.keys(results.binary ?? {})).toEqual(expect.arrayContaining(["startup_ms", "idle_rss_mb", "size_mb"]));
  expect(results.streams?.completed).toBe(results.streams?.concurrent);
  expect(results.streams?.durable_reference_completed).toBe(results.streams?.concurrent);
  expect(Number(results.nonstream?.sluice_rps)).toBeGreaterThan(0);
}, 120_000);

test("the soak runner: a short run keeps memory, in-flight and open files flat", () => {
  const run = Bun.spawnSync([process.execPath, join(repositoryRoot, "bench/soak.ts"), "--seconds", "6"], {
    cwd: repositoryRoot,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
  });
  const summary = JSON.parse(run.stdout.toString().trim().split("\n").at(-1) as string) as { verdict: Record<string, boolean>; requests: number };
  expect(summary.requests).toBeGreaterThan(100);
  expect(summary.verdict).toEqual({ memory_flat: true, in_flight_zero: true, files_flat: true, no_server_errors: true });
  expect(run.exitCode).toBe(0);
}, 60_000);
