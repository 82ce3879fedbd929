// How every runner loads a server under test: wrk for closed loops, bench/load.ts (in a process of its own) for open
// loops and wherever wrk is missing.
import { join } from "node:path";

/** What bench/load.ts prints. */
export interface LoadResult {
  requests: number;
  errors: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
}

/** What one wrk run measured. */
export interface WrkResult {
  rps: number;
  requests: number;
  non2xx: number;
}

/**
 * bench/load.ts against `url`: `amount` is the rate (open) or the connections (closed). With `samplesFile`, each
 * answered request's [scheduled send time, latency] in ms is written there as JSON.
 */
export async function runLoad(
  mode: "open" | "closed",
  url: string,
  bodyFile: string,
  headers: Record<string, string>,
  amount: number,
  seconds: number,
  samplesFile?: string,
): Promise<LoadResult> {
  const child = Bun.spawn(
    [
      process.execPath,
      join(import.meta.dir, "load.ts"),
      mode,
      url,
      bodyFile,
      JSON.stringify({ ...headers, "content-type": "application/json" }),
      String(amount),
      String(seconds),
    ],
    // Its own fetch pool, without Bun's default limit of 256 requests at once.
    { env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535", LOAD_SAMPLES_FILE: samplesFile }, stdout: "pipe" },
  );
  const output = await new Response(child.stdout).text();
  await child.exited;
  return JSON.parse(output) as LoadResult;
}

/** Writes a wrk script at `path` that posts `body` as JSON with `headers`. */
export async function writeWrkScript(path: string, body: string, headers: Record<string, string>): Promise<string> {
  const headerLines = Object.entries({ ...headers, "Content-Type": "application/json" })
    .map(([name, value]) => `wrk.headers["${name}"] = ${JSON.stringify(value)}`)
    .join("\n");
  await Bun.write(path, `wrk.method = "POST"\nwrk.body = ${JSON.stringify(body)}\n${headerLines}\n`);
  return path;
}

/** One wrk run of `script` against `url`. */
export async function runWrk(url: string, script: string, load: { threads: number; connections: number; seconds: number }): Promise<WrkResult> {
  const child = Bun.spawn(["wrk", `-t${load.threads}`, `-c${load.connections}`, `-d${load.seconds}s`, "-s", script, url], { stdout: "pipe" });
  const output = await new Response(child.stdout).text();
  await child.exited;
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(output)?.[1] ?? Number.NaN),
    requests: Number(/(\d+) requests in/.exec(output)?.[1] ?? Number.NaN),
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(output)?.[1] ?? 0),
  };
}
