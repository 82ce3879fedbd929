// Runs `bun src/main.ts serve` as a child process over a given database, for tests that kill or signal it.
import { join } from "node:path";
import { repositoryRoot, temporaryDirectory } from "../helpers";

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
 * Runs `body` with the environment of commands over a fresh database and configuration file: the models named, each
 * on the upstream given, and one plan of all of them; organization `acme` exists. Both are removed after.
 */
export async function withCliOrganization(
  upstreamUrl: string,
  modelIds: string[],
  body: (environment: Record<string, string | undefined>) => void | Promise<void>,
): Promise<void> {
  const directory = temporaryDirectory();
  try {
    const configPath = join(directory.path, "sluice.toml");
    const models = modelIds.map((id) => `[[models]]\nid = "${id}"\nbackend = "openai"\nbase_url = "${upstreamUrl}"\n`).join("\n");
    await Bun.write(configPath, `${models}\n[[plans]]\nid = "default"\nmodels = ["*"]\n`);
    const environment = sluiceEnvironment(join(directory.path, "sluice.db"), configPath);
    const created = sluiceCommand(environment, "org", "create", "acme");
    if (created.code !== 0) throw new Error(`org create failed: ${created.stderr}`);
    await body(environment);
  } finally {
    directory.remove();
  }
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
