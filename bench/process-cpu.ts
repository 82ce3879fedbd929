// CPU time of processes from /proc, for benchmarks that report where a request's CPU goes.
import { readFileSync, readdirSync } from "node:fs";

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

/**
 * CPU time so far in microseconds of each of a process's threads, summed by name: "event loop" for the main thread,
 * "worker" for other threads named as the process is (Web Workers: Sluice's ledger writer), the kernel's name
 * otherwise (HTTP Client, HeapHelper, JITWorker...). Threads that ended are only in `cpuMicroseconds`.
 */
export function threadMicroseconds(pid: number): Record<string, number> {
  const totals: Record<string, number> = {};
  const processName = readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      const comm = readFileSync(`/proc/${pid}/task/${task}/comm`, "utf8").trim();
      const name = task === String(pid) ? "event loop" : comm === processName ? "worker" : comm;
      totals[name] = (totals[name] ?? 0) + statMicroseconds(`/proc/${pid}/task/${task}/stat`);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return totals;
}
