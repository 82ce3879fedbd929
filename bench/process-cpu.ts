// CPU time of processes from /proc, for benchmarks that report where a request's CPU goes.
import { readFileSync, readdirSync } from "node:fs";
import { median, round1 } from "./statistics";

/** utime + stime of one /proc stat file, in microseconds (USER_HZ: 100 ticks a second on Linux). */
function statMicroseconds(path: string): number {
  const stat = readFileSync(path, "utf8");
  // Fields 14 and 15 of proc(5): 12 and 13 after the process name, which may hold spaces.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(rest[11]) + Number(rest[12])) * 10_000;
}

/** CPU time so far in microseconds: of the process's main thread (the event loop) and of all its threads. */
export function cpuMicroseconds(pid: number): { main: number; process: number } {
  return { main: statMicroseconds(`/proc/${pid}/task/${pid}/stat`), process: statMicroseconds(`/proc/${pid}/stat`) };
}

/** CPU time so far in microseconds of every process whose name starts with `name` (all of PostgreSQL's backends). */
export function cpuOfProcessesNamed(name: string): number {
  let total = 0;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").startsWith(name)) total += statMicroseconds(`/proc/${entry}/stat`);
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return total;
}

/** One thread's CPU time so far: its name ("event loop" for the main thread, the kernel's name otherwise). */
export interface ThreadTime {
  name: string;
  microseconds: number;
}

/** CPU time so far of each of a process's threads, by thread id. */
export function threadTimes(pid: number): Map<string, ThreadTime> {
  const times = new Map<string, ThreadTime>();
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      const name = task === String(pid) ? "event loop" : readFileSync(`/proc/${pid}/task/${task}/comm`, "utf8").trim();
      times.set(task, { name, microseconds: statMicroseconds(`/proc/${pid}/task/${task}/stat`) });
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return times;
}

/**
 * CPU time spent between two `threadTimes` of one process, summed by thread name (HTTP Client, Worker, HeapHelper,
 * JITWorker...). Each thread is compared with itself, so a thread that started meanwhile counts from zero; one that
 * ended meanwhile is missing (only the process's total in `cpuMicroseconds` keeps it).
 */
export function threadMicrosecondsBetween(before: Map<string, ThreadTime>, after: Map<string, ThreadTime>): Record<string, number> {
  const spent: Record<string, number> = {};
  for (const [task, { name, microseconds }] of after) spent[name] = (spent[name] ?? 0) + microseconds - (before.get(task)?.microseconds ?? 0);
  return spent;
}

/** A process's CPU so far: the whole process (threads that ended included) and each thread. */
export interface CpuSnapshot {
  process: number;
  threads: Map<string, ThreadTime>;
}

export function cpuSnapshot(pid: number): CpuSnapshot {
  return { process: cpuMicroseconds(pid).process, threads: threadTimes(pid) };
}

/** CPU a request, µs, of a load of `requests` between two snapshots: the whole process's, and each thread's by name. */
export function cpuPerRequest(before: CpuSnapshot, after: CpuSnapshot, requests: number): { process: number; threads: Record<string, number> } {
  const threads: Record<string, number> = {};
  for (const [name, microseconds] of Object.entries(threadMicrosecondsBetween(before.threads, after.threads))) threads[name] = microseconds / requests;
  return { process: (after.process - before.process) / requests, threads };
}

/**
 * Each thread's median over rounds of `cpuPerRequest` figures (0 in a round it was missing from), to 0.1 µs. Threads
 * with next to nothing (Bun's idle pool, the bundler's) are left out: they would only lengthen a report.
 */
export function medianByThread(rounds: Record<string, number>[]): Record<string, number> {
  const names = new Set(rounds.flatMap((round) => Object.keys(round)));
  const medians: Record<string, number> = {};
  for (const name of names) {
    const microseconds = round1(median(rounds.map((round) => round[name] ?? 0)));
    if (microseconds > 0) medians[name] = microseconds;
  }
  return medians;
}
