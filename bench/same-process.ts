// Sluice and the full reference (bench/full-reference.ts) served by one process, loaded in turn by wrk -c64 with
// whole answers: the same runtime, heap, allocator, threads and fetch client, so whatever differs between the two is
// the code each request runs, not the process around it. Rounds alternate which side goes first; each reports
// requests a second and CPU time per request, of the event loop's thread and of the whole process (Sluice's writer
// and fetch's HTTP thread included), read from /proc; then the medians, and the median of each round's own
// Sluice ÷ reference. The reference's own switches (REFERENCE_SKIP, REFERENCE_LEDGER) pass through.
//   bun bench/same-process.ts [--rounds 6] [--seconds 5] [--smoke]
// Writes bench/results/same-process.json (--smoke: one round of 1 s into same-process-smoke.json; a test does, to
// keep the runner working).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { runWrk, writeWrkScript } from "./load-driver";
import { freePort, waitForPort } from "./ports";
import { cpuMicroseconds } from "./process-cpu";
import { prepareSluice, waitForFirstAnswer, writeSourceCli } from "./sluice-setup";
import { median } from "./statistics";

const bun = process.execPath;

if (process.argv[2] === "--serve") await serveBoth();
else await compare();

/** The child: Sluice from source on SLUICE_PORT, then the full reference on REFERENCE_PORT, in this one process. */
async function serveBoth(): Promise<void> {
  const { runCommand } = (await import("../src/cli/run")) as typeof import("../src/cli/run");
  void runCommand(["serve"]);
  await waitForPort(Number(process.env.SLUICE_PORT));
  // The reference reads its port, upstream and database from its arguments when it is loaded.
  process.argv = [bun, "full-reference", process.env.REFERENCE_PORT as string, process.env.REFERENCE_UPSTREAM as string, process.env.SLUICE_DB as string];
  await import("./full-reference");
}

type Side = "sluice" | "reference";
interface Round {
  rps: number;
  eventLoopMicroseconds: number;
  processMicroseconds: number;
}

async function compare(): Promise<void> {
  const { values } = parseArgs({
    options: { rounds: { type: "string", default: "6" }, seconds: { type: "string", default: "5" }, smoke: { type: "boolean", default: false } },
  });
  const smoke = values.smoke;
  const rounds = smoke ? 1 : Number(values.rounds);
  const seconds = smoke ? 1 : Number(values.seconds);
  const work = mkdtempSync(join(tmpdir(), "sluice-same-process-"));
  const lifted = { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
  const children: Bun.Subprocess[] = [];
  try {
    const upstreamPort = freePort();
    children.push(Bun.spawn([bun, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort)], { env: lifted, stdout: "ignore", stderr: "ignore" }));
    await waitForPort(upstreamPort);
    const directory = join(work, "data");
    mkdirSync(directory);
    const { environment, key } = await prepareSluice(writeSourceCli(work), directory, upstreamPort);
    const ports = { sluice: freePort(), reference: freePort() };
    const server = Bun.spawn([bun, import.meta.path, "--serve"], {
      env: {
        ...lifted,
        ...environment,
        // As `serve` restarts itself with (src/start-environment.ts), which this child does not go through.
        MIMALLOC_PURGE_HOLES_MIN_INTERVAL: "1000",
        SLUICE_PORT: String(ports.sluice),
        REFERENCE_PORT: String(ports.reference),
        REFERENCE_UPSTREAM: `http://127.0.0.1:${upstreamPort}`,
      },
      stdout: "ignore",
      stderr: "inherit",
    });
    children.push(server);
    const urls = {
      sluice: `http://127.0.0.1:${ports.sluice}/v1/chat/completions`,
      reference: `http://127.0.0.1:${ports.reference}/v1/chat/completions`,
    };
    await waitForPort(ports.reference);
    await waitForFirstAnswer(urls.sluice, key);
    const body = JSON.stringify({ model: "bench", messages: [{ role: "user", content: "hi" }] });
    const script = await writeWrkScript(join(work, "post.lua"), body, { Authorization: `Bearer ${key}` });
    for (const side of ["sluice", "reference"] as const) await runWrk(urls[side], script, { threads: 2, connections: 64, seconds: smoke ? 1 : 3 });

    const measured: Record<Side, Round>[] = [];
    for (let round = 0; round < rounds; round++) {
      const order: Side[] = round % 2 === 0 ? ["sluice", "reference"] : ["reference", "sluice"];
      const pair: Partial<Record<Side, Round>> = {};
      for (const side of order) {
        const before = cpuMicroseconds(server.pid);
        const result = await runWrk(urls[side], script, { threads: 2, connections: 64, seconds });
        const after = cpuMicroseconds(server.pid);
        if (!(result.requests > 0)) throw new Error(`${side}: wrk reported no requests`);
        if (result.non2xx > 0) throw new Error(`${side}: ${result.non2xx} answers were not 200`);
        pair[side] = {
          rps: Math.round(result.rps),
          eventLoopMicroseconds: round1((after.main - before.main) / result.requests),
          processMicroseconds: round1((after.process - before.process) / result.requests),
        };
      }
      const { sluice, reference } = pair as Record<Side, Round>;
      measured.push({ sluice, reference });
      console.log(
        `round ${round + 1}: Sluice ${sluice.rps}/s, ${sluice.eventLoopMicroseconds} µs event loop, ${sluice.processMicroseconds} µs process; ` +
          `reference ${reference.rps}/s, ${reference.eventLoopMicroseconds} µs, ${reference.processMicroseconds} µs`,
      );
    }
    const medians = (side: Side) => ({
      rps: median(measured.map((pair) => pair[side].rps)),
      event_loop_us: median(measured.map((pair) => pair[side].eventLoopMicroseconds)),
      process_us: median(measured.map((pair) => pair[side].processMicroseconds)),
    });
    const ratios = (field: keyof Round) => measured.map((pair) => pair.sluice[field] / pair.reference[field]);
    const summary = {
      rounds,
      seconds,
      sluice: medians("sluice"),
      reference: medians("reference"),
      // Sluice ÷ reference, the median of each round's own ratio.
      paired: {
        rps: round3(median(ratios("rps"))),
        event_loop_us: round3(median(ratios("eventLoopMicroseconds"))),
        process_us: round3(median(ratios("processMicroseconds"))),
      },
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

function round1(value: number): number {
  return Math.round(value * 10) / 10;
}

function round3(value: number): number {
  return Math.round(value * 1000) / 1000;
}
