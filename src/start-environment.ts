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
//   (bench/README.md). A value the operator set in the service's environment is kept.

const fetchLimitVariable = "BUN_CONFIG_MAX_HTTP_REQUESTS";
const maxHttpRequests = "65535";
/** Allocator settings the restart adds unless the operator set them. */
const allocatorDefaults: Readonly<Record<string, string>> = { MIMALLOC_PURGE_HOLES_MIN_INTERVAL: "1000" };

/** The arguments after the program: a compiled executable's argv[1] is its embedded entry, not a user argument. */
function userArguments(): string[] {
  return process.argv[1]?.startsWith("/$bunfs/") ? process.argv.slice(2) : process.argv.slice(1);
}

/**
 * Replaces this process (same pid) with one started with the fetch limit lifted and the allocator's defaults, unless
 * the fetch limit is already set: by the restart, or by an operator who then sets the allocator as they see fit.
 */
export function restartWithStartEnvironment(): void {
  if (process.env[fetchLimitVariable]) return;
  if (!process.execve) return; // older runtimes: the operator sets the variables (see README)
  // The fetch limit last: an empty value in the environment must not survive the restart, or it would restart again.
  const environment = { ...allocatorDefaults, ...process.env, [fetchLimitVariable]: maxHttpRequests };
  process.execve(process.execPath, [process.execPath, ...userArguments()], environment);
}
