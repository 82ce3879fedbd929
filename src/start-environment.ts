// Settings the runtime reads only when the process starts, from its environment, so `serve` restarts itself in place
// (execve: same pid, for systemd and signals) with them set, before anything else is loaded.
//
// - BUN_CONFIG_MAX_HTTP_REQUESTS: Bun's fetch runs at most 256 requests at once without it. Sluice's upstream
//   concurrency is the operator's choice (the config), not that hidden default. It also marks the restart: a process
//   that has it set does not restart again.
// - MIMALLOC_PURGE_HOLES_MIN_INTERVAL: Bun's allocator (mimalloc 3.5) has a scavenger thread that walks each
//   thread's pages for free holes to return to the system, at most every 100 ms by default. On a small machine those
//   walks compete with the event loop for a CPU: at 1,000 requests a second, once a second instead of ten times cut
//   the p99 by a paired 0.6-1.0 ms (two runs of 8 rounds), with the same idle RSS and the same peak over 2,000 streams
//   (bench/HISTORY.md). A value the operator set in the service's environment is kept.
// - BUN_JSC_useGenerationalGC=0, on SQLite only: every collection a full one. With thousands of streams open, the
//   young collections promote each stream's chunks, reads and promises in flight into an old generation that only a
//   rare full collection empties; without generations 2,000 streams of 200 tokens peaked at 167-198 MB against
//   240-281 (paired, 6 rounds), 1,000-token streams at 212-240 against 315-462. It costs the tail: at 1,000 whole
//   answers a second the p99 moved by paired medians of -0.06 to +1.15 ms in five runs (+0.68 on average), because
//   every collection then marks the whole heap, mostly code (bench/HISTORY.md, "Without generations on SQLite").
//   Shared mode keeps generations: there, with the database's and Redis's clients in the heap, a relayed event cost
//   a quarter more CPU without them and the streams' first tokens came later (paired). A value the operator set is
//   kept.
// - BUN_JSC_largeHeapSize=134217728 (128 MB), on SQLite only: the heap size below which JavaScriptCore starts no
//   collection for what was allocated since the last one (8 MB by default); Bun's own timer still collects when the
//   heap's objects more than double, and once a second while they change. Over 7 runs of 2,000 streams opened at
//   once (43 alternated rounds, floors of 128 MB-1 GB) the TTFT p99 was lower in 29 rounds, paired medians ×0.76 to
//   ×1.14 (×0.90 over the longest run, 12 rounds, its p50 lower in 10 of them), at the same peak; whole answers and
//   the tail at 1,000 a second did not move. What it costs: large strings and buffers (request bodies) pile up to
//   about the floor between collections, 100 KB bodies from 64 connections held 196-204 MB resident against 78-95
//   (bench/HISTORY.md, "A heap floor of 128 MB"). A value the operator set is kept.

import { isPostgresUrl } from "./storage/mode";

const fetchLimitVariable = "BUN_CONFIG_MAX_HTTP_REQUESTS";
const maxHttpRequests = "65535";
/** Runtime settings the restart adds unless the operator set them. */
const runtimeDefaults: Readonly<Record<string, string>> = { MIMALLOC_PURGE_HOLES_MIN_INTERVAL: "1000" };
/** Added as well when the server runs on SQLite, one instance (bench/run.ts starts a reference "as Sluice runs" with them). */
export const sqliteDefaults: Readonly<Record<string, string>> = { BUN_JSC_useGenerationalGC: "0", BUN_JSC_largeHeapSize: String(128 * 1024 * 1024) };

/** The arguments after the program: a compiled executable's argv[1] is its embedded entry, not a user argument. */
function userArguments(): string[] {
  return process.argv[1]?.startsWith("/$bunfs/") ? process.argv.slice(2) : process.argv.slice(1);
}

/** The environment `serve` restarts with: the fetch limit lifted, and each default the operator left unset. */
export function startEnvironment(environment: Record<string, string | undefined>): Record<string, string | undefined> {
  const defaults = isPostgresUrl(environment.SLUICE_DB) ? runtimeDefaults : { ...runtimeDefaults, ...sqliteDefaults };
  // The fetch limit last: an empty value in the environment must not survive the restart, or it would restart again.
  return { ...defaults, ...environment, [fetchLimitVariable]: maxHttpRequests };
}

/**
 * Replaces this process (same pid) with one started with the start environment, unless the fetch limit is already
 * set: by the restart, or by an operator who then sets the other variables as they see fit.
 */
export function restartWithStartEnvironment(): void {
  if (process.env[fetchLimitVariable]) return;
  if (!process.execve) return; // older runtimes: the operator sets the variables (see README)
  process.execve(process.execPath, [process.execPath, ...userArguments()], startEnvironment(process.env));
}
