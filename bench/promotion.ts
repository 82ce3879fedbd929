// What each open stream holds, and what it leaves in the old generation: with N streams of 200 tokens open (the fake
// upstream at 20 ms a token, as `make bench`'s stream phase), a full collection, then an eden collection 150 ms later
// (bench/promotion-preload.ts), for Sluice (from source) and the durable reference (bench/reference-proxy.ts),
// measured the same way in one run.
// - Live: what the full collection kept, less what it kept with no stream open (a sample taken after the warm-up),
//   per open stream: heap bytes, the part of them outside the JavaScript heap (buffers, such as fetch's read buffer
//   of each response body), and objects by type.
// - Promoted: what the eden collection promoted, per open stream, in objects by type and heap bytes. Promoted garbage
//   stays in the old generation until a full collection, and with thousands of streams the collector runs few of
//   those: it is what the stream peak is made of beyond the live set (bench/HISTORY.md).
// Unlike the peak, which moves by ±40 MB between identical rounds, these counts repeat to a few percent.
// Usage: bun bench/promotion.ts [STREAMS=1000] [SAMPLES=9]   (`make bench` runs it; writes results/promotion.json)
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports";
import { prepareSluice, writeSourceCli } from "./sluice-setup";
import { median } from "./statistics";

const streams = Number(process.argv[2] ?? 1000);
const samples = Number(process.argv[3] ?? 9);
const root = join(import.meta.dir, "..");
const bun = process.execPath;
const lifted = { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
const preload = join(import.meta.dir, "promotion-preload.ts");
const work = mkdtempSync(join(tmpdir(), "sluice-promotion-"));
const children: Bun.Subprocess[] = [];

interface HeapSide {
  heapSize: number;
  extraMemorySize: number;
  objects: Record<string, number>;
}
interface Sample {
  before: HeapSide;
  after: HeapSide;
}

function ratio(numerator: number, denominator: number): number {
  return Math.round((numerator / denominator) * 100) / 100;
}

/** Objects of each type in `after` beyond `before`, per open stream; types under `least` a stream are left out. */
function addedPerStream(before: HeapSide, after: HeapSide, least: number): Record<string, number> {
  const types: Record<string, number> = {};
  for (const [type, count] of Object.entries(after.objects)) {
    const added = (count - (before.objects[type] ?? 0)) / streams;
    if (Math.abs(added) >= least) types[type] = Math.round(added * 10) / 10;
  }
  return Object.fromEntries(Object.entries(types).sort((a, b) => b[1] - a[1]));
}

/** Per open stream: what the full collection kept beyond the sample with no stream open. */
function livePerStream(idle: Sample, sample: Sample) {
  const heap = (sample.before.heapSize - idle.before.heapSize) / streams;
  const outside = (sample.before.extraMemorySize - idle.before.extraMemorySize) / streams;
  return { heap, outside, types: addedPerStream(idle.before, sample.before, 0.5) };
}

/** Per open stream: objects and heap bytes one eden collection promoted, and the objects by type. */
function promotedPerStream(sample: Sample): { objects: number; bytes: number; types: Record<string, number> } {
  const types: Record<string, number> = {};
  let objects = 0;
  for (const [type, count] of Object.entries(sample.after.objects)) {
    const added = count - (sample.before.objects[type] ?? 0);
    if (added === 0) continue;
    types[type] = added / streams;
    objects += added;
  }
  return { objects: objects / streams, bytes: (sample.after.heapSize - sample.before.heapSize) / streams, types };
}

async function measure(name: string, command: string[], environment: Record<string, string | undefined>, port: number, headers: Record<string, string>) {
  const output = join(work, `${name}.jsonl`);
  const server = Bun.spawn([bun, "--preload", preload, ...command], {
    env: { ...environment, PROMOTION_OUT: output },
    stdout: "ignore",
    stderr: "ignore",
  });
  children.push(server);
  await waitForPort(port);
  const body = join(work, "body.json");
  writeFileSync(body, JSON.stringify({ model: "bench", stream: true, messages: [{ role: "user", content: "Count to two hundred." }] }));
  const url = `http://127.0.0.1:${port}/v1/chat/completions`;
  const open = (count: number) =>
    Bun.spawn([bun, join(import.meta.dir, "streams.ts"), url, body, JSON.stringify({ ...headers, "content-type": "application/json" }), String(count), "200"], {
      env: lifted,
      stdout: "pipe",
    });
  await open(100).exited;
  // The sample with no stream open, after the warm-up: what the server holds whatever its traffic.
  await Bun.sleep(500);
  process.kill(server.pid, "SIGUSR2");
  await Bun.sleep(400);
  const burst = open(streams);
  children.push(burst);
  // Every stream has opened by then (time to first token is well under 2 s at this count) and none has ended (4 s).
  await Bun.sleep(2000);
  for (let index = 0; index < samples; index++) {
    process.kill(server.pid, "SIGUSR2");
    await Bun.sleep(400);
  }
  const result = JSON.parse(await new Response(burst.stdout).text()) as { completed: number };
  server.kill();
  await server.exited;
  if (result.completed !== streams) throw new Error(`${name}: ${result.completed} of ${streams} streams completed`);
  const lines = existsSync(output) ? readFileSync(output, "utf8").trim().split("\n") : [];
  if (lines.length !== samples + 1) throw new Error(`${name}: ${lines.length} of ${samples + 1} samples were taken`);
  const [idle, ...withStreams] = lines.map((line) => JSON.parse(line) as Sample);
  const live = withStreams.map((sample) => livePerStream(idle as Sample, sample));
  const middle = live.map((sample) => sample.heap).indexOf(median(live.map((sample) => sample.heap)));
  const per = withStreams.map((sample) => promotedPerStream(sample));
  const typeNames = new Set(per.flatMap((sample) => Object.keys(sample.types)));
  const types: Record<string, number> = {};
  for (const type of typeNames) {
    const value = median(per.map((sample) => sample.types[type] ?? 0));
    if (Math.abs(value) >= 0.05) types[type] = Math.round(value * 100) / 100;
  }
  return {
    live: {
      heap_bytes_per_stream: Math.round(median(live.map((sample) => sample.heap))),
      outside_heap_bytes_per_stream: Math.round(median(live.map((sample) => sample.outside))),
      by_type: live[middle]?.types,
    },
    promoted: {
      objects_per_stream: Math.round(median(per.map((sample) => sample.objects)) * 10) / 10,
      bytes_per_stream: Math.round(median(per.map((sample) => sample.bytes))),
      by_type: Object.fromEntries(Object.entries(types).sort((a, b) => b[1] - a[1])),
      samples: per.map((sample) => ({ objects: Math.round(sample.objects * 10) / 10, bytes: Math.round(sample.bytes) })),
    },
  };
}

try {
  const upstreamPort = freePort();
  children.push(
    Bun.spawn([bun, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort), "200", "20"], { env: lifted, stdout: "ignore", stderr: "ignore" }),
  );
  await waitForPort(upstreamPort);

  const cli = writeSourceCli(work);
  const directory = join(work, "sluice-data");
  mkdirSync(directory);
  const { environment, key } = await prepareSluice(cli, directory, upstreamPort);
  const sluicePort = freePort();
  const sluice = await measure(
    "sluice",
    [join(root, "src/main.ts"), "serve"],
    { ...environment, SLUICE_PORT: String(sluicePort), BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
    sluicePort,
    { authorization: `Bearer ${key}` },
  );
  const referencePort = freePort();
  const reference = await measure(
    "reference",
    [join(import.meta.dir, "reference-proxy.ts"), "durable", String(referencePort), `http://127.0.0.1:${upstreamPort}`, join(work, "reference.db")],
    lifted,
    referencePort,
    {},
  );
  const report = {
    streams,
    samples,
    sluice,
    durable_reference: reference,
    sluice_over_reference: {
      live_heap_bytes: ratio(sluice.live.heap_bytes_per_stream, reference.live.heap_bytes_per_stream),
      live_bytes_inside_heap: ratio(
        sluice.live.heap_bytes_per_stream - sluice.live.outside_heap_bytes_per_stream,
        reference.live.heap_bytes_per_stream - reference.live.outside_heap_bytes_per_stream,
      ),
      promoted_objects: ratio(sluice.promoted.objects_per_stream, reference.promoted.objects_per_stream),
      promoted_bytes: ratio(sluice.promoted.bytes_per_stream, reference.promoted.bytes_per_stream),
    },
  };
  console.log(JSON.stringify(report, null, 2));
  writeFileSync(join(import.meta.dir, "results", "promotion.json"), `${JSON.stringify(report, null, 2)}\n`);
} finally {
  for (const child of children) child.kill();
  await Promise.all(children.map((child) => child.exited));
  rmSync(work, { recursive: true, force: true });
}
