// A/B of whole chat answers between the executable built from a git revision (A) and the working tree (B), in one
// run: the same fake upstream, the same configuration as `make bench` (every product check on), wrk rounds
// interleaved A, B, B, A so that drift in the machine affects both alike; medians and B ÷ A, and the median of
// each round's own B ÷ A. Besides requests a second it reports each side's CPU time per request (the event loop's
// thread, the whole process with its writer and HTTP client threads, and each thread by name), read from /proc:
// steadier than requests a second when this VM's speed moves between rounds, since a slower machine slows both the
// work and the clock alike.
// With `--latency RATE` each round is instead a 4 s `wrk -c64` burst (`--burst S`; 0 for none) and then an open loop at RATE requests a second
// for `--seconds` (bench/load.ts, as `make bench`'s latency phase): p50 and p99 of each side, and the median of each
// round's own B - A.
// With `--streams N` each round is instead N concurrent streams of 200 tokens (bench/streams.ts, as `make bench`'s
// stream phase; `--tokens` for longer ones) against freshly started A and B, each after a warm-up of a tenth of N:
// peak RSS (VmHWM, reset after the warm-up), TTFT p50 and p99, and CPU time per relayed event; `--reference` adds the
// durable reference server (bench/reference-proxy.ts) to every round as the yardstick of the unavoidable work.
// A revision before c6bdb2b listens with Bun's accept queue of 512 (src/http/listen-backlog.ts): against a later B its
// streams' TTFT p99 also counts the handshakes it loses, so compare streams with revisions from c6bdb2b on.
// `--b-env NAME=VALUE` (repeatable) starts B's server with that variable set as well.
//   bun bench/ab.ts REVISION [--rounds 4] [--seconds 6] [--latency 1000 [--burst 4] | --streams 2000 [--tokens 200] [--reference]] [--b-env NAME=VALUE]
//     [--b-revision REVISION]   (B built from a worktree of that revision too, as A is, rather than from the working tree)
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { freePort, waitForPort } from "./ports";
import { cpuPerRequest, cpuSnapshot, medianByThread } from "./process-cpu";
import { prepareSluice } from "./sluice-setup";
import { measureStreamRound } from "./stream-client";
import { median, pairedRatio } from "./statistics";
import { runLoad, runWrk, writeWrkScript } from "./load-driver";

const { values, positionals } = parseArgs({
  options: {
    rounds: { type: "string", default: "4" },
    seconds: { type: "string", default: "6" },
    latency: { type: "string" },
    burst: { type: "string", default: "4" },
    streams: { type: "string" },
    reference: { type: "boolean", default: false },
    tokens: { type: "string", default: "200" },
    "b-env": { type: "string", multiple: true, default: [] },
    "b-revision": { type: "string" },
  },
  allowPositionals: true,
});
const revision = positionals[0];
if (!revision)
  throw new Error("usage: bun bench/ab.ts REVISION [--rounds 4] [--seconds 6] [--latency RATE [--burst S] | --streams N [--tokens 200] [--reference]]");
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const latencyRate = values.latency === undefined ? undefined : Number(values.latency);
/**
 * `--burst SECONDS` (with `--latency`): the closed-loop burst before each round, 4 s by default; 0 measures the open
 * loop alone, at a steady rate, as `make bench`'s latency rounds do (they follow a warm-up at the rate, not a burst).
 */
const burstSeconds = Number(values.burst);
const streamCount = values.streams === undefined ? undefined : Number(values.streams);
/**
 * Tokens of each stream (`--tokens`; 200 as in `make bench`, more for the long streams of reasoning models), and
 * milliseconds between them at the fake upstream, as `make bench` paces them.
 */
const streamTokens = Number(values.tokens);
const streamPaceMs = 20;
/**
 * `--b-env NAME=VALUE` (repeatable): variables B's server starts with besides A's, as an operator would set them in
 * the service's environment (Sluice keeps an operator's value over its own defaults). With REVISION HEAD and an
 * unchanged tree, this prices a runtime setting alone.
 */
const sideBEnvironment: Record<string, string> = Object.fromEntries(
  (values["b-env"] as string[]).map((pair) => {
    const split = pair.indexOf("=");
    if (split < 1) throw new Error(`--b-env takes NAME=VALUE, not ${pair}`);
    return [pair.slice(0, split), pair.slice(split + 1)];
  }),
);
const root = join(import.meta.dir, "..");
const bun = process.execPath;
const work = mkdtempSync(join(tmpdir(), "sluice-ab-"));
const children: Bun.Subprocess[] = [];
/**
 * The entry points of `make build`, over revisions: ones a revision lacks are skipped (the old checkpoint thread;
 * tokenizer.ts, the tokenizer's module before 8cf1af5; tokenizer-worker.ts, its thread since).
 */
const entryPoints = [
  "src/main.ts",
  "src/cli/run.ts",
  "src/db/checkpoint-worker.ts",
  "src/ledger/ledger-worker.ts",
  "src/tokens/tokenizer.ts",
  "src/tokens/tokenizer-worker.ts",
];
/** Revisions with a recorded start are built as bytecode laid out by it, as `make build` builds them. */
const bytecodeOrder = "src/bytecode-order.txt";

function log(message: string): void {
  process.stderr.write(`[bench ab] ${message}\n`);
}

/** The executable of a source tree, built as `make build` builds it. */
function build(tree: string, outfile: string): void {
  const present = entryPoints.filter((path) => existsSync(join(tree, path)));
  const bytecode = existsSync(join(tree, bytecodeOrder)) ? ["--bytecode", "--bytecode-order", bytecodeOrder, "--format=esm"] : [];
  const result = Bun.spawnSync([bun, "build", "--compile", ...bytecode, "--minify", "--sourcemap", ...present, "--outfile", outfile], {
    cwd: tree,
    stdout: "ignore",
    stderr: "inherit",
  });
  if (result.exitCode !== 0) throw new Error(`build of ${tree} failed`);
}

/** A freshly started Sluice server from `binary`; `extra` is the environment a side adds (`--b-env` for B). */
async function startSluice(
  binary: string,
  name: string,
  upstreamPort: number,
  extra: Record<string, string> = {},
): Promise<{ port: number; key: string; pid: number }> {
  const directory = join(work, name);
  mkdirSync(directory);
  const { environment, key } = await prepareSluice(binary, directory, upstreamPort);
  const port = freePort();
  const child = Bun.spawn([binary, "serve"], { env: { ...environment, ...extra, SLUICE_PORT: String(port) }, stdout: "ignore", stderr: "ignore" });
  children.push(child);
  await waitForPort(port);
  return { port, key, pid: child.pid };
}

const body = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "What is 2+2? Answer briefly." }] });

/** p50 and p99 in milliseconds of an open loop at `rate` requests a second (bench/load.ts). */
async function openLoop(port: number, key: string, rate: number, duration: number): Promise<{ p50: number; p99: number }> {
  const bodyFile = join(work, "body.json");
  await Bun.write(bodyFile, body);
  const result = await runLoad("open", `http://127.0.0.1:${port}/v1/chat/completions`, bodyFile, { authorization: `Bearer ${key}` }, rate, duration);
  if (result.errors > 0) log(`port ${port}: ${result.errors} failed requests`);
  return { p50: result.p50_ms, p99: result.p99_ms };
}

async function wrk(port: number, key: string, duration: number): Promise<number> {
  const script = await writeWrkScript(join(work, `wrk-${port}.lua`), body, { Authorization: `Bearer ${key}` });
  const result = await runWrk(`http://127.0.0.1:${port}/v1/chat/completions`, script, { threads: 2, connections: 64, seconds: duration });
  if (result.non2xx > 0) log(`port ${port}: non-2xx responses`);
  return result.rps;
}

interface Server {
  port: number;
  key: string;
  pid: number;
}

/** Closed-loop rounds: requests a second and CPU time per request of each side. */
async function throughputRounds(a: Server, b: Server) {
  const samples = { a: [] as number[], b: [] as number[] };
  const cpu = { a: { main: [] as number[], process: [] as number[] }, b: { main: [] as number[], process: [] as number[] } };
  const threads = { a: [] as Record<string, number>[], b: [] as Record<string, number>[] };
  const measure = async (side: "a" | "b", server: Server) => {
    const before = cpuSnapshot(server.pid);
    const rps = await wrk(server.port, server.key, seconds);
    const spent = cpuPerRequest(before, cpuSnapshot(server.pid), rps * seconds);
    threads[side].push(spent.threads);
    samples[side].push(rps);
    cpu[side].main.push(Math.round(spent.threads["event loop"] ?? 0));
    cpu[side].process.push(Math.round(spent.process));
  };
  for (let round = 0; round < rounds; round++) {
    // A, B then B, A: a machine that speeds up or slows down within a pair of rounds favours neither side.
    for (const side of round % 2 === 0 ? (["a", "b"] as const) : (["b", "a"] as const)) await measure(side, side === "a" ? a : b);
    log(`round ${round + 1}: A ${samples.a.at(-1)} rps ${cpu.a.main.at(-1)} µs, B ${samples.b.at(-1)} rps ${cpu.b.main.at(-1)} µs (event loop a request)`);
  }
  return {
    revision,
    b_env: sideBEnvironment,
    rounds,
    seconds,
    a_rps: samples.a,
    b_rps: samples.b,
    a_median: median(samples.a),
    b_median: median(samples.b),
    b_vs_a: median(samples.b) / median(samples.a),
    a_event_loop_us_per_request: cpu.a.main,
    b_event_loop_us_per_request: cpu.b.main,
    a_process_us_per_request: cpu.a.process,
    b_process_us_per_request: cpu.b.process,
    b_vs_a_event_loop_us: median(cpu.b.main) / median(cpu.a.main),
    // Where each side's CPU a request went, by thread (the writer's is "Worker"), medians over the rounds.
    a_threads_us_per_request: medianByThread(threads.a),
    b_threads_us_per_request: medianByThread(threads.b),
    // The median of each round's own ratio: steadier than the ratio of medians when the machine's speed drifts.
    paired_b_vs_a_rps: pairedRatio(samples.b, samples.a),
    paired_b_vs_a_event_loop_us: pairedRatio(cpu.b.main, cpu.a.main),
    paired_b_vs_a_process_us: pairedRatio(cpu.b.process, cpu.a.process),
  };
}

/** Rounds of a burst and then an open loop at `rate` requests a second: p50 and p99 of each side. */
async function latencyRounds(a: Server, b: Server, rate: number) {
  const latency = { a: { p50: [] as number[], p99: [] as number[] }, b: { p50: [] as number[], p99: [] as number[] } };
  for (let round = 0; round < rounds; round++) {
    for (const side of round % 2 === 0 ? (["a", "b"] as const) : (["b", "a"] as const)) {
      const server = side === "a" ? a : b;
      if (burstSeconds > 0) await wrk(server.port, server.key, burstSeconds);
      const result = await openLoop(server.port, server.key, rate, seconds);
      latency[side].p50.push(Math.round(result.p50 * 1000) / 1000);
      latency[side].p99.push(Math.round(result.p99 * 100) / 100);
    }
    log(`round ${round + 1}: p50/p99 A ${latency.a.p50.at(-1)}/${latency.a.p99.at(-1)} ms, B ${latency.b.p50.at(-1)}/${latency.b.p99.at(-1)} ms`);
  }
  const paired = (samples: { a: number[]; b: number[] }) =>
    Math.round(median(samples.b.map((value, index) => value - (samples.a[index] as number))) * 1000) / 1000;
  return {
    revision,
    b_env: sideBEnvironment,
    rounds,
    seconds,
    rate,
    burst_seconds: burstSeconds,
    a_p50_ms: latency.a.p50,
    b_p50_ms: latency.b.p50,
    a_p99_ms: latency.a.p99,
    b_p99_ms: latency.b.p99,
    a_p50_median_ms: median(latency.a.p50),
    b_p50_median_ms: median(latency.b.p50),
    a_p99_median_ms: median(latency.a.p99),
    b_p99_median_ms: median(latency.b.p99),
    paired_b_minus_a_p50_ms: paired({ a: latency.a.p50, b: latency.b.p50 }),
    paired_b_minus_a_p99_ms: paired({ a: latency.a.p99, b: latency.b.p99 }),
  };
}

/** The whole-answer rounds' body, streamed. */
const streamBodyFile = join(work, "stream-body.json");

/** One side's figures over the stream rounds. */
interface StreamSide {
  peak_mb: number[];
  ttft_p50_ms: number[];
  ttft_p99_ms: number[];
  cpu_us_per_event: number[];
  completed: number[];
}

/** The durable reference server (bench/reference-proxy.ts), freshly started. */
async function startReference(name: string, upstreamPort: number): Promise<Server> {
  const port = freePort();
  const child = Bun.spawn(
    [bun, join(import.meta.dir, "reference-proxy.ts"), "durable", String(port), `http://127.0.0.1:${upstreamPort}`, join(work, `${name}.db`)],
    {
      env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
      stdout: "ignore",
      stderr: "ignore",
    },
  );
  children.push(child);
  await waitForPort(port);
  return { port, key: "", pid: child.pid };
}

/** Rounds of `count` concurrent streams, each side freshly started: peak RSS, TTFT and CPU per relayed event. */
async function streamRounds(count: number, upstreamPort: number) {
  await Bun.write(streamBodyFile, JSON.stringify({ ...JSON.parse(body), stream: true }));
  const sides = values.reference ? (["a", "b", "reference"] as const) : (["a", "b"] as const);
  const empty = (): StreamSide => ({ peak_mb: [], ttft_p50_ms: [], ttft_p99_ms: [], cpu_us_per_event: [], completed: [] });
  const results: Record<(typeof sides)[number], StreamSide> = { a: empty(), b: empty(), reference: empty() };
  for (let round = 0; round < rounds; round++) {
    for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
      const name = `streams-${side}-${round}`;
      const server =
        side === "reference"
          ? await startReference(name, upstreamPort)
          : await startSluice(join(work, `sluice-${side}`), name, upstreamPort, side === "b" ? sideBEnvironment : {});
      const url = `http://127.0.0.1:${server.port}/v1/chat/completions`;
      const headers: Record<string, string> = side === "reference" ? {} : { authorization: `Bearer ${server.key}` };
      const environment = { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
      const run = await measureStreamRound(server.pid, { url, bodyFile: streamBodyFile, headers, tokens: streamTokens, environment }, count);
      const entry = results[side];
      entry.peak_mb.push(Math.round(run.peakMb));
      entry.ttft_p50_ms.push(Math.round(run.ttft_p50_ms));
      entry.ttft_p99_ms.push(Math.round(run.ttft_p99_ms));
      entry.cpu_us_per_event.push(Math.round(run.cpuMicrosecondsPerEvent));
      entry.completed.push(run.completed);
      process.kill(server.pid);
      await children.find((child) => child.pid === server.pid)?.exited;
    }
    log(`round ${round + 1}: ${sides.map((side) => `${side} ${results[side].peak_mb.at(-1)} MB, TTFT p99 ${results[side].ttft_p99_ms.at(-1)} ms`).join("; ")}`);
  }
  const summary: Record<string, unknown> = { revision, b_env: sideBEnvironment, rounds, streams: count, tokens: streamTokens };
  for (const side of sides) {
    const entry = results[side];
    summary[side] = { ...entry, peak_mb_median: median(entry.peak_mb), ttft_p99_ms_median: median(entry.ttft_p99_ms) };
  }
  const { a, b } = results;
  summary.paired_b_minus_a_peak_mb = median(b.peak_mb.map((value, index) => value - (a.peak_mb[index] as number)));
  summary.paired_b_vs_a_ttft_p99 = median(b.ttft_p99_ms.map((value, index) => value / (a.ttft_p99_ms[index] as number)));
  return summary;
}

/** A worktree of `at` under the work directory, sharing the repository's node_modules. */
function addWorktree(path: string, at: string): void {
  if (Bun.spawnSync(["git", "worktree", "add", "--detach", path, at], { cwd: root, stdout: "ignore", stderr: "inherit" }).exitCode !== 0)
    throw new Error(`no revision ${at}`);
  if (!existsSync(join(path, "node_modules"))) symlinkSync(join(root, "node_modules"), join(path, "node_modules"));
}

const worktree = join(work, "a");
// `--b-revision`: B from a worktree as well, so that both executables are built the same way. Built in the working
// tree, module paths name node_modules directly; in a worktree, through its symlink (../../work/main/node_modules).
const bRevision = values["b-revision"];
const worktreeB = join(work, "b");
try {
  addWorktree(worktree, revision);
  if (bRevision) addWorktree(worktreeB, bRevision);
  log(`building A (${revision}) and B (${bRevision ?? "the working tree"})`);
  build(worktree, join(work, "sluice-a"));
  build(bRevision ? worktreeB : root, join(work, "sluice-b"));
  const upstreamPort = freePort();
  children.push(
    Bun.spawn([bun, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort), String(streamTokens), String(streamPaceMs)], {
      env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
      stdout: "ignore",
      stderr: "ignore",
    }),
  );
  await waitForPort(upstreamPort);
  if (streamCount !== undefined) {
    console.log(JSON.stringify(await streamRounds(streamCount, upstreamPort)));
  } else {
    const a = await startSluice(join(work, "sluice-a"), "data-a", upstreamPort);
    const b = await startSluice(join(work, "sluice-b"), "data-b", upstreamPort, sideBEnvironment);
    await wrk(a.port, a.key, 3);
    await wrk(b.port, b.key, 3);
    console.log(JSON.stringify(latencyRate === undefined ? await throughputRounds(a, b) : await latencyRounds(a, b, latencyRate)));
  }
} finally {
  for (const child of children) child.kill();
  await Promise.all(children.map((child) => child.exited));
  Bun.spawnSync(["git", "worktree", "remove", "--force", worktree], { cwd: root });
  if (bRevision) Bun.spawnSync(["git", "worktree", "remove", "--force", worktreeB], { cwd: root });
  rmSync(work, { recursive: true, force: true });
}
