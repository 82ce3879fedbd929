// The benchmark runner behind `make bench`: starts a fake upstream, a bare Bun proxy, Sluice (dist/sluice, the
// executable users run) and the Portkey gateway on loopback, measures them side by side in one run, and writes
// bench/results/latest.json. `--smoke` runs every phase with tiny numbers (used by a test to keep this working).
import { Database } from "bun:sqlite";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runLoad, runWrk, writeWrkScript } from "./load-driver";
import { freePort, waitForPort } from "./ports";
import { cpuPerRequest, cpuSnapshot, medianByThread } from "./process-cpu";
import { prepareSluice, waitForFirstAnswer } from "./sluice-setup";
import { newRequestId } from "../src/ids";
import { hashKeySecret } from "../src/modules/keys/secret";
import { addToAggregates, UsageFold } from "../src/ledger/usage-fold";
import { sqliteDefaults } from "../src/start-environment";
import { measureStreamRound, memoryOf, type StreamRound } from "./stream-client";
import { median, pairedRatio } from "./statistics";

const smoke = process.argv.includes("--smoke");
/** `--only=streams,binary` runs some phases (results go to partial.json): nonstream, latency, streams, scale, binary, safety. */
const only = process.argv
  .find((argument) => argument.startsWith("--only="))
  ?.slice(7)
  .split(",");
const phase = (name: string) => !only || only.includes(name);
const root = join(import.meta.dir, "..");
const bun = process.execPath;
const sluiceBinary = join(root, "dist/sluice");
const work = mkdtempSync(join(tmpdir(), "sluice-bench-"));
const settings = smoke
  ? {
      rounds: 1,
      seconds: 1,
      warmupSeconds: 0.5,
      closedWarmupSeconds: 0.5,
      connections: 8,
      rate: 100,
      latencySeconds: 1,
      streams: 20,
      streamTokens: 20,
      paceMs: 5,
      scaleRows: 2000,
      portkey: false,
    }
  : {
      rounds: 3,
      seconds: 8,
      warmupSeconds: 3,
      // Sluice's JIT compiles for about 10 s of load before its whole-answer path settles (bench/README.md, phase 1).
      closedWarmupSeconds: 12,
      connections: 64,
      rate: 1000,
      latencySeconds: 10,
      streams: 2000,
      streamTokens: 200,
      paceMs: 20,
      scaleRows: 1_000_000,
      portkey: true,
    };
const lifted = { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
const children: Bun.Subprocess[] = [];

function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

function start(command: string[], environment: Record<string, string | undefined> = process.env): Bun.Subprocess {
  const child = Bun.spawn(command, { env: environment, stdout: "ignore", stderr: "ignore" });
  children.push(child);
  return child;
}

async function stop(child: Bun.Subprocess): Promise<void> {
  child.kill();
  await child.exited;
}

interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
  bodyFile: string;
  streamBodyFile?: string;
  /** The server's process, when phase 1 reports its CPU an answer by thread. */
  pid?: number;
}

async function writeBody(name: string, model: string, stream: boolean): Promise<string> {
  const path = join(work, `${name}.json`);
  await Bun.write(path, JSON.stringify({ model, messages: [{ role: "user", content: "What is 2+2? Answer briefly." }], ...(stream ? { stream: true } : {}) }));
  return path;
}

const hasWrk = Bun.which("wrk") !== null && !smoke;

/** Closed loop: wrk (2 threads) when installed, otherwise bench/load.ts. Requests per second, and how many. */
async function closedLoad(target: Target, seconds: number): Promise<{ rps: number; requests: number }> {
  if (hasWrk) {
    const script = await writeWrkScript(join(work, `${target.name}.lua`), await Bun.file(target.bodyFile).text(), target.headers);
    const result = await runWrk(target.url, script, { threads: 2, connections: settings.connections, seconds });
    if (result.non2xx > 0) log(`${target.name}: ${result.non2xx} non-2xx responses`);
    return result;
  }
  return runTargetLoad("closed", target, settings.connections, seconds);
}

/** Closed loop: requests per second. */
async function closedLoop(target: Target, seconds: number): Promise<number> {
  return (await closedLoad(target, seconds)).rps;
}

/**
 * A closed loop that also reads the target's CPU an answer (µs; `process` for the whole process, and each thread by
 * name) from /proc: which thread a gap between two servers is on, in the judge's own run.
 */
async function measuredLoop(target: Target, seconds: number): Promise<{ rps: number; cpu: Record<string, number> | undefined }> {
  if (target.pid === undefined) return { rps: await closedLoop(target, seconds), cpu: undefined };
  const before = cpuSnapshot(target.pid);
  const result = await closedLoad(target, seconds);
  const spent = cpuPerRequest(before, cpuSnapshot(target.pid), result.requests);
  return { rps: result.rps, cpu: { ...spent.threads, process: spent.process } };
}

function runTargetLoad(mode: "open" | "closed", target: Target, amount: number, seconds: number) {
  return runLoad(mode, target.url, target.bodyFile, target.headers, amount, seconds);
}

async function startSluice(environment: Record<string, string | undefined>): Promise<{ child: Bun.Subprocess; port: number }> {
  const port = freePort();
  const child = start([sluiceBinary, "serve"], { ...environment, SLUICE_PORT: String(port) });
  await waitForPort(port);
  return { child, port };
}

/** Fills a database with keys and ledger rows, straight through SQLite (the CLI would take hours for 1M keys). */
function fillDatabase(path: string, rows: number): void {
  const database = new Database(path, { strict: true });
  database.run("PRAGMA journal_mode = WAL");
  const organizationId = (database.query("SELECT id FROM organizations LIMIT 1").get() as { id: string }).id;
  const insertKey = database.query(
    "INSERT INTO api_keys (id, organization_id, name, prefix, hash, created_at) VALUES (?, ?, 'filler', 'sk-sluice-xxxx', ?, ?)",
  );
  const insertRow = database.query(
    `INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at)
     VALUES (?, ?, 'key_filler', 'bench', 12, 11, 6, 'completed', 'upstream', ?, ?)`,
  );
  // Each row's prompt and completion tokens above.
  const fillerTokens = 12 + 11;
  const fillerKinds = { promptTokens: 12, completionTokens: 11, cachedTokens: 0 };
  const fold = new UsageFold();
  const now = Date.now();
  database.transaction(() => {
    for (let index = 0; index < rows; index++) {
      insertKey.run(`key_fill${index}`, organizationId, hashKeySecret(`sk-sluice-filler-${index}`), now);
      const at = now - Math.floor((index / rows) * 30 * 86_400_000);
      // A request id as Sluice would have written it at that time, so that the history sorts before every id a request
      // makes now, as real history does. Ids that sorted after them ("req_fill…") put every new row in front of a
      // million others in the primary key, which cost the phase about 8 % (bench/HISTORY.md, forty-fourth session).
      insertRow.run(newRequestId(at), organizationId, at, at);
      fold.add(organizationId, fillerTokens, at);
      fold.addToHistory(organizationId, "key_filler", "bench", fillerKinds, fillerTokens, at);
    }
    // The aggregates the ledger's commits keep beside it, which a start-up rebuilds admission from: summed as the
    // ledger's own writers sum them.
    addToAggregates(database, fold);
  })();
  database.close();
}

async function main(): Promise<void> {
  log(`building dist/sluice`);
  const build = Bun.spawnSync(["make", "-s", "build"], { cwd: root, stdout: "inherit", stderr: "inherit" });
  if (build.exitCode !== 0) throw new Error("make build failed");

  const upstreamPort = freePort();
  start([bun, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort), String(settings.streamTokens), String(settings.paceMs)]);
  await waitForPort(upstreamPort);
  const barePort = freePort();
  let bare = start([bun, join(import.meta.dir, "bare-proxy.ts"), String(barePort), `http://127.0.0.1:${upstreamPort}`], lifted);
  await waitForPort(barePort);
  // The yardsticks of the unavoidable work (bench/reference-proxy.ts): JSON parsed both ways, then that plus a
  // durable row per request. Sluice is reported against them as well as against the bare pipe.
  const referencePorts = { parse: freePort(), durable: freePort() };
  for (const [mode, port] of Object.entries(referencePorts)) {
    start([bun, join(import.meta.dir, "reference-proxy.ts"), mode, String(port), `http://127.0.0.1:${upstreamPort}`, join(work, "reference.db")], lifted);
    await waitForPort(port);
  }
  const sluiceDirectory = join(work, "sluice");
  require("node:fs").mkdirSync(sluiceDirectory);
  const { environment, key } = await prepareSluice(sluiceBinary, sluiceDirectory, upstreamPort);
  let sluice = await startSluice(environment);
  // The whole of Sluice's work for a whole answer, every check on, in the simplest code (bench/full-reference.ts),
  // on a database of its own prepared as Sluice's is.
  const fullReferenceDirectory = join(work, "full-reference");
  require("node:fs").mkdirSync(fullReferenceDirectory);
  const fullReferenceSetup = await prepareSluice(sluiceBinary, fullReferenceDirectory, upstreamPort);
  const fullReferencePort = freePort();
  /** `environment`: the stream phase runs it a second time without generations in the collector, as Sluice runs. */
  const startFullReference = async (port: number, environment: Record<string, string | undefined> = lifted): Promise<Bun.Subprocess> => {
    const child = start(
      [bun, join(import.meta.dir, "full-reference.ts"), String(port), `http://127.0.0.1:${upstreamPort}`, fullReferenceSetup.environment.SLUICE_DB as string],
      environment,
    );
    await waitForPort(port);
    return child;
  };
  let fullReference = await startFullReference(fullReferencePort);

  const direct: Target = {
    name: "direct",
    url: `http://127.0.0.1:${upstreamPort}/v1/chat/completions`,
    headers: {},
    bodyFile: await writeBody("direct", "bench-upstream", false),
  };
  const bareTarget: Target = {
    name: "bare",
    url: `http://127.0.0.1:${barePort}/v1/chat/completions`,
    headers: {},
    bodyFile: direct.bodyFile,
    pid: bare.pid,
  };
  const sluiceTarget = (port: number): Target => ({
    name: "sluice",
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: { Authorization: `Bearer ${key}` },
    bodyFile: join(work, "sluice.json"),
  });
  await writeBody("sluice", "bench", false);
  const referenceTarget = (name: "parse" | "durable"): Target => ({
    name: `${name}_reference`,
    url: `http://127.0.0.1:${referencePorts[name]}/v1/chat/completions`,
    headers: {},
    bodyFile: join(work, "sluice.json"),
  });
  const fullReferenceTarget: Target = {
    name: "full_reference",
    url: `http://127.0.0.1:${fullReferencePort}/v1/chat/completions`,
    headers: { Authorization: `Bearer ${fullReferenceSetup.key}` },
    bodyFile: join(work, "sluice.json"),
    pid: fullReference.pid,
  };
  const targets: Target[] = [
    direct,
    bareTarget,
    { ...sluiceTarget(sluice.port), pid: sluice.child.pid },
    referenceTarget("parse"),
    referenceTarget("durable"),
    fullReferenceTarget,
  ];
  /**
   * The latency phase: the bare pipe, Sluice, the reference that commits a row per request as Sluice does, and the
   * one that does every check Sluice does (what the checks themselves cost the tail).
   */
  const latencyTargets = [direct, bareTarget, sluiceTarget(sluice.port), referenceTarget("durable"), fullReferenceTarget];

  let portkeyTarget: Target | undefined;
  if (settings.portkey) {
    const portkeyDirectory = join(import.meta.dir, ".portkey");
    if (!existsSync(join(portkeyDirectory, "node_modules/@portkey-ai/gateway"))) {
      log("installing @portkey-ai/gateway into bench/.portkey");
      Bun.spawnSync(
        [
          "npm",
          "install",
          "--prefix",
          portkeyDirectory,
          "--no-save",
          "--no-package-lock",
          "--no-audit",
          "--no-fund",
          "--loglevel=error",
          "@portkey-ai/gateway@1.15.2",
        ],
        { stdout: "inherit", stderr: "inherit" },
      );
    }
    const portkeyPort = freePort();
    start([bun, join(portkeyDirectory, "node_modules/@portkey-ai/gateway/build/start-server.js"), `--port=${portkeyPort}`, "--headless"], {
      ...lifted,
      NODE_ENV: "production",
    });
    await waitForPort(portkeyPort, 30_000);
    portkeyTarget = {
      name: "portkey",
      url: `http://127.0.0.1:${portkeyPort}/v1/chat/completions`,
      headers: { Authorization: "Bearer unused", "x-portkey-provider": "openai", "x-portkey-custom-host": `http://127.0.0.1:${upstreamPort}/v1` },
      bodyFile: direct.bodyFile,
    };
    targets.push(portkeyTarget);
  }

  log("1/5 whole answers, closed loop");
  const rps: Record<string, number[]> = {};
  /** CPU an answer (measuredLoop), each measured target's rounds. */
  const cpuRounds: Record<string, Record<string, number>[]> = {};
  if (phase("nonstream")) for (const target of targets) await closedLoop(target, settings.closedWarmupSeconds);
  for (let round = 0; phase("nonstream") && round < settings.rounds; round++) {
    // Interleaved, so that drift in the machine affects every target alike.
    for (const target of targets) {
      const rounds = rps[target.name] ?? [];
      rps[target.name] = rounds;
      const measured = await measuredLoop(target, settings.seconds);
      rounds.push(measured.rps);
      if (measured.cpu) {
        const cpu = cpuRounds[target.name] ?? [];
        cpuRounds[target.name] = cpu;
        cpu.push(measured.cpu);
      }
    }
  }
  const nonstreamMedian = (name: string) => (rps[name] ? median(rps[name]) : null);
  const sluiceRps = nonstreamMedian("sluice") ?? Number.NaN;

  log(`2/5 latency at ${settings.rate} requests per second, open loop`);
  const latency: Record<string, { p50: number[]; p99: number[] }> = {};
  if (phase("latency")) for (const target of latencyTargets) await runTargetLoad("open", target, settings.rate, settings.warmupSeconds);
  for (let round = 0; phase("latency") && round < settings.rounds; round++) {
    for (const target of latencyTargets) {
      const result = await runTargetLoad("open", target, settings.rate, settings.latencySeconds);
      const entry = latency[target.name] ?? { p50: [], p99: [] };
      latency[target.name] = entry;
      entry.p50.push(result.p50_ms);
      entry.p99.push(result.p99_ms);
    }
  }

  log(`3/5 ${settings.streams} concurrent streams of ${settings.streamTokens} tokens`);
  const streamBody = await writeBody("direct-stream", "bench-upstream", true);
  const sluiceStreamBody = await writeBody("sluice-stream", "bench", true);
  /** One round against a freshly started server: a warm-up of a tenth of the streams, then the peak is reset. */
  const streamRound = (pid: number, url: string, bodyFile: string, headers: Record<string, string>) =>
    measureStreamRound(pid, { url, bodyFile, headers, tokens: settings.streamTokens, environment: lifted }, settings.streams);
  const streamRounds: Record<"bare" | "durable_reference" | "full_reference" | "full_reference_no_generations" | "sluice", StreamRound[]> = {
    bare: [],
    durable_reference: [],
    full_reference: [],
    full_reference_no_generations: [],
    sluice: [],
  };
  for (let round = 0; phase("streams") && round < settings.rounds; round++) {
    // Fresh processes every round, so that memory and queues left by one round do not carry into the next.
    await stop(bare);
    bare = start([bun, join(import.meta.dir, "bare-proxy.ts"), String(barePort), `http://127.0.0.1:${upstreamPort}`], lifted);
    await waitForPort(barePort);
    streamRounds.bare.push(await streamRound(bare.pid as number, bareTarget.url, streamBody, {}));
    // The unavoidable work of a metered stream: every event parsed and re-encoded, a durable row before [DONE].
    const referencePort = freePort();
    const reference = start(
      [
        bun,
        join(import.meta.dir, "reference-proxy.ts"),
        "durable",
        String(referencePort),
        `http://127.0.0.1:${upstreamPort}`,
        join(work, `streams-${round}.db`),
      ],
      lifted,
    );
    await waitForPort(referencePort);
    streamRounds.durable_reference.push(
      await streamRound(reference.pid as number, `http://127.0.0.1:${referencePort}/v1/chat/completions`, sluiceStreamBody, {}),
    );
    await stop(reference);
    // The whole of Sluice's work for a stream, every check on, in the simplest code: what the checks cost a stream.
    // Then the same with the collector's settings Sluice runs with on SQLite (src/start-environment.ts: no generations,
    // which keeps the stream peak under its target, and the heap floor): every check and the memory target together.
    await stop(fullReference);
    for (const [side, referenceEnvironment] of [
      ["full_reference", lifted],
      ["full_reference_no_generations", { ...lifted, ...sqliteDefaults }],
    ] as const) {
      const streamReferencePort = freePort();
      fullReference = await startFullReference(streamReferencePort, referenceEnvironment);
      streamRounds[side].push(
        await streamRound(fullReference.pid as number, `http://127.0.0.1:${streamReferencePort}/v1/chat/completions`, sluiceStreamBody, {
          Authorization: `Bearer ${fullReferenceSetup.key}`,
        }),
      );
      await stop(fullReference);
    }
    await stop(sluice.child);
    sluice = await startSluice(environment);
    streamRounds.sluice.push(
      await streamRound(sluice.child.pid as number, sluiceTarget(sluice.port).url, sluiceStreamBody, { Authorization: `Bearer ${key}` }),
    );
  }
  /** Medians over the rounds; `completed` is the worst round's, since every stream of every round must arrive. */
  const streamSummary = (runs: StreamRound[]) => ({
    completed: runs.length ? Math.min(...runs.map((run) => run.completed)) : 0,
    peakMb: median(runs.map((run) => run.peakMb)),
    ttftP50: median(runs.map((run) => run.ttft_p50_ms)),
    ttftP99: median(runs.map((run) => run.ttft_p99_ms)),
  });
  const bareStreams = streamSummary(streamRounds.bare);
  const sluiceStreams = streamSummary(streamRounds.sluice);
  const referenceStreams = streamSummary(streamRounds.durable_reference);
  const fullReferenceStreams = streamSummary(streamRounds.full_reference);
  const noGenerationsStreams = streamSummary(streamRounds.full_reference_no_generations);

  log(`4/5 scale: ${settings.scaleRows} keys and ${settings.scaleRows} ledger rows`);
  let emptyRps = Number.NaN;
  let fullRps = Number.NaN;
  const scaleRounds: { empty: number[]; full: number[] } = { empty: [], full: [] };
  const startToFirstAnswerMs = { empty: Number.NaN, full: Number.NaN };
  await stop(sluice.child);
  if (phase("scale")) {
    // Both databases are fresh (the main one holds the earlier phases' ledger rows), and their rounds alternate,
    // so that drift in the machine affects both alike.
    const scaleServer = async (name: string, rows: number) => {
      const directory = join(work, name);
      require("node:fs").mkdirSync(directory);
      const prepared = await prepareSluice(sluiceBinary, directory, upstreamPort);
      if (rows > 0) fillDatabase(prepared.environment.SLUICE_DB as string, rows);
      const port = freePort();
      const began = performance.now();
      const child = start([sluiceBinary, "serve"], { ...prepared.environment, SLUICE_PORT: String(port) });
      // Start-up with the database's history: migrations, the admission state restored from the aggregates.
      await waitForFirstAnswer(`http://127.0.0.1:${port}/v1/chat/completions`, prepared.key);
      startToFirstAnswerMs[name === "empty" ? "empty" : "full"] = performance.now() - began;
      return { child, target: { ...sluiceTarget(port), headers: { Authorization: `Bearer ${prepared.key}` } } };
    };
    const empty = await scaleServer("empty", 0);
    const full = await scaleServer("full", settings.scaleRows);
    for (const side of [empty, full]) await closedLoop(side.target, settings.warmupSeconds);
    for (let round = 0; round < settings.rounds; round++) {
      scaleRounds.empty.push(await closedLoop(empty.target, settings.seconds));
      scaleRounds.full.push(await closedLoop(full.target, settings.seconds));
    }
    emptyRps = median(scaleRounds.empty);
    fullRps = median(scaleRounds.full);
    await stop(empty.child);
    await stop(full.child);
  }

  log("5/5 the executable: start-up to first answer, idle memory, size");
  const startups: number[] = [];
  const idleRsses: number[] = [];
  for (let attempt = 0; phase("binary") && attempt < (smoke ? 1 : 5); attempt++) {
    const port = freePort();
    const began = performance.now();
    const child = start([sluiceBinary, "serve"], { ...environment, SLUICE_PORT: String(port) });
    await waitForFirstAnswer(`http://127.0.0.1:${port}/v1/chat/completions`, key);
    startups.push(performance.now() - began);
    await Bun.sleep(1000);
    idleRsses.push(memoryOf(child.pid as number).rssMb);
    await stop(child);
  }

  const safetyRun = phase("safety")
    ? Bun.spawnSync([bun, join(import.meta.dir, "safety.ts")], { stdout: "pipe" })
        .stdout.toString()
        .trim()
    : "{}";
  const safety = JSON.parse(safetyRun || "{}") as { input_check_us?: number; output_chunk_us?: number; prompt_chars?: number };

  const bareRps = nonstreamMedian("bare") ?? Number.NaN;
  const portkeyRps = nonstreamMedian("portkey");
  const parseRps = nonstreamMedian("parse_reference") ?? Number.NaN;
  const durableRps = nonstreamMedian("durable_reference") ?? Number.NaN;
  const fullReferenceRps = nonstreamMedian("full_reference") ?? Number.NaN;
  const results = {
    date: new Date().toISOString(),
    smoke,
    machine: { cores: navigator.hardwareConcurrency, bun_version: Bun.version, load_generator: hasWrk ? "wrk -t2" : "bench/load.ts" },
    rounds: settings.rounds,
    nonstream: {
      connections: settings.connections,
      direct_rps: nonstreamMedian("direct"),
      bare_proxy_rps: bareRps,
      sluice_rps: sluiceRps,
      portkey_rps: portkeyRps,
      sluice_vs_bare: sluiceRps / bareRps,
      sluice_vs_portkey: portkeyRps ? sluiceRps / portkeyRps : null,
      parse_reference_rps: parseRps,
      durable_reference_rps: durableRps,
      parse_reference_vs_bare: parseRps / bareRps,
      durable_reference_vs_bare: durableRps / bareRps,
      sluice_vs_parse_reference: sluiceRps / parseRps,
      sluice_vs_durable_reference: sluiceRps / durableRps,
      full_reference_rps: fullReferenceRps,
      full_reference_vs_bare: fullReferenceRps / bareRps,
      full_reference_vs_portkey: portkeyRps ? fullReferenceRps / portkeyRps : null,
      sluice_vs_full_reference: sluiceRps / fullReferenceRps,
      // Each round's own ratio, then their median: rounds of one run here move by a third (bench/HISTORY.md).
      sluice_vs_bare_paired: pairedRatio(rps.sluice ?? [], rps.bare ?? []),
      full_reference_vs_bare_paired: pairedRatio(rps.full_reference ?? [], rps.bare ?? []),
      sluice_vs_full_reference_paired: pairedRatio(rps.sluice ?? [], rps.full_reference ?? []),
      sluice_vs_portkey_paired: rps.portkey ? pairedRatio(rps.sluice ?? [], rps.portkey) : null,
      cpu_us_per_answer: {
        bare: medianByThread(cpuRounds.bare ?? []),
        sluice: medianByThread(cpuRounds.sluice ?? []),
        full_reference: medianByThread(cpuRounds.full_reference ?? []),
      },
    },
    latency: {
      rate: settings.rate,
      direct_p50_ms: median(latency.direct?.p50 ?? []),
      direct_p99_ms: median(latency.direct?.p99 ?? []),
      bare_p50_ms: median(latency.bare?.p50 ?? []),
      bare_p99_ms: median(latency.bare?.p99 ?? []),
      sluice_p50_ms: median(latency.sluice?.p50 ?? []),
      sluice_p99_ms: median(latency.sluice?.p99 ?? []),
      durable_reference_p50_ms: median(latency.durable_reference?.p50 ?? []),
      durable_reference_p99_ms: median(latency.durable_reference?.p99 ?? []),
      full_reference_p50_ms: median(latency.full_reference?.p50 ?? []),
      full_reference_p99_ms: median(latency.full_reference?.p99 ?? []),
    },
    streams: {
      concurrent: settings.streams,
      tokens: settings.streamTokens,
      bare_completed: bareStreams.completed,
      completed: sluiceStreams.completed,
      bare_peak_rss_mb: bareStreams.peakMb,
      sluice_peak_rss_mb: sluiceStreams.peakMb,
      bare_ttft_p50_ms: bareStreams.ttftP50,
      bare_ttft_p99_ms: bareStreams.ttftP99,
      sluice_ttft_p50_ms: sluiceStreams.ttftP50,
      sluice_ttft_p99_ms: sluiceStreams.ttftP99,
      durable_reference_completed: referenceStreams.completed,
      durable_reference_peak_rss_mb: referenceStreams.peakMb,
      durable_reference_ttft_p50_ms: referenceStreams.ttftP50,
      durable_reference_ttft_p99_ms: referenceStreams.ttftP99,
      full_reference_completed: fullReferenceStreams.completed,
      full_reference_peak_rss_mb: fullReferenceStreams.peakMb,
      full_reference_ttft_p50_ms: fullReferenceStreams.ttftP50,
      full_reference_ttft_p99_ms: fullReferenceStreams.ttftP99,
      full_reference_no_generations_completed: noGenerationsStreams.completed,
      full_reference_no_generations_peak_rss_mb: noGenerationsStreams.peakMb,
      full_reference_no_generations_ttft_p50_ms: noGenerationsStreams.ttftP50,
      full_reference_no_generations_ttft_p99_ms: noGenerationsStreams.ttftP99,
    },
    scale: {
      keys: settings.scaleRows,
      ledger_rows: settings.scaleRows,
      empty_rps: emptyRps,
      full_rps: fullRps,
      rps_full_vs_empty: fullRps / emptyRps,
      start_to_first_answer_ms: startToFirstAnswerMs,
    },
    binary: { startup_ms: median(startups), idle_rss_mb: median(idleRsses), size_mb: statSync(sluiceBinary).size / 1024 / 1024 },
    // Every round's value behind the medians above: on a noisy machine the spread says as much as the median.
    rounds_detail: { nonstream_rps: rps, latency_ms: latency, streams: streamRounds, scale_rps: scaleRounds },
    safety: { prompt_chars: safety.prompt_chars ?? null, input_check_us: safety.input_check_us ?? null, output_chunk_us: safety.output_chunk_us ?? null },
  };
  const output = join(import.meta.dir, "results", smoke ? "smoke.json" : only ? "partial.json" : "latest.json");
  // bench/shared.ts writes its own section of latest.json (`make bench` runs it next): a run of this runner alone keeps
  // the last one, with its own date, rather than dropping it.
  const shared = output.endsWith("latest.json") && existsSync(output) ? ((await Bun.file(output).json()) as { shared?: unknown }).shared : undefined;
  await Bun.write(output, `${JSON.stringify(shared === undefined ? results : { ...results, shared }, null, 2)}\n`);
  const fixed = (value: number | null, digits = 2) => (value === null || Number.isNaN(value) ? "-" : value.toFixed(digits));
  const threadLine = (threads: Record<string, number>) =>
    Object.entries(threads)
      .map(([thread, microseconds]) => `${thread} ${microseconds}`)
      .join(", ") || "-";
  const n = results.nonstream;
  const l = results.latency;
  const s = results.streams;
  console.log(`
Whole answers (closed loop, ${settings.connections} connections, median of ${settings.rounds})
  direct ${fixed(n.direct_rps, 0)} rps | bare proxy ${fixed(n.bare_proxy_rps, 0)} | Sluice ${fixed(n.sluice_rps, 0)} | Portkey ${fixed(n.portkey_rps, 0)}
  Sluice / bare proxy ${fixed(n.sluice_vs_bare)} (target >= 0.8) | Sluice / Portkey ${fixed(n.sluice_vs_portkey)} (target >= 3)
  paired (median of each round's own ratio): Sluice / bare ${fixed(n.sluice_vs_bare_paired)}, full reference / bare ${fixed(n.full_reference_vs_bare_paired)}, Sluice / full reference ${fixed(n.sluice_vs_full_reference_paired)}, Sluice / Portkey ${fixed(n.sluice_vs_portkey_paired)}
  references: JSON parsed both ways ${fixed(n.parse_reference_rps, 0)} rps (${fixed(n.parse_reference_vs_bare)} x bare), plus a durable row ${fixed(n.durable_reference_rps, 0)} rps (${fixed(n.durable_reference_vs_bare)} x bare); Sluice / durable reference ${fixed(n.sluice_vs_durable_reference)}
  full reference (every check, simplest code) ${fixed(n.full_reference_rps, 0)} rps (${fixed(n.full_reference_vs_bare)} x bare, ${fixed(n.full_reference_vs_portkey)} x Portkey); Sluice / full reference ${fixed(n.sluice_vs_full_reference)}
  CPU an answer by thread, µs (medians): ${(["bare", "sluice", "full_reference"] as const).map((name) => `${name} ${threadLine(n.cpu_us_per_answer[name])}`).join(" | ")}
Latency at ${l.rate} rps (open loop): p50 / p99 ms
  direct ${fixed(l.direct_p50_ms)} / ${fixed(l.direct_p99_ms)} | bare ${fixed(l.bare_p50_ms)} / ${fixed(l.bare_p99_ms)} | Sluice ${fixed(l.sluice_p50_ms)} / ${fixed(l.sluice_p99_ms)}
  Sluice - bare: p50 +${fixed(l.sluice_p50_ms - l.bare_p50_ms)} ms (target <= 0.3), p99 +${fixed(l.sluice_p99_ms - l.bare_p99_ms)} ms (target <= 1)
  durable reference ${fixed(l.durable_reference_p50_ms)} / ${fixed(l.durable_reference_p99_ms)} | full reference ${fixed(l.full_reference_p50_ms)} / ${fixed(l.full_reference_p99_ms)}; Sluice - full reference: p99 ${fixed(l.sluice_p99_ms - l.full_reference_p99_ms)} ms
Streams: ${s.concurrent} x ${s.tokens} tokens
  completed: bare ${s.bare_completed}, durable reference ${s.durable_reference_completed}, full reference ${s.full_reference_completed} (without generations ${s.full_reference_no_generations_completed}), Sluice ${s.completed} | peak RSS: bare ${fixed(s.bare_peak_rss_mb, 0)} MB, durable reference ${fixed(s.durable_reference_peak_rss_mb, 0)} MB, full reference ${fixed(s.full_reference_peak_rss_mb, 0)} MB (without generations ${fixed(s.full_reference_no_generations_peak_rss_mb, 0)}), Sluice ${fixed(s.sluice_peak_rss_mb, 0)} MB (target < 200)
  TTFT p50 / p99 ms: bare ${fixed(s.bare_ttft_p50_ms)} / ${fixed(s.bare_ttft_p99_ms)}, durable reference ${fixed(s.durable_reference_ttft_p50_ms)} / ${fixed(s.durable_reference_ttft_p99_ms)}, full reference ${fixed(s.full_reference_ttft_p50_ms)} / ${fixed(s.full_reference_ttft_p99_ms)} (without generations ${fixed(s.full_reference_no_generations_ttft_p50_ms)} / ${fixed(s.full_reference_no_generations_ttft_p99_ms)}), Sluice ${fixed(s.sluice_ttft_p50_ms)} / ${fixed(s.sluice_ttft_p99_ms)} (target p99 <= 1.3 x bare: ${fixed(s.sluice_ttft_p99_ms / s.bare_ttft_p99_ms)})
  connections dropped at a full accept queue, by round (each waits a 1 s retransmit): ${Object.entries(results.rounds_detail.streams)
    .map(([name, runs]) => `${name} ${runs.map((run) => run.listenOverflows).join("/")}`)
    .join(", ")}
Scale: ${results.scale.keys} keys, ${results.scale.ledger_rows} ledger rows: ${fixed(results.scale.full_rps, 0)} rps vs ${fixed(results.scale.empty_rps, 0)} empty = ${fixed(results.scale.rps_full_vs_empty)} (target >= 0.9); start-up to the first answer ${fixed(results.scale.start_to_first_answer_ms.full, 0)} ms (empty ${fixed(results.scale.start_to_first_answer_ms.empty, 0)} ms)
Executable: start-up to first answer ${fixed(results.binary.startup_ms, 0)} ms (target < 100), idle RSS ${fixed(results.binary.idle_rss_mb, 0)} MB (target < 60), ${fixed(results.binary.size_mb, 0)} MB
Safety rules alone: input check of a ${results.safety.prompt_chars ?? "-"}-character prompt ${fixed(results.safety.input_check_us, 1)} µs, output check per streamed chunk ${fixed(results.safety.output_chunk_us, 1)} µs
Written to ${output}`);
}

try {
  await main();
} finally {
  for (const child of children) child.kill();
  // A server still exiting can write its database's last files into `work` while it is being removed.
  await Promise.all(children.map((child) => child.exited));
  rmSync(work, { recursive: true, force: true });
}
