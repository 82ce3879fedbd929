// `make soak`: ten minutes of mixed traffic against dist/sluice (whole answers, streams, streams the client
// cancels at random points, upstream failures), sampling memory, in-flight requests and open files; at the end, every
// answer of a sample (one in 50) must have its ledger row. `--shared` runs the same against one instance on
// PostgreSQL + Redis (the test cluster's engines), and also checks that no lease is left in Redis.
// Usage: bun bench/soak.ts [--seconds 600] [--shared]. Writes bench/results/soak.json (soak-shared.json); exits 1 if
// something leaks or an answer's row is missing.
import { Database } from "bun:sqlite";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { leasesHeld, type PostgresServer, type RedisServer, startPostgres, startRedis } from "../test/support/services";
import { freePort, waitForPort } from "./ports";
import { createOrganizationKey } from "./sluice-setup";

const secondsArgument = process.argv.indexOf("--seconds");
const seconds = secondsArgument === -1 ? 600 : Number(process.argv[secondsArgument + 1]);
const sampleEveryMs = Math.max(1000, Math.min(10_000, (seconds * 1000) / 30));
const root = join(import.meta.dir, "..");
const binary = join(root, "dist/sluice");
const work = mkdtempSync(join(tmpdir(), "sluice-soak-"));
const children: Bun.Subprocess[] = [];
const shared = process.argv.includes("--shared");
let postgres: PostgresServer | undefined;
let redis: RedisServer | undefined;
/** One answer in this many has its request id kept, to look for its ledger row at the end. */
const sampleOneIn = 50;

/** How many of `requestIds` have a ledger row. */
async function rowsFound(database: string, requestIds: string[]): Promise<number> {
  let found = 0;
  const chunk = 500;
  if (shared) {
    const client = new Bun.SQL(database, { max: 1 });
    try {
      for (let start = 0; start < requestIds.length; start += chunk) {
        const [row] = await client`SELECT count(*) AS found FROM usage_ledger WHERE request_id = ANY(${requestIds.slice(start, start + chunk)}::text[])`;
        found += Number(row.found);
      }
    } finally {
      await client.close();
    }
    return found;
  }
  const sqlite = new Database(database, { readonly: true });
  try {
    for (let start = 0; start < requestIds.length; start += chunk) {
      const ids = requestIds.slice(start, start + chunk);
      const row = sqlite.query(`SELECT count(*) AS found FROM usage_ledger WHERE request_id IN (${ids.map(() => "?").join(",")})`).get(...ids) as {
        found: number;
      };
      found += row.found;
    }
  } finally {
    sqlite.close();
  }
  return found;
}

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
  const environment: Record<string, string | undefined> = {
    PATH: process.env.PATH,
    SLUICE_DB: join(work, "soak.db"),
    SLUICE_CONFIG: config,
    SLUICE_PORT: String(port),
    SLUICE_LOG_LEVEL: "warn",
  };
  if (shared) {
    [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
    environment.SLUICE_DB = await postgres.createDatabase("soak");
    environment.SLUICE_REDIS_URL = redis.url;
  }
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
  let answered = 0;
  const sampledIds: string[] = [];
  const answer = (response: Response) => {
    if (++answered % sampleOneIn === 0) sampledIds.push(response.headers.get("x-request-id") ?? "missing");
  };
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
          if (response.status === 200) answer(response);
        } else if (kind === 1) {
          const response = await fetch(url, { method: "POST", headers, body: body("m", true) });
          const text = await response.text();
          if (response.status === 200 && text.endsWith("data: [DONE]\n\n") && !text.includes('"error"')) answer(response);
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
    every_sampled_answer_recorded: false,
    ...(redis ? { no_lease_left: false } : {}),
  };
  const ledger = { answered, sampled: sampledIds.length, found: await rowsFound(environment.SLUICE_DB as string, sampledIds) };
  verdict.every_sampled_answer_recorded = ledger.sampled > 0 && ledger.found === ledger.sampled;
  const leasesLeft = redis ? await leasesHeld(redis.url) : undefined;
  if (leasesLeft !== undefined) verdict.no_lease_left = leasesLeft === 0;
  const result = {
    date: new Date().toISOString(),
    mode: shared ? "shared" : "sqlite",
    seconds,
    requests,
    server_errors: serverErrors,
    ledger,
    leases_left: leasesLeft,
    samples,
    end,
    verdict,
  };
  const name = `soak${shared ? "-shared" : ""}${seconds >= 600 ? "" : "-short"}.json`;
  await Bun.write(join(import.meta.dir, "results", name), `${JSON.stringify(result, null, 2)}\n`);
  console.log(JSON.stringify({ seconds, requests, ledger, leases_left: leasesLeft, end, verdict }));
  return Object.values(verdict).every(Boolean) ? 0 : 1;
}

let code = 1;
try {
  code = await main();
} finally {
  for (const child of children) child.kill();
  await Promise.all(children.map((child) => child.exited));
  postgres?.stop();
  await redis?.stop();
  rmSync(work, { recursive: true, force: true });
}
process.exit(code);
