// What the first exact token count costs the requests around it, for several executables started in turn in the
// same run: `bun bench/first-count.ts dist/sluice /tmp/other-build [--rounds 6]`. Each round starts a fresh server
// (the tokenizer is not loaded yet), sends whole answers at 500 a second for 3 s, and one second in asks
// /v1/messages/count_tokens, the first request of the process that needs the tokenizer. Printed per executable,
// medians of the rounds: the slowest answer in the 500 ms after the count against the slowest in the 500 ms before
// it (a ratio near 1 means the count held nobody up), and the count's own time.
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { freePort, waitForPort } from "./ports";
import { measureInTurn } from "./sluice-setup";
import { median } from "./statistics";

const { values, positionals } = parseArgs({ args: Bun.argv.slice(2), options: { rounds: { type: "string", default: "6" } }, allowPositionals: true });
const originals = positionals.map((path) => resolve(path));
if (originals.length === 0) throw new Error("usage: bun bench/first-count.ts EXECUTABLE [EXECUTABLE...] [--rounds N]");
const rounds = Number(values.rounds);
const ratePerSecond = 500;
const seconds = 3;
const countAtMs = 1000;
const windowMs = 500;

interface Round {
  worstBeforeMs: number;
  worstAfterMs: number;
  countMs: number;
}

async function measure(executable: string, environment: Record<string, string | undefined>, key: string): Promise<Round> {
  const port = freePort();
  const child = Bun.spawn([executable, "serve"], { env: { ...environment, SLUICE_PORT: String(port) }, stdout: "ignore", stderr: "ignore" });
  const base = `http://127.0.0.1:${port}`;
  const answer = () =>
    fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "bench", messages: [{ role: "user", content: "What is 2 + 2?" }] }),
    }).then((response) => response.arrayBuffer());
  try {
    await waitForPort(port);
    for (let warm = 0; warm < 20; warm++) await Promise.all(Array.from({ length: 50 }, answer));
    const samples: { sentAt: number; latencyMs: number }[] = [];
    const began = performance.now();
    let countMs = Number.NaN;
    const count = Bun.sleep(countAtMs).then(async () => {
      const sentAt = performance.now();
      const response = await fetch(`${base}/v1/messages/count_tokens`, {
        method: "POST",
        headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
        body: JSON.stringify({ model: "bench", messages: [{ role: "user", content: "What is 2 + 2?" }] }),
      });
      if (response.status !== 200) throw new Error(`count_tokens answered ${response.status}: ${await response.text()}`);
      countMs = performance.now() - sentAt;
    });
    const inFlight: Promise<unknown>[] = [count];
    // An open loop: each request leaves at its own time, whatever the others are doing.
    for (let index = 0; index < ratePerSecond * seconds; index++) {
      const due = began + (index * 1000) / ratePerSecond;
      const wait = due - performance.now();
      if (wait > 0) await Bun.sleep(wait);
      const sentAt = performance.now();
      inFlight.push(answer().then(() => samples.push({ sentAt: sentAt - began, latencyMs: performance.now() - sentAt })));
    }
    await Promise.all(inFlight);
    const worstIn = (from: number, to: number) =>
      Math.max(...samples.filter((sample) => sample.sentAt >= from && sample.sentAt < to).map((sample) => sample.latencyMs));
    return { worstBeforeMs: worstIn(countAtMs - windowMs, countAtMs), worstAfterMs: worstIn(countAtMs, countAtMs + windowMs), countMs };
  } finally {
    child.kill();
    await child.exited;
  }
}

const results = await measureInTurn(originals, rounds, measure);
for (const [index, executable] of originals.entries()) {
  const own = results[index] as Round[];
  const before = median(own.map((round) => round.worstBeforeMs));
  const after = median(own.map((round) => round.worstAfterMs));
  console.log(
    `${executable}: slowest answer in the ${windowMs} ms after the first count ${after.toFixed(1)} ms, before it ${before.toFixed(1)} ms` +
      ` (× ${(after / before).toFixed(2)}); the count itself ${median(own.map((round) => round.countMs)).toFixed(1)} ms;` +
      ` medians of ${rounds} rounds; per round, after: ${own.map((round) => round.worstAfterMs.toFixed(1)).join(", ")}`,
  );
}
