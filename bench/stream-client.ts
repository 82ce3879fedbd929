// Shared by the benchmark runners: bench/streams.ts run as its own process, and the peak memory it is judged by.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { listenOverflows } from "../src/http/listen-backlog";
import { cpuMicroseconds } from "./process-cpu";

/** What bench/streams.ts prints. */
export interface StreamRunResult {
  concurrent: number;
  completed: number;
  ttft_p50_ms: number;
  ttft_p99_ms: number;
  seconds: number;
}

/** What bench/streams.ts opens: each stream's address, body and headers, the tokens it must bring, its environment. */
export interface StreamTarget {
  url: string;
  bodyFile: string;
  headers: Record<string, string>;
  tokens: number;
  environment: Record<string, string | undefined>;
}

/** Opens `count` concurrent streams at `target` through bench/streams.ts (its own process). */
export async function runStreams(target: StreamTarget, count: number): Promise<StreamRunResult> {
  const headers = JSON.stringify({ ...target.headers, "content-type": "application/json" });
  const child = Bun.spawn([process.execPath, join(import.meta.dir, "streams.ts"), target.url, target.bodyFile, headers, String(count), String(target.tokens)], {
    env: target.environment,
    stdout: "pipe",
  });
  const output = await new Response(child.stdout).text();
  await child.exited;
  return JSON.parse(output) as StreamRunResult;
}

/** Resident memory of a process now and at its peak (VmHWM, reset by writing 5 to /proc/PID/clear_refs), in MB. */
export function memoryOf(pid: number): { rssMb: number; peakMb: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const field = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) / 1024;
  return { rssMb: field("VmRSS"), peakMb: field("VmHWM") };
}

/** One measured round of streams, with what the server spent on it. */
export interface StreamRound extends StreamRunResult {
  /** The server's peak resident memory over the measured streams alone (warm-up excluded), MB. */
  peakMb: number;
  /** The server's CPU time (every thread) per relayed event: each stream's tokens, its role chunk and its finish. */
  cpuMicrosecondsPerEvent: number;
  /**
   * Connections dropped at a full accept queue during the measured streams, the server's or the fake upstream's:
   * each waits a second for the retransmit, so a few dozen make a round's TTFT p99.
   */
  listenOverflows: number;
}

/**
 * `make bench`'s stream round against a freshly started server (`pid`): a warm-up of a tenth of the streams, the
 * peak reset, then `count` concurrent streams.
 */
export async function measureStreamRound(pid: number, target: StreamTarget, count: number): Promise<StreamRound> {
  await runStreams(target, Math.max(1, Math.round(count / 10)));
  // Writing 5 to clear_refs resets VmHWM: the peak belongs to the measured streams, not to start-up or warm-up.
  writeFileSync(`/proc/${pid}/clear_refs`, "5");
  const before = cpuMicroseconds(pid);
  const overflowsBefore = listenOverflows();
  const result = await runStreams(target, count);
  const after = cpuMicroseconds(pid);
  return {
    ...result,
    peakMb: memoryOf(pid).peakMb,
    cpuMicrosecondsPerEvent: (after.process - before.process) / (count * (target.tokens + 2)),
    listenOverflows: listenOverflows() - overflowsBefore,
  };
}
