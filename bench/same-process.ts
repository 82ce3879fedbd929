// Sluice and the full reference (bench/full-reference.ts) served by one process, loaded in turn by wrk -c64 with
// whole answers: the same runtime, heap, allocator, threads and fetch client, so whatever differs between the two is
// the code each request runs, not the process around it. Rounds alternate which side goes first; each reports
// requests a second and CPU time per request, of the event loop's thread and of the whole process (Sluice's writer
// and fetch's HTTP thread included), read from /proc; then the medians, and the median of each round's own
// Sluice ÷ reference, and each side's CPU per request by thread (`threads_us`: the event loop, fetch's HTTP Client,
// the ledger's Worker, the collector's HeapHelpers, the JIT). The reference's own switches (REFERENCE_SKIP,
// REFERENCE_LEDGER) pass through.
// Each `--with NAME=PARTS` serves one more copy of the full reference in the same process, doing PARTS of the work
// through Sluice's own components (REFERENCE_SLUICE, see full-reference.ts; `+` or `,` between them), reported as
// NAME ÷ reference: whether one of Sluice's components costs more than the simplest code doing the same work. Each
// side is loaded right beside a load of the reference of its own, and compared with that one.
//   bun bench/same-process.ts [--rounds 6] [--seconds 5] [--with ledger=ledger ...] [--smoke]
// Writes bench/results/same-process.json (--smoke: one round of 1 s into same-process-smoke.json; a test does, to
// keep the runner working).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { runWrk, writeWrkScript } from "./load-driver";
import { freePort, waitForPort } from "./ports";
import { cpuPerRequest, cpuSnapshot, medianByThread } from "./process-cpu";
import { prepareSourceBench, waitForFirstAnswer } from "./sluice-setup";
import { median, round1, round3 } from "./statistics";
import { startEnvironment } from "../src/start-environment";

const bun = process.execPath;

if (process.argv[2] === "--serve") await serveBoth();
else await compare();

/**
 * The child: Sluice from source on SLUICE_PORT, then the full reference on REFERENCE_PORT, then each copy of it in
 * EXTRA_REFERENCES ([name, Sluice's parts, port] triples, as JSON), in this one process.
 */
async function serveBoth(): Promise<void> {
  const { runCommand } = (await import("../src/cli/run")) as typeof import("../src/cli/run");
  void runCommand(["serve"]);
  await waitForPort(Number(process.env.SLUICE_PORT));
  const extras = JSON.parse(process.env.EXTRA_REFERENCES ?? "[]") as [string, string, number][];
  for (const [name, parts, port] of [["reference", "", Number(process.env.REFERENCE_PORT)] as const, ...extras]) {
    // The reference reads its port, upstream, database and switches when it is loaded; a query string makes each
    // copy a module of its own, with state of its own.
    process.argv = [bun, "full-reference", String(port), process.env.REFERENCE_UPSTREAM as string, process.env.SLUICE_DB as string];
    process.env.REFERENCE_SLUICE = parts;
    await import(`${import.meta.dir}/full-reference.ts?${name}`);
  }
}

/** Sluice, the full reference, and the copies of the reference named by `--with`. */
type Side = string;
interface Round {
  rps: number;
  eventLoopMicroseconds: number;
  processMicroseconds: number;
  /** CPU an answer by thread name (threadMicrosecondsBetween): where the process's time went besides the event loop. */
  threadMicroseconds: Record<string, number>;
}

async function compare(): Promise<void> {
  const { values } = parseArgs({
    options: {
      rounds: { type: "string", default: "6" },
      seconds: { type: "string", default: "5" },
      with: { type: "string", multiple: true, default: [] },
      smoke: { type: "boolean", default: false },
    },
  });
  const extras = (values.with ?? []).map((option) => {
    const [name, parts = ""] = option.split("=");
    if (!name || !/^[\w-]+$/.test(name) || name === "sluice" || name === "reference") throw new Error(`--with ${option}: give NAME=PARTS`);
    return { name, parts: parts.replaceAll("+", ",") };
  });
  const smoke = values.smoke;
  const rounds = smoke ? 1 : Number(values.rounds);
  const seconds = smoke ? 1 : Number(values.seconds);
  const work = mkdtempSync(join(tmpdir(), "sluice-same-process-"));
  const lifted = { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
  const children: Bun.Subprocess[] = [];
  try {
    const { upstreamPort, environment, key } = await prepareSourceBench(work, children, lifted);
    const ports: Record<Side, number> = { sluice: freePort(), reference: freePort() };
    for (const extra of extras) ports[extra.name] = freePort();
    const server = Bun.spawn([bun, import.meta.path, "--serve"], {
      env: {
        // As `serve` restarts itself with, which this child does not go through.
        ...startEnvironment({ ...lifted, ...environment }),
        SLUICE_PORT: String(ports.sluice),
        REFERENCE_PORT: String(ports.reference),
        REFERENCE_UPSTREAM: `http://127.0.0.1:${upstreamPort}`,
        EXTRA_REFERENCES: JSON.stringify(extras.map((extra) => [extra.name, extra.parts, ports[extra.name]])),
      },
      stdout: "ignore",
      stderr: "inherit",
    });
    children.push(server);
    const sides: Side[] = ["sluice", "reference", ...extras.map((extra) => extra.name)];
    const urls = Object.fromEntries(sides.map((side) => [side, `http://127.0.0.1:${ports[side]}/v1/chat/completions`]));
    for (const side of sides.slice(1)) await waitForPort(ports[side] as number);
    await waitForFirstAnswer(urls.sluice as string, key);
    const body = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "hi" }] });
    const script = await writeWrkScript(join(work, "post.lua"), body, { Authorization: `Bearer ${key}` });
    for (const side of sides) await runWrk(urls[side] as string, script, { threads: 2, connections: 64, seconds: smoke ? 1 : 3 });

    const measure = async (side: Side): Promise<Round> => {
      const before = cpuSnapshot(server.pid);
      const result = await runWrk(urls[side] as string, script, { threads: 2, connections: 64, seconds });
      const after = cpuSnapshot(server.pid);
      if (!(result.requests > 0)) throw new Error(`${side}: wrk reported no requests`);
      if (result.non2xx > 0) throw new Error(`${side}: ${result.non2xx} answers were not 200`);
      const spent = cpuPerRequest(before, after, result.requests);
      return {
        rps: Math.round(result.rps),
        eventLoopMicroseconds: round1(spent.threads["event loop"] ?? 0),
        processMicroseconds: round1(spent.process),
        threadMicroseconds: Object.fromEntries(Object.entries(spent.threads).map(([name, microseconds]) => [name, round1(microseconds)])),
      };
    };
    // Each side is measured right beside a load of the reference of its own, and compared with that one: this
    // machine drifts by more within a round of several sides than the differences sought.
    const compared = sides.filter((side) => side !== "reference");
    const measured: Record<Side, { side: Round; reference: Round }>[] = [];
    for (let round = 0; round < rounds; round++) {
      const measures: Record<Side, { side: Round; reference: Round }> = {};
      for (const side of round % 2 === 0 ? compared : [...compared].reverse()) {
        // Which of the two goes first alternates by round; a literal's values are measured in the order written.
        measures[side] =
          round % 2 === 0
            ? { side: await measure(side), reference: await measure("reference") }
            : { reference: await measure("reference"), side: await measure(side) };
      }
      measured.push(measures);
      const described = compared.map((side) => {
        const { side: own, reference } = measures[side] as { side: Round; reference: Round };
        return `${side} ${own.rps}/s, ${own.eventLoopMicroseconds} µs event loop, ${own.processMicroseconds} µs process (reference beside it ${reference.rps}/s, ${reference.eventLoopMicroseconds} µs, ${reference.processMicroseconds} µs)`;
      });
      console.log(`round ${round + 1}: ${described.join("; ")}`);
    }
    const pairs = (side: Side) => measured.map((round) => round[side] as { side: Round; reference: Round });
    const medianOf = (rounds: Round[]) => ({
      rps: median(rounds.map((round) => round.rps)),
      event_loop_us: median(rounds.map((round) => round.eventLoopMicroseconds)),
      process_us: median(rounds.map((round) => round.processMicroseconds)),
      threads_us: medianByThread(rounds.map((round) => round.threadMicroseconds)),
    });
    const medians = (side: Side) => medianOf(pairs(side).map((pair) => pair.side));
    // A side ÷ the reference loaded beside it: the median of each round's own ratio.
    const paired = (side: Side) => {
      const ratio = (field: "rps" | "eventLoopMicroseconds" | "processMicroseconds") =>
        round3(median(pairs(side).map((pair) => pair.side[field] / pair.reference[field])));
      return { rps: ratio("rps"), event_loop_us: ratio("eventLoopMicroseconds"), process_us: ratio("processMicroseconds") };
    };
    const summary = {
      rounds,
      seconds,
      sluice: medians("sluice"),
      reference: medianOf(compared.flatMap((side) => pairs(side).map((pair) => pair.reference))),
      // Sluice ÷ reference.
      paired: paired("sluice"),
      // Each copy of the reference with some of Sluice's components (--with): its medians, and it ÷ the reference.
      with: Object.fromEntries(extras.map((extra) => [extra.name, { sluice_parts: extra.parts, ...medians(extra.name), paired: paired(extra.name) }])),
      rounds_measured: measured,
    };
    console.log(JSON.stringify({ ...summary, rounds_measured: undefined }, null, 2));
    writeFileSync(join(import.meta.dir, "results", smoke ? "same-process-smoke.json" : "same-process.json"), `${JSON.stringify(summary, null, 2)}\n`);
  } finally {
    for (const child of children) child.kill();
    await Promise.all(children.map((child) => child.exited));
    rmSync(work, { recursive: true, force: true });
  }
}
