// Start-up to the first answer and idle memory of several executables, started in turn in the same run (as
// `make bench` measures one): `bun bench/startup.ts dist/sluice /tmp/other-build [--rounds 8]`. Each gets its own
// data directory; an idle server's memory is read a second after its first answer, split into what the process
// allocated (anonymous) and the pages of the executable it touched (file-backed).
// Each is started from a copy of its own (see measureInTurn).
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { freePort } from "./ports";
import { measureInTurn, waitForFirstAnswer } from "./sluice-setup";
import { median } from "./statistics";

const { values, positionals } = parseArgs({ args: Bun.argv.slice(2), options: { rounds: { type: "string", default: "8" } }, allowPositionals: true });
const originals = positionals.map((path) => resolve(path));
if (originals.length === 0) throw new Error("usage: bun bench/startup.ts EXECUTABLE [EXECUTABLE...] [--rounds N]");
const rounds = Number(values.rounds);

interface Sample {
  startupMs: number;
  rssMb: number;
  anonymousMb: number;
  fileMb: number;
}

function statusMb(pid: number, field: string): number {
  const match = new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match?.[1] ?? Number.NaN) / 1024;
}

async function measure(executable: string, environment: Record<string, string | undefined>, key: string): Promise<Sample> {
  const port = freePort();
  const began = performance.now();
  const child = Bun.spawn([executable, "serve"], { env: { ...environment, SLUICE_PORT: String(port) }, stdout: "ignore", stderr: "ignore" });
  try {
    await waitForFirstAnswer(`http://127.0.0.1:${port}/v1/chat/completions`, key);
    const startupMs = performance.now() - began;
    await Bun.sleep(1000);
    const pid = child.pid;
    return { startupMs, rssMb: statusMb(pid, "VmRSS"), anonymousMb: statusMb(pid, "RssAnon"), fileMb: statusMb(pid, "RssFile") };
  } finally {
    child.kill();
    await child.exited;
  }
}

const samples = await measureInTurn(originals, rounds, measure);
const first = samples[0] as Sample[];
for (const [index, executable] of originals.entries()) {
  const own = samples[index] as Sample[];
  const of = (field: keyof Sample, from: Sample[]) => median(from.map((sample) => sample[field]));
  console.log(
    `${executable}: start-up ${of("startupMs", own).toFixed(1)} ms (× ${(of("startupMs", own) / of("startupMs", first)).toFixed(2)} the first),` +
      ` idle RSS ${of("rssMb", own).toFixed(1)} MB (${of("anonymousMb", own).toFixed(1)} anonymous, ${of("fileMb", own).toFixed(1)} file-backed;` +
      ` ${(of("rssMb", own) - of("rssMb", first)).toFixed(1)} MB against the first), medians of ${rounds} starts`,
  );
}
