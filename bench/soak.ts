// `make soak`: ten minutes of mixed traffic against dist/sluice (whole answers, streams, streams the client
// cancels at random points, upstream failures), sampling memory, in-flight requests and open files.
// Usage: bun bench/soak.ts [--seconds 600]. Writes bench/results/soak.json; exits 1 if something leaks.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports";
import { createOrganizationKey } from "./sluice-setup";

const secondsArgument = process.argv.indexOf("--seconds");
const seconds = secondsArgument === -1 ? 600 : Number(process.argv[secondsArgument + 1]);
const sampleEveryMs = Math.max(1000, Math.min(10_000, (seconds * 1000) / 30));
const root = join(import.meta.dir, "..");
const binary = join(root, "dist/sluice");
const work = mkdtempSync(join(tmpdir(), "sluice-soak-"));
const children: Bun.Subprocess[] = [];

async function main(): Promise<number> {
  if (Bun.spawnSync(["make", "-s", "build"], { cwd: root, stdout: "inherit", stderr: "inherit" }).exitCode !== 0) throw new Error("make build failed");
  const upstreamPort = freePort();
  children.push(
    Bun.spawn([process.execPath, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort), "50", "5"], { stdout: "ignore", stderr: "ignore" }),
  );
  await waitForPort(upstreamPort);
  const config = join(work, "sluice.toml");
  await Bun.write(
    config,
    `[[models]]\nid = "m"\nbackend = "openai"\nbase_url = "http://127.0.0.1:${upstreamPort}/v1"\nupstream_model = "bench-upstream"\n\n` +
      `[[models]]\nid = "broken"\nbackend = "openai"\nbase_url = "http://127.0.0.1:1/v1"\nbreaker_failures = 1000000\n\n` +
      `[[plans]]\nid = "default"\nmodels = ["*"]\ntokens_per_5h = 1000000000000\nmax_concurrency = 1000\n`,
  );
  const port = freePort();
  const environment = { PATH: process.env.PATH, SLUICE_DB: join(work, "soak.db"), SLUICE_CONFIG: config, SLUICE_PORT: String(port), SLUICE_LOG_LEVEL: "warn" };
  const key = createOrganizationKey(binary, environment, "soak");
  const server = Bun.spawn([binary, "serve"], { env: environment, stdout: "ignore", stderr: "ignore" });
  children.push(server);
  await waitForPort(port);
  const pid = server.pid;
  const url = `http://127.0.0.1:${port}/v1/chat/completions`;
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
  const body = (model: string, stream: boolean) => JSON.stringify({ model, messages: [{ role: "user", content: "soak" }], stream });
  let requests = 0;
  let serverErrors = 0;
  let stop = false;
  const client = async (kind: number) => {
    while (!stop) {
      requests++;
      const controller = new AbortController();
      try {
        if (kind === 0) {
          const response = await fetch(url, { method: "POST", headers, body: body("m", false) });
          if (response.status >= 500) serverErrors++;
          await response.arrayBuffer();
        } else if (kind === 1) {
          await (await fetch(url, { method: "POST", headers, body: body("m", true) })).text();
        } else if (kind === 2) {
          const response = await fetch(url, { method: "POST", headers, body: body("m", true), signal: controller.signal });
          setTimeout(() => controller.abort(), Math.random() * 200);
          await response.text();
        } else {
          await (await fetch(url, { method: "POST", headers, body: body("broken", false) })).arrayBuffer();
        }
      } catch {
        // cancelled on purpose
      }
    }
  };
  const clients = Array.from({ length: 32 }, (_, index) => client(index % 8 === 7 ? 3 : index % 3));
  const memory = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
  const files = () => readdirSync(`/proc/${pid}/fd`).length;
  const inFlight = async () => {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    return [...text.matchAll(/^sluice_in_flight\{[^}]*\} (\d+)/gm)].reduce((sum, match) => sum + Number(match[1]), 0);
  };
  const samples: { second: number; rss_mb: number; in_flight: number; open_files: number; requests: number }[] = [];
  const started = Date.now();
  while (Date.now() - started < seconds * 1000) {
    await Bun.sleep(sampleEveryMs);
    samples.push({
      second: Math.round((Date.now() - started) / 1000),
      rss_mb: Math.round(memory()),
      in_flight: await inFlight(),
      open_files: files(),
      requests,
    });
    const last = samples.at(-1);
    process.stderr.write(`[soak] ${JSON.stringify(last)}\n`);
  }
  stop = true;
  await Promise.all(clients);
  await Bun.sleep(500);
  const end = { rss_mb: Math.round(memory()), in_flight: await inFlight(), open_files: files() };
  // Memory is judged from the first fifth on (after warm-up): it must not keep growing.
  const settled = samples[Math.floor(samples.length / 5)] ?? samples[0];
  const peakLater = Math.max(...samples.slice(Math.floor(samples.length / 5)).map((sample) => sample.rss_mb));
  const verdict = {
    memory_flat: settled ? peakLater <= settled.rss_mb * 1.25 + 10 : true,
    in_flight_zero: end.in_flight === 0,
    files_flat: settled ? end.open_files <= settled.open_files + 10 : true,
    no_server_errors: serverErrors === 0,
  };
  const result = { date: new Date().toISOString(), seconds, requests, server_errors: serverErrors, samples, end, verdict };
  await Bun.write(join(import.meta.dir, "results", seconds >= 600 ? "soak.json" : "soak-short.json"), `${JSON.stringify(result, null, 2)}\n`);
  console.log(JSON.stringify({ seconds, requests, end, verdict }));
  return Object.values(verdict).every(Boolean) ? 0 : 1;
}

let code = 1;
try {
  code = await main();
} finally {
  for (const child of children) child.kill();
  rmSync(work, { recursive: true, force: true });
}
process.exit(code);
