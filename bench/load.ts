// A small load generator, run as its own process (so it has its own fetch pool):
//   bun bench/load.ts open   URL BODY_FILE HEADERS_JSON RATE DURATION_S   (sends on a fixed schedule)
//   bun bench/load.ts closed URL BODY_FILE HEADERS_JSON CONNECTIONS DURATION_S
// Prints {"requests","errors","rps","p50_ms","p99_ms"} on stdout. The open-loop mode measures latency from the
// scheduled send time, so a slow server cannot hide its queueing (no coordinated omission). With LOAD_SAMPLES_FILE
// set, it also writes there each answered request's [scheduled send time since the start, latency], in ms.
import { quantile } from "./statistics";
const [mode, url, bodyFile, headersJson, amount, durationSeconds] = process.argv.slice(2) as [string, string, string, string, string, string];
const body = await Bun.file(bodyFile).text();
const headers = JSON.parse(headersJson) as Record<string, string>;
const durationMs = Number(durationSeconds) * 1000;
const latencies: number[] = [];
/** [scheduled send time since the start, latency] of each answered request, for LOAD_SAMPLES_FILE. */
const samples: [number, number][] = [];
let errors = 0;

async function send(scheduledAt: number): Promise<void> {
  try {
    const response = await fetch(url, { method: "POST", headers, body });
    await response.arrayBuffer();
    if (response.status !== 200) errors++;
    else {
      const latency = performance.now() - scheduledAt;
      latencies.push(latency);
      samples.push([scheduledAt - start, latency]);
    }
  } catch {
    errors++;
  }
}

const start = performance.now();
if (mode === "open") {
  const intervalMs = 1000 / Number(amount);
  const inFlight: Promise<void>[] = [];
  let sent = 0;
  while (performance.now() - start < durationMs) {
    const due = Math.floor((performance.now() - start) / intervalMs);
    while (sent <= due) inFlight.push(send(start + sent++ * intervalMs));
    await Bun.sleep(0.5);
  }
  await Promise.all(inFlight);
} else {
  const workers = Array.from({ length: Number(amount) }, async () => {
    while (performance.now() - start < durationMs) await send(performance.now());
  });
  await Promise.all(workers);
}
const elapsed = (performance.now() - start) / 1000;
console.log(
  JSON.stringify({
    requests: latencies.length + errors,
    errors,
    rps: latencies.length / elapsed,
    p50_ms: quantile(latencies, 0.5),
    p99_ms: quantile(latencies, 0.99),
  }),
);
if (process.env.LOAD_SAMPLES_FILE) await Bun.write(process.env.LOAD_SAMPLES_FILE, JSON.stringify(samples));
