// The collector's pauses behind the p99 at a fixed rate: Sluice's executable, the durable reference and the full
// reference, each started with JavaScriptCore's collection log (BUN_JSC_logGC=1), get make bench's latency scenario:
// a 4 s closed-loop burst (wrk -c64, or bench/load.ts without wrk), then an open loop at RATE requests a second.
// From the log of the open loop only: how many eden and full collections the event loop's heap ran, their pauses
// (median, p90, max), and how much each eden collection visited (the log's `v=`), beside each side's p50 and p99.
// From each request's send time (bench/load.ts's samples): how many answers came back later than 2 ms, and how many
// of those were sent in the busiest 20 ms phase of the second. Spread evenly, a phase holds about a fiftieth of them;
// a stall that comes once a second (a timer's collection) puts many more in one phase, at the same place each round.
// Targets alternate in each round, so drift in the machine affects them alike; medians of the rounds.
// Usage: make build && bun bench/gc-pauses.ts [--rounds 2] [--rate 1000] [--seconds 10]   (writes results/gc-pauses.json)
//        --smoke: one round with tiny numbers, into results/gc-pauses-smoke.json (a test does, to keep it working)
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { runLoad, runWrk, writeWrkScript } from "./load-driver";
import { freePort, waitForPort } from "./ports";
import { prepareSluice } from "./sluice-setup";
import { median, quantile } from "./statistics";

const { values } = parseArgs({
  options: { rounds: { type: "string" }, rate: { type: "string" }, seconds: { type: "string" }, smoke: { type: "boolean" } },
});
const smoke = values.smoke === true;
const rounds = smoke ? 1 : Number(values.rounds ?? 2);
const rate = smoke ? 100 : Number(values.rate ?? 1000);
const seconds = smoke ? 1 : Number(values.seconds ?? 10);
const burstSeconds = smoke ? 1 : 4;
const root = join(import.meta.dir, "..");
const binary = join(root, "dist/sluice");
const bun = process.execPath;
const lifted = { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
const work = mkdtempSync(join(tmpdir(), "sluice-gc-pauses-"));
const children: Bun.Subprocess[] = [];

interface Collection {
  heap: string;
  kind: "eden" | "full";
  pauseMs: number;
  visitedKb: number;
}

/** One side's figures, medians of the rounds. */
interface Side {
  p50_ms: number;
  p99_ms: number;
  eden_collections: number;
  eden_pause_median_ms: number;
  eden_pause_p90_ms: number;
  eden_pause_max_ms: number;
  eden_visited_median_kb: number;
  eden_pause_total_ms: number;
  full_collections: number;
  full_pause_max_ms: number;
  late_answers: number;
  /** Of the late answers, the share sent in the busiest 20 ms phase of the second (about 0.02 when spread evenly). */
  busiest_phase_share: number;
  /** Where in the second that phase began, each round (a once-a-second stall stays in place). */
  busiest_phase_ms_by_round: number[];
}

/** Answers later than this are late, for `latePhases`. */
const lateMs = 2;
/** The second is cut into phases this long. */
const phaseMs = 20;

/**
 * How the late answers of a run fall in the second: how many there were, and the busiest phase. The first second is
 * left out: the load generator's own start makes its first answers late.
 */
function latePhases(samples: [number, number][]): { late: number; busiestPhaseMs: number; share: number } {
  const phases = new Array<number>(1000 / phaseMs).fill(0);
  let late = 0;
  for (const [sentAt, latency] of samples) {
    if (sentAt < 1000 || latency <= lateMs) continue;
    late++;
    const phase = Math.floor((sentAt % 1000) / phaseMs);
    phases[phase] = (phases[phase] ?? 0) + 1;
  }
  const most = Math.max(...phases);
  return { late, busiestPhaseMs: phases.indexOf(most) * phaseMs, share: late === 0 ? 0 : most / late };
}

interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
  log: string;
}

/** The collections in a stretch of the log; the largest `v=` of a collection is what it visited in the end. */
function collectionsIn(text: string): Collection[] {
  const found: Collection[] = [];
  const pattern = /\[GC<(0x[0-9a-f]+)>: START M \d+kb => (Eden|Full)Collection([^\]]*?)=> \d+kb, p=([\d.]+)ms/g;
  for (const match of text.matchAll(pattern)) {
    const visited = [...(match[3] as string).matchAll(/ v=(\d+)kb/g)].map((found) => Number(found[1]));
    found.push({
      heap: match[1] as string,
      kind: match[2] === "Eden" ? "eden" : "full",
      pauseMs: Number(match[4]),
      visitedKb: visited.length > 0 ? Math.max(...visited) : 0,
    });
  }
  return found;
}

/** The event loop's heap: in Sluice, the writer thread logs its own collections too, far fewer. */
function eventLoopHeap(collections: Collection[]): Collection[] {
  const counts = new Map<string, number>();
  for (const collection of collections) counts.set(collection.heap, (counts.get(collection.heap) ?? 0) + 1);
  const busiest = [...counts].sort((left, right) => right[1] - left[1])[0]?.[0];
  return collections.filter((collection) => collection.heap === busiest);
}

function startLogged(command: string[], environment: Record<string, string | undefined>, log: string): Bun.Subprocess {
  const descriptor = openSync(log, "a");
  const child = Bun.spawn(command, { env: { ...environment, BUN_JSC_logGC: "1" }, stdout: "ignore", stderr: descriptor });
  closeSync(descriptor);
  children.push(child);
  return child;
}

async function writeBody(): Promise<string> {
  const path = join(work, "body.json");
  await Bun.write(path, JSON.stringify({ model: "bench", messages: [{ role: "user", content: "What is 2+2? Answer briefly." }] }));
  return path;
}

async function burst(target: Target, bodyFile: string): Promise<void> {
  if (Bun.which("wrk")) {
    const script = await writeWrkScript(join(work, `${target.name}.lua`), readFileSync(bodyFile, "utf8"), target.headers);
    await runWrk(target.url, script, { threads: 2, connections: 64, seconds: burstSeconds });
    return;
  }
  await runLoad("closed", target.url, bodyFile, target.headers, 64, burstSeconds);
}

try {
  if (!Bun.file(binary).size) throw new Error("dist/sluice is missing: run make build first");
  const upstreamPort = freePort();
  children.push(Bun.spawn([bun, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort)], { env: lifted, stdout: "ignore", stderr: "ignore" }));
  await waitForPort(upstreamPort);
  const upstream = `http://127.0.0.1:${upstreamPort}`;
  const bodyFile = await writeBody();

  const sluiceSetup = await prepareSluice(binary, mkdtempSync(join(work, "sluice-")), upstreamPort);
  const sluicePort = freePort();
  const sluiceLog = join(work, "sluice.log");
  // Without the fetch limit in its environment, serve restarts itself with its start environment, as in production.
  startLogged([binary, "serve"], { ...sluiceSetup.environment, SLUICE_PORT: String(sluicePort) }, sluiceLog);
  const durablePort = freePort();
  const durableLog = join(work, "durable.log");
  startLogged([bun, join(import.meta.dir, "reference-proxy.ts"), "durable", String(durablePort), upstream, join(work, "durable.db")], lifted, durableLog);
  const fullSetup = await prepareSluice(binary, mkdtempSync(join(work, "full-")), upstreamPort);
  const fullPort = freePort();
  const fullLog = join(work, "full.log");
  startLogged([bun, join(import.meta.dir, "full-reference.ts"), String(fullPort), upstream, fullSetup.environment.SLUICE_DB as string], lifted, fullLog);
  await Promise.all([waitForPort(sluicePort), waitForPort(durablePort), waitForPort(fullPort)]);

  const path = "/v1/chat/completions";
  const targets: Target[] = [
    { name: "sluice", url: `http://127.0.0.1:${sluicePort}${path}`, headers: { Authorization: `Bearer ${sluiceSetup.key}` }, log: sluiceLog },
    { name: "durable_reference", url: `http://127.0.0.1:${durablePort}${path}`, headers: {}, log: durableLog },
    { name: "full_reference", url: `http://127.0.0.1:${fullPort}${path}`, headers: { Authorization: `Bearer ${fullSetup.key}` }, log: fullLog },
  ];
  const results: Record<string, { p50: number[]; p99: number[]; collections: Collection[][]; phases: ReturnType<typeof latePhases>[] }> = {};
  for (let round = 0; round < rounds; round++) {
    for (const target of targets) {
      await burst(target, bodyFile);
      const offset = statSync(target.log).size;
      const samplesFile = join(work, `${target.name}-samples.json`);
      const measured = await runLoad("open", target.url, bodyFile, target.headers, rate, seconds, samplesFile);
      if (measured.errors > 0) throw new Error(`${target.name}: ${measured.errors} failed requests`);
      const text = readFileSync(target.log, "utf8").slice(offset);
      const entry = results[target.name] ?? { p50: [], p99: [], collections: [], phases: [] };
      results[target.name] = entry;
      entry.p50.push(measured.p50_ms);
      entry.p99.push(measured.p99_ms);
      entry.collections.push(eventLoopHeap(collectionsIn(text)));
      entry.phases.push(latePhases(JSON.parse(readFileSync(samplesFile, "utf8")) as [number, number][]));
      process.stderr.write(`[gc-pauses] round ${round + 1} ${target.name}: p99 ${measured.p99_ms.toFixed(2)} ms\n`);
    }
  }

  const round2 = (value: number) => Math.round(value * 100) / 100;
  const sides: Record<string, Side> = {};
  for (const [name, entry] of Object.entries(results)) {
    const eden = entry.collections.map((collections) => collections.filter((collection) => collection.kind === "eden"));
    const full = entry.collections.map((collections) => collections.filter((collection) => collection.kind === "full"));
    sides[name] = {
      p50_ms: round2(median(entry.p50)),
      p99_ms: round2(median(entry.p99)),
      eden_collections: median(eden.map((list) => list.length)),
      eden_pause_median_ms: round2(median(eden.map((list) => median(list.map((collection) => collection.pauseMs))))),
      eden_pause_p90_ms: round2(
        median(
          eden.map((list) =>
            quantile(
              list.map((collection) => collection.pauseMs),
              0.9,
            ),
          ),
        ),
      ),
      eden_pause_max_ms: round2(Math.max(0, ...eden.flat().map((collection) => collection.pauseMs))),
      eden_visited_median_kb: median(eden.map((list) => median(list.map((collection) => collection.visitedKb)))),
      eden_pause_total_ms: round2(median(eden.map((list) => list.reduce((total, collection) => total + collection.pauseMs, 0)))),
      full_collections: median(full.map((list) => list.length)),
      full_pause_max_ms: round2(Math.max(0, ...full.flat().map((collection) => collection.pauseMs))),
      late_answers: median(entry.phases.map((phases) => phases.late)),
      busiest_phase_share: round2(median(entry.phases.map((phases) => phases.share))),
      busiest_phase_ms_by_round: entry.phases.map((phases) => phases.busiestPhaseMs),
    };
  }
  const sluice = sides.sluice as Side;
  const fullReference = sides.full_reference as Side;
  const report = {
    rate,
    seconds,
    rounds,
    date: new Date().toISOString(),
    ...sides,
    sluice_vs_full_reference: {
      eden_pause_median: round2(sluice.eden_pause_median_ms / fullReference.eden_pause_median_ms),
      eden_visited_median: round2(sluice.eden_visited_median_kb / fullReference.eden_visited_median_kb),
      p99: round2(sluice.p99_ms / fullReference.p99_ms),
    },
  };
  console.log(JSON.stringify(report, null, 2));
  writeFileSync(join(import.meta.dir, "results", smoke ? "gc-pauses-smoke.json" : "gc-pauses.json"), `${JSON.stringify(report, null, 2)}\n`);
} finally {
  for (const child of children) child.kill();
  await Promise.all(children.map((child) => child.exited));
  rmSync(work, { recursive: true, force: true });
}
