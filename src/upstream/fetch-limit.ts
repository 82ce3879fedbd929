// Bun's fetch runs at most 256 requests at once unless BUN_CONFIG_MAX_HTTP_REQUESTS is set, and it reads the
// variable only when the process starts. Sluice's upstream concurrency is the operator's choice (the config),
// not that hidden default, so `serve` restarts itself in place with the limit lifted.
export const maxHttpRequests = 65_535;
const variable = "BUN_CONFIG_MAX_HTTP_REQUESTS";

/** The arguments after the program: a compiled executable's argv[1] is its embedded entry, not a user argument. */
function userArguments(): string[] {
  return process.argv[1]?.startsWith("/$bunfs/") ? process.argv.slice(2) : process.argv.slice(1);
}

/** Replaces this process (same pid, for systemd and signals) with one that has the limit lifted, unless it has. */
export function liftFetchLimit(): void {
  if (process.env[variable]) return;
  if (!process.execve) return; // older runtimes: the operator sets the variable (see README)
  process.execve(process.execPath, [process.execPath, ...userArguments()], { ...process.env, [variable]: String(maxHttpRequests) });
}
