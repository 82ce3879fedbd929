// Every judge's run (`bun bench/run.ts`) recorded in git, against the targets, beside the full reference of the same
// run: each committed version of bench/results/latest.json is one run (its `date`; bench/shared.ts rewrites the file
// with the same date, and smoke runs are left out). So the table of where the targets stand is worked out from the
// runs themselves rather than kept by hand.
//
//   bun bench/runs.ts [--since YYYY-MM-DD] [--json]

import { parseArgs } from "node:util";
import { round3 } from "./statistics";

/** The figures of one judge's run that the targets are read on, Sluice's and the full reference's. */
export interface RunFigures {
  date: string;
  /** The commit that recorded the run (its message names the code measured). */
  commit: string;
  sluiceVsBare: number;
  referenceVsBare: number | null;
  sluiceVsPortkey: number;
  p50OverBareMs: number;
  p99OverBareMs: number;
  referenceP99OverBareMs: number | null;
  streamsComplete: boolean;
  peakMb: number;
  ttftVsBare: number;
  /** The full reference run as Sluice runs on SQLite (no generations, the heap floor) where the run has it. */
  referenceTtftVsBare: number | null;
  scale: number;
  startupMs: number;
  idleRssMb: number;
}

/** One target: its name, and whether a run's figure for Sluice and for the full reference meets it. */
interface Target {
  name: string;
  sluice: (run: RunFigures) => number;
  reference?: (run: RunFigures) => number | null;
  met: (value: number) => boolean;
}

export const targets: Target[] = [
  { name: "whole answers ÷ bare ≥ 0.8", sluice: (run) => run.sluiceVsBare, reference: (run) => run.referenceVsBare, met: (value) => value >= 0.8 },
  { name: "÷ Portkey ≥ 3", sluice: (run) => run.sluiceVsPortkey, met: (value) => value >= 3 },
  { name: "p50 at 1,000/s over bare ≤ +0.3 ms", sluice: (run) => run.p50OverBareMs, met: (value) => value <= 0.3 },
  {
    name: "p99 at 1,000/s over bare ≤ +1 ms",
    sluice: (run) => run.p99OverBareMs,
    reference: (run) => run.referenceP99OverBareMs,
    met: (value) => value <= 1,
  },
  {
    name: "2,000 streams complete, peak < 200 MB",
    sluice: (run) => (run.streamsComplete ? run.peakMb : Number.POSITIVE_INFINITY),
    met: (value) => value < 200,
  },
  { name: "TTFT p99 ÷ bare ≤ 1.3", sluice: (run) => run.ttftVsBare, reference: (run) => run.referenceTtftVsBare, met: (value) => value <= 1.3 },
  { name: "scale ≥ 0.9", sluice: (run) => run.scale, met: (value) => value >= 0.9 },
  { name: "start-up < 100 ms", sluice: (run) => run.startupMs, met: (value) => value < 100 },
  { name: "idle RSS < 60 MB", sluice: (run) => run.idleRssMb, met: (value) => value < 60 },
];

type Section = Record<string, number | undefined>;

/** A run's figures from its latest.json, or undefined for a smoke run or a file without every phase. */
export function figuresOf(latest: Record<string, unknown>, commit: string): RunFigures | undefined {
  if (latest.smoke === true || typeof latest.date !== "string") return undefined;
  const nonstream = latest.nonstream as Section | undefined;
  const latency = latest.latency as Section | undefined;
  const streams = latest.streams as Section | undefined;
  const scale = latest.scale as Section | undefined;
  const binary = latest.binary as Section | undefined;
  if (!nonstream || !latency || !streams || !scale || !binary) return undefined;
  const number = (section: Section, key: string) => section[key] ?? Number.NaN;
  const optional = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? null : value);
  const bareTtft = number(streams, "bare_ttft_p99_ms");
  const referenceTtft = streams.full_reference_no_generations_ttft_p99_ms ?? streams.full_reference_ttft_p99_ms;
  const referenceP99 = latency.full_reference_p99_ms;
  return {
    date: latest.date,
    commit,
    sluiceVsBare: number(nonstream, "sluice_vs_bare"),
    referenceVsBare: optional(nonstream.full_reference_vs_bare),
    sluiceVsPortkey: number(nonstream, "sluice_vs_portkey"),
    p50OverBareMs: number(latency, "sluice_p50_ms") - number(latency, "bare_p50_ms"),
    p99OverBareMs: number(latency, "sluice_p99_ms") - number(latency, "bare_p99_ms"),
    referenceP99OverBareMs: referenceP99 === undefined ? null : referenceP99 - number(latency, "bare_p99_ms"),
    streamsComplete: streams.completed === streams.concurrent,
    peakMb: number(streams, "sluice_peak_rss_mb"),
    ttftVsBare: number(streams, "sluice_ttft_p99_ms") / bareTtft,
    referenceTtftVsBare: referenceTtft === undefined ? null : referenceTtft / bareTtft,
    scale: number(scale, "rps_full_vs_empty"),
    startupMs: number(binary, "startup_ms"),
    idleRssMb: number(binary, "idle_rss_mb"),
  };
}

/** For each target, in how many runs Sluice met it and in how many (of those that ran it) the full reference did. */
export function tally(runs: RunFigures[]): { target: string; sluice: number; reference: number | null; referenceRuns: number; runs: number }[] {
  return targets.map((target) => {
    const referenceValues = target.reference ? runs.map(target.reference).filter((value): value is number => value !== null) : [];
    return {
      target: target.name,
      sluice: runs.filter((run) => target.met(target.sluice(run))).length,
      reference: target.reference ? referenceValues.filter(target.met).length : null,
      referenceRuns: referenceValues.length,
      runs: runs.length,
    };
  });
}

/** Every judge's run recorded in the repository's history of latest.json, oldest first. */
async function recordedRuns(): Promise<RunFigures[]> {
  const log = Bun.spawnSync(["git", "log", "--format=%h", "--", "bench/results/latest.json"], { cwd: `${import.meta.dir}/..` });
  if (log.exitCode !== 0) throw new Error(`git log failed: ${log.stderr.toString().trim()}`);
  const byDate = new Map<string, RunFigures>();
  // Newest first: the last commit seen with a date is the one that recorded that run.
  for (const commit of log.stdout.toString().split("\n").filter(Boolean)) {
    const show = Bun.spawnSync(["git", "show", `${commit}:bench/results/latest.json`], { cwd: `${import.meta.dir}/..` });
    if (show.exitCode !== 0) continue;
    let latest: Record<string, unknown>;
    try {
      latest = JSON.parse(show.stdout.toString()) as Record<string, unknown>;
    } catch {
      continue;
    }
    const figures = figuresOf(latest, commit);
    if (figures) byDate.set(figures.date, figures);
  }
  return [...byDate.values()].sort((left, right) => left.date.localeCompare(right.date));
}

function cell(value: number | null, digits = 2): string {
  return value === null || Number.isNaN(value) ? "-" : value.toFixed(digits);
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { since: { type: "string", default: "" }, json: { type: "boolean", default: false } } });
  const since = values.since;
  const runs = (await recordedRuns()).filter((run) => run.date >= since);
  if (values.json) {
    console.log(JSON.stringify({ runs, tally: tally(runs) }, null, 2));
  } else {
    console.log(
      "| run (date, commit that recorded it) | whole answers ÷ bare | p99 over bare, ms | TTFT p99 ÷ bare | ÷ Portkey | p50 over bare | peak MB | scale | start-up ms | idle MB |",
    );
    console.log("|---|---|---|---|---|---|---|---|---|---|");
    for (const run of runs) {
      console.log(
        `| ${run.date.slice(0, 16).replace("T", " ")}, ${run.commit} | ${cell(run.sluiceVsBare)} / ${cell(run.referenceVsBare)} | ` +
          `+${cell(run.p99OverBareMs)} / +${cell(run.referenceP99OverBareMs)} | ${cell(run.ttftVsBare)} / ${cell(run.referenceTtftVsBare)} | ` +
          `${cell(run.sluiceVsPortkey)} | +${cell(run.p50OverBareMs)} | ${run.streamsComplete ? cell(run.peakMb, 0) : "incomplete"} | ${cell(run.scale)} | ` +
          `${cell(run.startupMs, 0)} | ${cell(run.idleRssMb, 0)} |`,
      );
    }
    console.log(`\nSluice / full reference in each cell where both are given. Met, of ${runs.length} runs:`);
    for (const line of tally(runs)) {
      const reference = line.reference === null ? "" : `; full reference ${line.reference} of ${line.referenceRuns}`;
      console.log(`- ${line.target}: Sluice ${line.sluice}${reference}`);
    }
    const ratios = runs.filter((run) => run.referenceVsBare !== null).map((run) => run.sluiceVsBare / (run.referenceVsBare as number));
    if (ratios.length > 0) console.log(`- Sluice ÷ full reference, whole answers: ${round3(Math.min(...ratios))} to ${round3(Math.max(...ratios))}`);
  }
}
