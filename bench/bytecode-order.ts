// Records which functions a start of the executable uses, for `make build` to lay its bytecode out by
// (`bun build --bytecode-order`): what a start and its first answers run lies together at the front, so the rest of
// the bytecode is never paged in. Usage: `make bytecode-order` (writes src/bytecode-order.txt; commit it).
// A recording from an older build still applies to a newer one; re-record when start-up or idle memory drifts.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitForPort } from "./ports";
import { prepareSluice, waitForFirstAnswer } from "./sluice-setup";

const root = join(import.meta.dir, "..");
const binary = join(root, "dist/sluice");
const target = join(root, "src/bytecode-order.txt");
const work = mkdtempSync(join(tmpdir(), "sluice-order-"));

const build = Bun.spawnSync(["make", "-s", "build"], { cwd: root, stdout: "inherit", stderr: "inherit" });
if (build.exitCode !== 0) throw new Error("make build failed");

const upstreamPort = freePort();
const upstream = Bun.spawn([process.execPath, join(import.meta.dir, "fake-upstream.ts"), String(upstreamPort), "20", "1"], {
  stdout: "ignore",
  stderr: "ignore",
});
try {
  await waitForPort(upstreamPort);
  const { environment, key } = await prepareSluice(binary, work, upstreamPort);
  const port = freePort();
  const recording = join(work, "order.txt");
  const server = Bun.spawn([binary, "serve"], {
    env: { ...environment, SLUICE_PORT: String(port), BUN_BYTECODE_ORDER_OUT: recording },
    stdout: "ignore",
    stderr: "ignore",
  });
  const ask = (stream: boolean) =>
    fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "bench", stream, messages: [{ role: "user", content: "What is 2 + 2?" }] }),
    });
  // As the benchmark measures a start: asked until the first answer comes back.
  await waitForFirstAnswer(`http://127.0.0.1:${port}/v1/chat/completions`, key);
  await (await ask(true)).text();
  // Enough answers for the ledger's writer thread to move staged rows and checkpoint, as it does on an idle server.
  for (let index = 0; index < 40; index++) await (await ask(false)).arrayBuffer();
  await Bun.sleep(200);
  server.kill("SIGTERM");
  await server.exited;
  const recorded = await Bun.file(recording).text();
  const functions = recorded.split("\n").filter((line) => line.startsWith("F ")).length;
  if (functions === 0) throw new Error("the executable recorded no functions: was it built with --bytecode?");
  await Bun.write(target, recorded);
  console.log(`${functions} functions recorded in ${target}`);
} finally {
  upstream.kill();
  rmSync(work, { recursive: true, force: true });
}
