// Prices one step of Sluice's path in one process, where whole-run comparisons cannot: on this machine rounds of the
// same build move by a third, and a step costs 1-4%. Put the step behind a switch in a copy of the source (a git
// worktree), for example `if (!globalThis.benchSwitch?.on) options.finish(record);`, and run this against that copy.
// It starts the copy's Sluice with bench/switch-preload.ts, which flips the switch about every --phase-ms (each phase
// a random 80-120% of it) while wrk -c64 loads it with whole answers, and records each phase's CPU (the whole process,
// and the event loop's thread) and requests. Each phase is compared with the next, of the other state, so that the
// machine's drift falls on both sides of every pair. Prints on ÷ off per request: the median of the pairs, their
// standard error, the ratio of the totals, and that ratio over blocks of about 10 s with their standard error.
// Runs of one switch differ by more than each run's standard error says (0.963, 0.999, 0.971, 0.997 for the upstream
// deadline; each process makes JIT decisions of its own): repeat a run, in fresh processes, before believing a
// difference under about 4% (bench/HISTORY.md).
// The phases' lengths are random, and 237 ms on average rather than a divisor of a second: Sluice's 1 s timers (the
// allocator's purge, the writer's checkpoint pass) would otherwise fall in the same state every time.
// With `--rate N` the measured load is an open loop at N requests a second (bench/load.ts, as `make bench`'s latency
// phase) instead of wrk: there each request is a turn of the event loop of its own, and pays what a saturated
// server shares between many (the staged commit, the change poll, timers, wake-ups).
//   bun bench/switch.ts [--source DIR] [--seconds 60] [--warmup 12] [--phase-ms 237] [--rate N] [--smoke]
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { runLoad, runWrk, writeWrkScript } from "./load-driver";
import { freePort } from "./ports";
import { prepareSourceBench, waitForFirstAnswer } from "./sluice-setup";
import { median, round1, round3 } from "./statistics";
import type { SwitchPhase } from "./switch-preload";
import { startEnvironment } from "../src/start-environment";

const { values } = parseArgs({
  options: {
    source: { type: "string", default: join(import.meta.dir, "..") },
    seconds: { type: "string", default: "60" },
    warmup: { type: "string", default: "12" },
    "phase-ms": { type: "string", default: "237" },
    rate: { type: "string" },
    smoke: { type: "boolean", default: false },
  },
});
const source = resolve(values.source);
const smoke = values.smoke;
const seconds = smoke ? 2 : Number(values.seconds);
const warmupSeconds = smoke ? 1 : Number(values.warmup);
const phaseMs = Number(values["phase-ms"]);
/** Requests a second of the measured open loop (`--rate`); undefined for wrk's closed loop. */
const rate = values.rate === undefined ? undefined : Number(values.rate);
const bun = process.execPath;

/** Adjacent phases of opposite states, as on ÷ off of a per-request figure. */
function pairRatios(phases: SwitchPhase[], field: "processMicroseconds" | "eventLoopMicroseconds" | "requests"): number[] {
  const ratios: number[] = [];
  for (let index = 1; index < phases.length; index++) {
    const [first, second] = [phases[index - 1] as SwitchPhase, phases[index] as SwitchPhase];
    if (first.on === second.on) continue;
    const [on, off] = first.on ? [first, second] : [second, first];
    ratios.push(
      field === "requests" ? on.requests / on.milliseconds / (off.requests / off.milliseconds) : on[field] / on.requests / (off[field] / off.requests),
    );
  }
  return ratios;
}

function summary(ratios: number[]): { median: number; standard_error: number } {
  const mean = ratios.reduce((sum, ratio) => sum + ratio, 0) / ratios.length;
  const variance = ratios.reduce((sum, ratio) => sum + (ratio - mean) ** 2, 0) / ratios.length;
  return { median: round3(median(ratios)), standard_error: round3(Math.sqrt(variance / ratios.length)) };
}

/** Per request over every phase of one state. */
function total(phases: SwitchPhase[], on: boolean, field: "processMicroseconds" | "eventLoopMicroseconds"): number {
  const chosen = phases.filter((phase) => phase.on === on);
  return chosen.reduce((sum, phase) => sum + phase[field], 0) / chosen.reduce((sum, phase) => sum + phase.requests, 0);
}

/** The totals' ratio over consecutive blocks of about 10 s, and its standard error: whether one stretch carries the result. */
function byBlocks(
  phases: SwitchPhase[],
  field: "processMicroseconds" | "eventLoopMicroseconds",
): { totals_by_block: number[]; standard_error_of_totals: number } {
  // An even number of phases a block, so that each holds as many of either state.
  const size = Math.max(2, 2 * Math.round(10_000 / phaseMs / 2));
  const ratios: number[] = [];
  for (let start = 0; start + size <= phases.length; start += size) {
    const block = phases.slice(start, start + size);
    ratios.push(total(block, true, field) / total(block, false, field));
  }
  if (ratios.length < 2) return { totals_by_block: ratios.map(round3), standard_error_of_totals: Number.NaN };
  const mean = ratios.reduce((sum, ratio) => sum + ratio, 0) / ratios.length;
  const variance = ratios.reduce((sum, ratio) => sum + (ratio - mean) ** 2, 0) / (ratios.length - 1);
  return { totals_by_block: ratios.map(round3), standard_error_of_totals: round3(Math.sqrt(variance / ratios.length)) };
}

const work = mkdtempSync(join(tmpdir(), "sluice-switch-"));
const lifted = { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
const children: Bun.Subprocess[] = [];
try {
  const { environment, key } = await prepareSourceBench(work, children, lifted, source);
  const port = freePort();
  const out = join(work, "phases.json");
  const server = Bun.spawn([bun, "--preload", join(import.meta.dir, "switch-preload.ts"), join(source, "src/main.ts"), "serve"], {
    env: {
      // As `serve` restarts itself with: with the fetch limit set here it does not restart, so the preload stays.
      ...startEnvironment({ ...lifted, ...environment }),
      SLUICE_PORT: String(port),
      SWITCH_PHASE_MS: String(phaseMs),
      SWITCH_OUT: out,
    },
    stdout: "ignore",
    stderr: "inherit",
  });
  children.push(server);
  const url = `http://127.0.0.1:${port}/v1/chat/completions`;
  await waitForFirstAnswer(url, key);
  const body = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "hi" }] });
  const script = await writeWrkScript(join(work, "post.lua"), body, { Authorization: `Bearer ${key}` });
  // The JIT settles after about 10 s of load (bench/HISTORY.md); phases before the measured load are left out.
  await runWrk(url, script, { threads: 2, connections: 64, seconds: warmupSeconds });
  // The file is written every 1,013 ms: each read waits for one written after the load before it.
  await Bun.sleep(1100);
  const skipped = (JSON.parse(readFileSync(out, "utf8")) as SwitchPhase[]).length;
  if (rate === undefined) {
    const result = await runWrk(url, script, { threads: 2, connections: 64, seconds });
    if (result.non2xx > 0) throw new Error(`${result.non2xx} answers were not 200`);
  } else {
    const bodyFile = join(work, "body.json");
    await Bun.write(bodyFile, body);
    const result = await runLoad("open", url, bodyFile, { Authorization: `Bearer ${key}` }, rate, seconds);
    if (result.errors > 0) throw new Error(`${result.errors} answers were not 200`);
  }
  await Bun.sleep(1100);
  // The phases the load started and ended in were loaded only in part.
  const phases = (JSON.parse(readFileSync(out, "utf8")) as SwitchPhase[])
    .slice(skipped)
    .filter((phase) => phase.requests > 0)
    .slice(1, -1);
  if (phases.length < 4) throw new Error(`only ${phases.length} phases measured: run longer`);
  const report = {
    source,
    seconds,
    phase_ms: phaseMs,
    load: rate === undefined ? "wrk -t2 -c64" : `open loop at ${rate} requests a second`,
    pairs: pairRatios(phases, "requests").length,
    // on ÷ off, per request.
    process_cpu: {
      ...summary(pairRatios(phases, "processMicroseconds")),
      totals: round3(total(phases, true, "processMicroseconds") / total(phases, false, "processMicroseconds")),
      ...byBlocks(phases, "processMicroseconds"),
    },
    event_loop_cpu: {
      ...summary(pairRatios(phases, "eventLoopMicroseconds")),
      totals: round3(total(phases, true, "eventLoopMicroseconds") / total(phases, false, "eventLoopMicroseconds")),
      ...byBlocks(phases, "eventLoopMicroseconds"),
    },
    requests: summary(pairRatios(phases, "requests")),
    microseconds_per_request: {
      on: { process: round1(total(phases, true, "processMicroseconds")), event_loop: round1(total(phases, true, "eventLoopMicroseconds")) },
      off: { process: round1(total(phases, false, "processMicroseconds")), event_loop: round1(total(phases, false, "eventLoopMicroseconds")) },
    },
  };
  console.log(JSON.stringify(report, null, 2));
} finally {
  for (const child of children) child.kill();
  await Promise.all(children.map((child) => child.exited));
  rmSync(work, { recursive: true, force: true });
}
