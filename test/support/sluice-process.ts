// Runs `bun src/main.ts serve` as a child process over a given database, for tests that kill or signal it.
import { join } from "node:path";
import { repositoryRoot } from "../helpers";

export interface SluiceProcess {
  url: string;
  child: Bun.Subprocess<"ignore", "ignore", "pipe">;
}

export function sluiceEnvironment(databasePath: string, configPath: string, extra: Record<string, string> = {}): Record<string, string | undefined> {
  return { ...process.env, SLUICE_DB: databasePath, SLUICE_CONFIG: configPath, SLUICE_PORT: "0", SLUICE_LOG_LEVEL: "warn", ...extra };
}

export function sluiceCommand(environment: Record<string, string | undefined>, ...args: string[]): { code: number; stdout: string; stderr: string } {
  const result = Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), ...args], { env: environment, stdout: "pipe", stderr: "pipe" });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}

/**
 * Starts the server (`bun src/main.ts serve`, or another command such as `dist/sluice serve`) and waits for its
 * "listening" line, which names its URL; fails if the process exits first.
 */
export async function startSluiceProcess(
  environment: Record<string, string | undefined>,
  command: string[] = [process.execPath, join(repositoryRoot, "src/main.ts"), "serve"],
  cwd?: string,
): Promise<SluiceProcess> {
  // stdout (the request log) is not read here: a pipe nobody drains would fill up and hold the server back.
  const child = Bun.spawn(command, { env: environment, cwd, stdout: "ignore", stderr: "pipe" });
  const reader = child.stderr.getReader();
  let log = "";
  while (!log.includes("listening")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`sluice exited: ${log}`);
    log += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const line = log.split("\n").find((candidate) => candidate.includes("listening")) as string;
  return { url: (JSON.parse(line) as { url: string }).url, child };
}

/**
 * Sends SIGHUP (read the configuration again) and waits for the server's line saying how it went: "configuration
 * reloaded" or "configuration not reloaded". Returns that line, parsed.
 */
export async function reloadConfiguration(server: SluiceProcess): Promise<{ level: string; message: string; error?: string; changes?: unknown }> {
  const reader = server.child.stderr.getReader();
  server.child.kill("SIGHUP");
  let log = "";
  try {
    for (;;) {
      const line = log.split("\n").find((candidate) => candidate.includes('"configuration '));
      if (line && log.slice(log.indexOf(line) + line.length).startsWith("\n")) return JSON.parse(line);
      const { value, done } = await reader.read();
      if (done) throw new Error(`sluice exited: ${log}`);
      log += new TextDecoder().decode(value);
    }
  } finally {
    reader.releaseLock();
  }
}
