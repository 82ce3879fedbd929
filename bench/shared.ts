// The shared-mode phase of `make bench`: Sluice on PostgreSQL + Redis against the same executable on SQLite, in one
// run, on Debian's servers started here (as the tests start them). Writes its figures into the `shared` key of
// bench/results/latest.json.
//   1. whole answers, closed loop, one instance each: SQLite vs shared (interleaved rounds, medians), and the CPU
//      time a request of the instance, PostgreSQL and Redis
//   2. latency at 1,000 requests a second, open loop: p50 / p99 of each
//   3. one admission script call on its own (sequential EVALSHA round trips): what Redis adds per request
//   4. three shared instances at once (one wrk per instance), and a burst of 500 over them against
//      max_concurrency = 3, counted
//   5. 2,000 concurrent streams of 200 tokens, each side freshly started every round (as phase 3 of run.ts):
//      completed, peak RSS, time to first token, CPU per relayed event
//   6. scale: 1M keys and 1M ledger rows (and their aggregates) in PostgreSQL against an empty database, each with
//      a Redis of its own, which each instance's first request rebuilds from the aggregates: whole answers, and
//      start-up to the first answer
// `--smoke` runs every phase with tiny numbers into results/shared-smoke.json (a test keeps it working).
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type RedisServer, startPostgres, startRedis } from "../test/support/services";
import { type LoadResult, runLoad, runWrk, type WrkResult, writeWrkScript } from "./load-driver";
import { freePort, waitForPort } from "./ports";
import { cpuMicroseconds, cpuOfProcessesNamed } from "./process-cpu";
import { createOrganizationKey, waitForFirstAnswer } from "./sluice-setup";
import { bucketMs } from "../src/usage-periods";
import { median } from "./statistics";
import { measureStreamRound, type StreamRound } from "./stream-client";

const root = join(import.meta.dir, "..");
const bun = process.execPath;
const sluiceBinary = join(root, "dist/sluice");
const work = mkdtempSync(join(tmpdir(), "sluice-bench-shared-"));
const smoke = process.argv.includes("--smoke");
const settings = smoke
  ? { rounds: 1, seconds: 1, connections: 8, rate: 100, admissionCalls: 200, streams: 20, streamTokens: 20, paceMs: 5, scaleRows: 2000 }
  : { rounds: 3, seconds: 6, connections: 64, rate: 1000, admissionCalls: 5000, streams: 2000, streamTokens: 200, paceMs: 20, scaleRows: 1_000_000 };
const { rounds, seconds, connections, rate } = settings;
const lifted = { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
const children: Bun.Subprocess[] = [];

function log(message: string): void {
  process.stderr.write(`[bench shared] ${message}\n`);
}

function start(command: string[], environment: Record<string, string | undefined>): Bun.Subprocess {
  const child = Bun.spawn(command, { env: environment, stdout: "ignore", stderr: "ignore" });
  children.push(child);
  return child;
}

const body = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "What is 2+2? Answer briefly." }] });

function wrkScript(name: string, key: string): Promise<string> {
  return writeWrkScript(join(work, `${name}.lua`), body, { Authorization: `Bearer ${key}` });
}

/** Requests a second of one wrk run, how many were answered, and how many answers were not 2xx. */
function wrk(url: string, script: string, threads: number, connectionCount: number, duration: number): Promise<WrkResult> {
  return runWrk(url, script, { threads, connections: connectionCount, seconds: duration });
}

async function openLoop(url: string, key: string, duration: number): Promise<LoadResult> {
  const bodyFile = join(work, "open.json");
  await Bun.write(bodyFile, body);
  return runLoad("open", url, bodyFile, { authorization: `Bearer ${key}` }, rate, duration);
}

function configFile(upstreamPort: number, plan: string): string {
  return `[[models]]\nid = "bench"\nbackend = "openai"\nbase_url = "http://127.0.0.1:${upstreamPort}/v1"\nupstream_model = "bench-upstream"\n\n[[plans]]\nid = "default"\nmodels = ["*"]\n${plan}\n`;
}

function cli(environment: Record<string, string | undefined>, ...args: string[]): string {
  return Bun.spawnSync([sluiceBinary, ...args], { env: environment, stdout: "pipe", stderr: "ignore" })
    .stdout.toString()
    .trim();
}

/** Where a round's CPU went, in microseconds a request: the instance (and its event loop), PostgreSQL, Redis. */
interface CpuShares {
  sluice: number;
  event_loop: number;
  postgres: number;
  redis: number;
}

function cpuNow(pid: number): CpuShares {
  const instance = cpuMicroseconds(pid);
  return { sluice: instance.process, event_loop: instance.main, postgres: cpuOfProcessesNamed("postgres"), redis: cpuOfProcessesNamed("redis-server") };
}

function cpuPerRequest(before: CpuShares, after: CpuShares, requests: number): CpuShares {
  const share = (part: keyof CpuShares) => (after[part] - before[part]) / requests;
  return { sluice: share("sluice"), event_loop: share("event_loop"), postgres: share("postgres"), redis: share("redis") };
}

async function startInstance(environment: Record<string, string | undefined>): Promise<{ url: string; child: Bun.Subprocess }> {
  const port = freePort();
  const child = start([sluiceBinary, "serve"], { ...environment, SLUICE_PORT: String(port) });
  await waitForPort(port);
  return { url: `http://127.0.0.1:${port}/v1/chat/completions`, child };
}

/**
 * Fills a migrated PostgreSQL database as run.ts fills SQLite: one organization's keys, and ledger rows spread over
 * the last 30 days; then the per-minute and per-month aggregates of those rows.
 */
async function fillPostgres(url: string, rows: number): Promise<void> {
  const database = new Bun.SQL(url);
  try {
    const [organization] = (await database`SELECT id FROM organizations LIMIT 1`) as { id: string }[];
    const now = Date.now();
    await database`INSERT INTO api_keys (id, organization_id, name, prefix, hash, created_at)
      SELECT 'key_fill' || i, ${organization?.id}, 'filler', 'sk-sluice-xxxx', encode(sha256(('sk-sluice-filler-' || i)::bytea), 'hex'), ${now}
      FROM generate_series(0, ${rows - 1}) AS i`;
    // Request ids ordered by time as Sluice's own (a UUIDv7's 48-bit time in hex, then a 7 and 19 more hex digits), so
    // that the history sorts before every id a request makes now, as real history does (see run.ts's fillDatabase).
    await database`INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at)
      SELECT 'req_' || lpad(to_hex(at), 12, '0') || '7' || substr(md5(i::text), 1, 19), ${organization?.id}, 'key_filler', 'bench', 12, 11, 6, 'completed', 'upstream', at, at
      FROM (SELECT i, ${now}::bigint - (i::bigint * 30 * 86400000 / ${rows}) AS at FROM generate_series(0, ${rows - 1}) AS i) AS filler`;
    // The aggregates the ledger's commits keep beside it (postgres-ledger.ts), which a start-up rebuilds Redis from.
    await database`INSERT INTO usage_minutes (organization_id, minute, tokens, last_time)
      SELECT organization_id, ended_at / ${bucketMs}::bigint, sum(prompt_tokens + completion_tokens), max(ended_at) FROM usage_ledger GROUP BY 1, 2`;
    await database`INSERT INTO usage_months (organization_id, month, tokens)
      SELECT organization_id, (extract(year FROM utc) * 12 + extract(month FROM utc) - 1)::bigint, sum(tokens)
      FROM (SELECT organization_id, prompt_tokens + completion_tokens AS tokens, to_timestamp(ended_at / 1000) AT TIME ZONE 'UTC' AS utc FROM usage_ledger) AS rows
      GROUP BY 1, 2`;
    // Vacuumed and checkpointed as a long-lived database is: otherwise autovacuum's pass over the million fresh rows
    // (it vacuums after inserts too) and the checkpoint of their pages can fall in the measured rounds, on the same
    // two cores (a run at 9090930 read 0.85, against 0.97-1.03 in the five before).
    await database`VACUUM ANALYZE`;
    await database`CHECKPOINT`;
  } finally {
    await database.close();
  }
}

async function main(): Promise<void> {
  if (!existsSync(sluiceBinary)) Bun.spawnSync(["make", "-s", "build"], { cwd: root, stdout: "inherit", stderr: "inherit" });
  if (!Bun.which("wrk")) throw new Error("wrk is needed (make bench installs it)");
  const upstreamPort = freePort();
  start([bun, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort), "20", "5"], process.env);
  await waitForPort(upstreamPort);
  const [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
  const scaleRedises: RedisServer[] = [];
  try {
    const plan = "tokens_per_5h = 1000000000000\ntokens_per_month = 1000000000000\nmax_concurrency = 100000";
    const configPath = join(work, "sluice.toml");
    await Bun.write(configPath, configFile(upstreamPort, plan));
    const base = { PATH: process.env.PATH, HOME: process.env.HOME, SLUICE_CONFIG: configPath, SLUICE_LOG_LEVEL: "warn" };
    mkdirSync(join(work, "sqlite"));
    const sqliteEnvironment = { ...base, SLUICE_DB: join(work, "sqlite", "sluice.db") };
    const sharedEnvironment = { ...base, SLUICE_DB: await postgres.createDatabase("bench"), SLUICE_REDIS_URL: redis.url };
    const keys: Record<string, string> = {};
    for (const [name, environment] of [
      ["sqlite", sqliteEnvironment],
      ["shared", sharedEnvironment],
    ] as const) {
      keys[name] = createOrganizationKey(sluiceBinary, environment, "bench");
    }
    const sqlite = await startInstance(sqliteEnvironment);
    const shared = await startInstance(sharedEnvironment);
    const targets = [
      { name: "sqlite", url: sqlite.url, pid: sqlite.child.pid, script: await wrkScript("sqlite", keys.sqlite as string), key: keys.sqlite as string },
      { name: "shared", url: shared.url, pid: shared.child.pid, script: await wrkScript("shared", keys.shared as string), key: keys.shared as string },
    ];

    log(`1/6 whole answers, closed loop (${connections} connections, ${rounds} rounds of ${seconds} s, interleaved)`);
    const rps: Record<string, number[]> = { sqlite: [], shared: [] };
    const cpu: Record<string, CpuShares[]> = { sqlite: [], shared: [] };
    for (const target of targets) await wrk(target.url, target.script, 2, connections, 2);
    for (let round = 0; round < rounds; round++) {
      for (const target of targets) {
        const before = cpuNow(target.pid);
        const result = await wrk(target.url, target.script, 2, connections, seconds);
        cpu[target.name]?.push(cpuPerRequest(before, cpuNow(target.pid), result.requests));
        if (result.non2xx > 0) log(`${target.name}: ${result.non2xx} non-2xx answers`);
        rps[target.name]?.push(result.rps);
      }
    }
    const cpuMedian = (name: string): CpuShares => {
      const shares = cpu[name] ?? [];
      const of = (part: keyof CpuShares) => median(shares.map((share) => share[part]));
      return { sluice: of("sluice"), event_loop: of("event_loop"), postgres: of("postgres"), redis: of("redis") };
    };

    log(`2/6 latency at ${rate} requests a second, open loop`);
    const latency: Record<string, { p50: number[]; p99: number[] }> = { sqlite: { p50: [], p99: [] }, shared: { p50: [], p99: [] } };
    for (let round = 0; round < rounds; round++) {
      for (const target of targets) {
        const result = await openLoop(target.url, target.key, seconds);
        latency[target.name]?.p50.push(result.p50_ms);
        latency[target.name]?.p99.push(result.p99_ms);
      }
    }

    log("3/6 one admission script call alone, sequential round trips");
    const { RedisConnection } = await import("../src/storage/redis");
    const connection = new RedisConnection(redis.url);
    while (!connection.connected) await Bun.sleep(10);
    // Keys and arguments as RedisAdmissionStore sends them (redis-store.ts): one request alone, then its settle.
    const keysOf = ["sluice:ready", ...["state", "minutes", "lasts", "leases", "reservations", "expired"].map((part) => `sluice:org:{bench-probe}:${part}`)];
    await connection.call("SET", ["sluice:ready", "probe"]);
    const admissionMicroseconds: number[] = [];
    for (let index = 0; index < settings.admissionCalls; index++) {
      const started = performance.now();
      const [answer] = (await connection.script("admit", keysOf, ["admit", 15000, 1_000_000_000, -1, 100, -1, 11, 30, `probe-${index}`])) as number[][];
      admissionMicroseconds.push((performance.now() - started) * 1000);
      if (answer?.[0] !== 0) throw new Error(`the probe was not admitted: ${JSON.stringify(answer)}`);
      await connection.script("settle", keysOf, ["probe", `probe-${index}`, 20]);
    }
    connection.close();

    log("4/6 three shared instances at once");
    const more = [shared, await startInstance(sharedEnvironment), await startInstance(sharedEnvironment)];
    const threeRounds: number[] = [];
    for (let round = 0; round < rounds; round++) {
      const results = await Promise.all(more.map((instance) => wrk(instance.url, targets[1]?.script as string, 1, Math.round(connections / 3), seconds)));
      threeRounds.push(results.reduce((sum, result) => sum + result.rps, 0));
    }
    // Exactness under the load generator: an organization with max_concurrency = 3, 500 requests at once over three.
    await Bun.write(configPath, configFile(upstreamPort, "max_concurrency = 3"));
    for (const instance of more) instance.child.kill();
    await Promise.all(more.map((instance) => instance.child.exited));
    const capped = [await startInstance(sharedEnvironment), await startInstance(sharedEnvironment), await startInstance(sharedEnvironment)];
    const burst = await Promise.all(
      Array.from({ length: 500 }, async (_, index) => {
        const response = await fetch((capped[index % 3] as { url: string }).url, {
          method: "POST",
          headers: { authorization: `Bearer ${keys.shared}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "bench", messages: [{ role: "user", content: "hi" }] }),
        });
        await response.arrayBuffer();
        return response.status;
      }),
    );
    // Settles reach Redis just after each answer's last byte, in batches: on a busy machine (make test's smoke run)
    // some took longer than the 200 ms once waited here. A lease that leaked would stay: the instances still run and
    // renew what they hold (15 s each time), so it would outlast the 5 s this waits.
    const leases = new Bun.RedisClient(redis.url);
    const leaseSet = `sluice:org:{${cli(sharedEnvironment, "org", "list").split("\t")[0]}}:leases`;
    const waitedFrom = performance.now();
    let held = Number(await leases.send("ZCARD", [leaseSet]));
    while (held > 0 && performance.now() - waitedFrom < 5000) {
      await Bun.sleep(25);
      held = Number(await leases.send("ZCARD", [leaseSet]));
    }
    const releasedWithinMs = Math.round(performance.now() - waitedFrom);
    leases.close();
    for (const instance of [...capped, sqlite]) instance.child.kill();
    await Promise.all([...capped, sqlite].map((instance) => instance.child.exited));

    log(`5/6 ${settings.streams} concurrent streams of ${settings.streamTokens} tokens, each side freshly started every round`);
    const streamUpstreamPort = freePort();
    start([bun, join(import.meta.dir, "fake-upstream.ts"), String(streamUpstreamPort), String(settings.streamTokens), String(settings.paceMs)], lifted);
    await waitForPort(streamUpstreamPort);
    const streamConfigPath = join(work, "streams.toml");
    await Bun.write(streamConfigPath, configFile(streamUpstreamPort, plan));
    const streamBodyFile = join(work, "stream.json");
    await Bun.write(streamBodyFile, JSON.stringify({ ...JSON.parse(body), stream: true }));
    const streamRounds: Record<"sqlite" | "shared", StreamRound[]> = { sqlite: [], shared: [] };
    const streamSides = [
      { name: "sqlite", environment: sqliteEnvironment },
      { name: "shared", environment: sharedEnvironment },
    ] as const;
    for (let round = 0; round < rounds; round++) {
      for (const side of round % 2 === 0 ? streamSides : [...streamSides].reverse()) {
        const instance = await startInstance({ ...side.environment, SLUICE_CONFIG: streamConfigPath });
        const headers = { Authorization: `Bearer ${keys[side.name]}` };
        streamRounds[side.name].push(
          await measureStreamRound(
            instance.child.pid,
            { url: instance.url, bodyFile: streamBodyFile, headers, tokens: settings.streamTokens, environment: lifted },
            settings.streams,
          ),
        );
        instance.child.kill();
        await instance.child.exited;
      }
    }

    await Bun.write(configPath, configFile(upstreamPort, plan));
    log(`6/6 scale: ${settings.scaleRows} keys and ${settings.scaleRows} ledger rows in PostgreSQL, against an empty database`);
    const scaleSide = async (name: string, rows: number) => {
      // A Redis of its own: two gateways on one Redis would share its admission state.
      const ownRedis = await startRedis();
      scaleRedises.push(ownRedis);
      const environment = { ...base, SLUICE_DB: await postgres.createDatabase(name), SLUICE_REDIS_URL: ownRedis.url };
      const key = createOrganizationKey(sluiceBinary, environment, "bench");
      if (rows > 0) await fillPostgres(environment.SLUICE_DB, rows);
      const began = performance.now();
      const instance = await startInstance(environment);
      await waitForFirstAnswer(instance.url, key);
      return { name, instance, startMs: performance.now() - began, script: await wrkScript(name, key) };
    };
    const scaleSides = [await scaleSide("scale_empty", 0), await scaleSide("scale_full", settings.scaleRows)];
    const scaleRounds: Record<string, number[]> = { scale_empty: [], scale_full: [] };
    for (const side of scaleSides) await wrk(side.instance.url, side.script, 2, connections, 2);
    for (let round = 0; round < rounds; round++) {
      for (const side of scaleSides) scaleRounds[side.name]?.push((await wrk(side.instance.url, side.script, 2, connections, seconds)).rps);
    }
    for (const side of scaleSides) side.instance.child.kill();

    /** Medians over the rounds; `completed` is the worst round's, since every stream of every round must arrive. */
    const streamSummary = (runs: StreamRound[]) => ({
      completed: Math.min(...runs.map((run) => run.completed)),
      peak_mb: median(runs.map((run) => run.peakMb)),
      ttft_p50_ms: median(runs.map((run) => run.ttft_p50_ms)),
      ttft_p99_ms: median(runs.map((run) => run.ttft_p99_ms)),
      cpu_us_per_event: median(runs.map((run) => run.cpuMicrosecondsPerEvent)),
    });
    const scaleEmptyRps = median(scaleRounds.scale_empty ?? []);
    const scaleFullRps = median(scaleRounds.scale_full ?? []);
    const sqliteRps = median(rps.sqlite ?? []);
    const sharedRps = median(rps.shared ?? []);
    const sortedAdmission = [...admissionMicroseconds].sort((left, right) => left - right);
    const shared_ = {
      date: new Date().toISOString(),
      machine: { cores: navigator.hardwareConcurrency, bun_version: Bun.version, postgres: "Debian 15 (fsync off: test cluster)", redis: "Debian 7.0" },
      nonstream: {
        connections,
        sqlite_rps: sqliteRps,
        shared_rps: sharedRps,
        shared_vs_sqlite: sharedRps / sqliteRps,
        // CPU time a request, medians of the rounds: the instance's process (its event loop apart), every PostgreSQL
        // process, redis-server. Where shared mode's extra cost goes.
        cpu_us_per_request: { sqlite: cpuMedian("sqlite"), shared: cpuMedian("shared") },
      },
      latency: {
        rate,
        sqlite_p50_ms: median(latency.sqlite?.p50 ?? []),
        sqlite_p99_ms: median(latency.sqlite?.p99 ?? []),
        shared_p50_ms: median(latency.shared?.p50 ?? []),
        shared_p99_ms: median(latency.shared?.p99 ?? []),
      },
      admission_script_round_trip_us: {
        p50: sortedAdmission[Math.floor(sortedAdmission.length / 2)],
        p99: sortedAdmission[Math.floor(sortedAdmission.length * 0.99)],
      },
      three_instances: { rps: median(threeRounds), vs_one_shared: median(threeRounds) / sharedRps },
      streams: {
        concurrent: settings.streams,
        tokens: settings.streamTokens,
        sqlite: streamSummary(streamRounds.sqlite),
        shared: streamSummary(streamRounds.shared),
      },
      scale: {
        rows: settings.scaleRows,
        empty_rps: scaleEmptyRps,
        full_rps: scaleFullRps,
        full_vs_empty: scaleFullRps / scaleEmptyRps,
        // From the spawn to the first answered request, which first rebuilds Redis's windows from the aggregates.
        start_to_first_answer_ms: { empty: scaleSides[0]?.startMs, full: scaleSides[1]?.startMs },
      },
      burst_max_concurrency_3: {
        requests: 500,
        ok: burst.filter((status) => status === 200).length,
        rejected_429: burst.filter((status) => status === 429).length,
        other: burst.filter((status) => status !== 200 && status !== 429).length,
        leases_held_after: held,
        // From the last answer to no lease left in Redis (or 5 s, when some stayed).
        leases_released_within_ms: releasedWithinMs,
      },
      rounds_detail: { nonstream_rps: rps, latency_ms: latency, three_instances_rps: threeRounds, streams: streamRounds, scale_rps: scaleRounds },
    };
    const resultsPath = join(import.meta.dir, "results", smoke ? "shared-smoke.json" : "latest.json");
    const existing = !smoke && existsSync(resultsPath) ? ((await Bun.file(resultsPath).json()) as Record<string, unknown>) : {};
    await Bun.write(resultsPath, `${JSON.stringify({ ...existing, shared: shared_ }, null, 2)}\n`);
    const fixed = (value: number | undefined, digits = 2) => (value === undefined || Number.isNaN(value) ? "-" : value.toFixed(digits));
    const l = shared_.latency;
    const streamLine = (name: string, side: ReturnType<typeof streamSummary>) =>
      `  ${settings.streams} streams on ${name}: ${side.completed} completed, peak ${fixed(side.peak_mb, 0)} MB, TTFT p50 / p99 ${fixed(side.ttft_p50_ms, 0)} / ${fixed(side.ttft_p99_ms, 0)} ms, ${fixed(side.cpu_us_per_event, 1)} µs CPU a relayed event`;
    console.log(`
Shared mode (PostgreSQL + Redis) vs SQLite, one instance each, medians of ${rounds}
  whole answers: SQLite ${fixed(sqliteRps, 0)} rps | shared ${fixed(sharedRps, 0)} rps = ${fixed(shared_.nonstream.shared_vs_sqlite)} (target >= 0.5)
  CPU a request, µs: SQLite instance ${fixed(cpuMedian("sqlite").sluice, 1)} (event loop ${fixed(cpuMedian("sqlite").event_loop, 1)}) | shared instance ${fixed(cpuMedian("shared").sluice, 1)} (event loop ${fixed(cpuMedian("shared").event_loop, 1)}), PostgreSQL ${fixed(cpuMedian("shared").postgres, 1)}, Redis ${fixed(cpuMedian("shared").redis, 1)}
  latency at ${rate} rps p50 / p99 ms: SQLite ${fixed(l.sqlite_p50_ms)} / ${fixed(l.sqlite_p99_ms)} | shared ${fixed(l.shared_p50_ms)} / ${fixed(l.shared_p99_ms)} (p50 added ${fixed(l.shared_p50_ms - l.sqlite_p50_ms)} ms, target < 1)
  one admission script call: p50 ${fixed(shared_.admission_script_round_trip_us.p50, 0)} µs, p99 ${fixed(shared_.admission_script_round_trip_us.p99, 0)} µs
  three shared instances: ${fixed(shared_.three_instances.rps, 0)} rps in all (${fixed(shared_.three_instances.vs_one_shared)} x one)
  500 at once over three, max_concurrency = 3: ${shared_.burst_max_concurrency_3.ok} answered, ${shared_.burst_max_concurrency_3.rejected_429} x 429, ${shared_.burst_max_concurrency_3.other} other; leases held after: ${held} (none left ${releasedWithinMs} ms after the last answer)
${streamLine("SQLite", shared_.streams.sqlite)}
${streamLine("shared", shared_.streams.shared)}
  scale (${settings.scaleRows} keys + ${settings.scaleRows} ledger rows in PostgreSQL ÷ empty): ${fixed(scaleFullRps, 0)} ÷ ${fixed(scaleEmptyRps, 0)} rps = ${fixed(shared_.scale.full_vs_empty)} (target >= 0.9); start-up to the first answer ${fixed(shared_.scale.start_to_first_answer_ms.full, 0)} ms (empty ${fixed(shared_.scale.start_to_first_answer_ms.empty, 0)} ms)
Written to ${resultsPath}`);
  } finally {
    for (const child of children) child.kill();
    await Promise.all(children.map((child) => child.exited));
    postgres.stop();
    await Promise.all([redis, ...scaleRedises].map((server) => server.stop()));
  }
}

try {
  await main();
} finally {
  for (const child of children) child.kill();
  // A server still exiting can write its database's last files into `work` while it is being removed.
  await Promise.all(children.map((child) => child.exited));
  rmSync(work, { recursive: true, force: true });
}
