// Shared by the benchmark runners: a Sluice data directory configured as `make bench` measures it.
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports";

/**
 * A Sluice data directory: config, database, one organization and key, through `binary`'s own CLI. Every product
 * check is on: quotas and a concurrency cap in the plan (too large to refuse anything), the default red-line rules.
 */
export async function prepareSluice(
  binary: string,
  directory: string,
  upstreamPort: number,
): Promise<{ environment: Record<string, string | undefined>; key: string }> {
  const config = join(directory, "sluice.toml");
  await Bun.write(
    config,
    `[[models]]\nid = "bench"\nbackend = "openai"\nbase_url = "http://127.0.0.1:${upstreamPort}/v1"\nupstream_model = "bench-upstream"\n\n` +
      `[[plans]]\nid = "default"\nmodels = ["*"]\ntokens_per_5h = 1000000000000\ntokens_per_month = 1000000000000\nmax_concurrency = 100000\n`,
  );
  const environment = { PATH: process.env.PATH, HOME: process.env.HOME, SLUICE_DB: join(directory, "sluice.db"), SLUICE_CONFIG: config };
  return { environment, key: createOrganizationKey(binary, environment, "bench") };
}

/**
 * Writes into `directory` a wrapper that runs Sluice's CLI from source (this checkout's, or the one at `root`), for
 * runners that measure the source rather than an executable (prepareSluice runs `BINARY org create` and
 * `BINARY key create`); returns its path.
 */
export function writeSourceCli(directory: string, root = join(import.meta.dir, "..")): string {
  const cli = join(directory, "sluice");
  writeFileSync(cli, `#!/bin/sh\nexec "${process.execPath}" "${join(root, "src/main.ts")}" "$@"\n`);
  chmodSync(cli, 0o755);
  return cli;
}

/**
 * The fake upstream and a data directory (under `work`) for runners that measure Sluice from source, this checkout's
 * or the one at `root`. The upstream's process joins `children`, for the runner to stop.
 */
export async function prepareSourceBench(
  work: string,
  children: Bun.Subprocess[],
  environment: Record<string, string | undefined>,
  root?: string,
): Promise<{ upstreamPort: number; environment: Record<string, string | undefined>; key: string }> {
  const upstreamPort = freePort();
  children.push(
    Bun.spawn([process.execPath, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort)], { env: environment, stdout: "ignore", stderr: "ignore" }),
  );
  await waitForPort(upstreamPort);
  const directory = join(work, "data");
  mkdirSync(directory);
  return { upstreamPort, ...(await prepareSluice(writeSourceCli(work, root), directory, upstreamPort)) };
}

const firstQuestion = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "What is 2 + 2?" }] });

/**
 * Asks a starting Sluice (`url`, its chat route) until an answer comes back 200: how the benchmarks time a start.
 * Gives up after `timeoutMs`, so that a server that never answers fails the run instead of hanging it.
 */
export async function waitForFirstAnswer(url: string, key: string, timeoutMs = 30_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let last = "no connection";
  while (performance.now() < deadline) {
    const answer = await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: firstQuestion,
    }).catch(() => undefined);
    if (answer) {
      await answer.arrayBuffer();
      if (answer.status === 200) return;
      last = `status ${answer.status}`;
    }
    await Bun.sleep(2);
  }
  throw new Error(`${url} gave no answer within ${timeoutMs} ms (last: ${last})`);
}

/** Creates an organization through `binary`'s CLI and returns a new key of it (the last line the CLI prints). */
export function createOrganizationKey(binary: string, environment: Record<string, string | undefined>, organization: string): string {
  Bun.spawnSync([binary, "org", "create", organization], { env: environment });
  return Bun.spawnSync([binary, "key", "create", "--org", organization], { env: environment, stdout: "pipe", stderr: "ignore" })
    .stdout.toString()
    .trim()
    .split("\n")
    .at(-1) as string;
}

/**
 * Measures several executables in turn, `rounds` times over, in one run: each from a copy of its own with its own
 * data directory, beside one fake upstream. Returns each executable's results, in the order given. A copy, because
 * the kernel maps the pages around each one a process touches when they are in the page cache: an executable partly
 * evicted from the cache shows less file-backed RSS than a fresh one (3.5 MB less, for the same build, in one run).
 */
export async function measureInTurn<Result>(
  originals: string[],
  rounds: number,
  measure: (executable: string, environment: Record<string, string | undefined>, key: string) => Promise<Result>,
): Promise<Result[][]> {
  const work = mkdtempSync(join(tmpdir(), "sluice-executables-"));
  const upstreamPort = freePort();
  const upstream = Bun.spawn([process.execPath, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort)], { stdout: "ignore", stderr: "ignore" });
  try {
    const executables = originals.map((original, index) => {
      const copy = join(work, `executable-${index}`);
      copyFileSync(original, copy);
      return copy;
    });
    await waitForPort(upstreamPort);
    const prepared = await Promise.all(
      executables.map((executable, index) => {
        const directory = join(work, String(index));
        mkdirSync(directory);
        return prepareSluice(executable, directory, upstreamPort);
      }),
    );
    const results: Result[][] = executables.map(() => []);
    for (let round = 0; round < rounds; round++) {
      for (const [index, executable] of executables.entries()) {
        const { environment, key } = prepared[index] as (typeof prepared)[number];
        results[index]?.push(await measure(executable, environment, key));
      }
    }
    return results;
  } finally {
    upstream.kill();
    rmSync(work, { recursive: true, force: true });
  }
}
