import { afterAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startEnvironment } from "../src/start-environment";
import { repositoryRoot, temporaryDirectory, useFakeUpstream } from "./helpers";
import { sluiceCommand, startSluiceProcess } from "./support/sluice-process";

const upstream = useFakeUpstream();
const directory = temporaryDirectory();
afterAll(() => directory.remove());

/**
 * A server's environment over files named `name` in the test's directory, as a service started by hand has it: none
 * of the start-up variables set.
 */
function unsetEnvironment(name: string): Record<string, string | undefined> {
  return {
    ...process.env,
    SLUICE_DB: join(directory.path, `${name}.db`),
    SLUICE_CONFIG: join(directory.path, `${name}.toml`),
    SLUICE_PORT: "0",
    BUN_CONFIG_MAX_HTTP_REQUESTS: undefined,
    MIMALLOC_PURGE_HOLES_MIN_INTERVAL: undefined,
    BUN_JSC_useGenerationalGC: undefined,
    BUN_JSC_largeHeapSize: undefined,
  };
}

test("`sluice serve`, started without BUN_CONFIG_MAX_HTTP_REQUESTS, sends more than 256 upstream requests at once", async () => {
  const environment = unsetEnvironment("sluice");
  await Bun.write(
    environment.SLUICE_CONFIG as string,
    `[[models]]\nid = "wide"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "slow-1-500"\n\n[[plans]]\nid = "default"\nmodels = ["*"]\n`,
  );
  expect(sluiceCommand(environment, "org", "create", "acme").code).toBe(0);
  const key = sluiceCommand(environment, "key", "create", "--org", "acme").stdout.trim().split("\n").at(-1) as string;
  const { url, child: server } = await startSluiceProcess(environment);
  try {
    const client = Bun.spawn([process.execPath, join(repositoryRoot, "test/support/burst-client.ts"), url, key, "wide", "300"], {
      env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "1000" },
      stdout: "pipe",
    });
    const statuses = JSON.parse(await new Response(client.stdout).text()) as Record<string, number>;
    expect(statuses).toEqual({ "200": 300 });
    expect(upstream.maxInFlight).toBeGreaterThan(256);
  } finally {
    server.kill();
    await server.exited;
  }
}, 30_000);

/** The environment a running process was started with (after its restart: execve keeps the pid). */
function environmentOf(pid: number): Record<string, string> {
  const entries = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").filter(Boolean);
  return Object.fromEntries(entries.map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]));
}

test("`sluice serve` on SQLite restarts with the allocator's hole purge at most once a second, without generations in the collector and with a 128 MB heap floor, unless the operator chose a value", async () => {
  const base = unsetEnvironment("environment");
  await Bun.write(base.SLUICE_CONFIG as string, `[[models]]\nid = "demo"\nbackend = "demo"\n`);
  // What the operator set, and what the running server has after its restart (or without one).
  const floor = String(128 * 1024 * 1024);
  const cases: {
    set: Record<string, string>;
    fetchLimit: string;
    interval: string | undefined;
    generational: string | undefined;
    heapFloor: string | undefined;
  }[] = [
    { set: {}, fetchLimit: "65535", interval: "1000", generational: "0", heapFloor: floor },
    { set: { MIMALLOC_PURGE_HOLES_MIN_INTERVAL: "250" }, fetchLimit: "65535", interval: "250", generational: "0", heapFloor: floor },
    { set: { BUN_JSC_useGenerationalGC: "1" }, fetchLimit: "65535", interval: "1000", generational: "1", heapFloor: floor },
    // JavaScriptCore's own floor, set by the operator, is kept like any other value.
    { set: { BUN_JSC_largeHeapSize: "8388608" }, fetchLimit: "65535", interval: "1000", generational: "0", heapFloor: "8388608" },
    // An empty fetch limit is no limit set: the restart replaces it (kept, it would restart the server for ever).
    { set: { BUN_CONFIG_MAX_HTTP_REQUESTS: "" }, fetchLimit: "65535", interval: "1000", generational: "0", heapFloor: floor },
    // An operator who sets the fetch limit starts the server without the restart, as the README says.
    { set: { BUN_CONFIG_MAX_HTTP_REQUESTS: "4096" }, fetchLimit: "4096", interval: undefined, generational: undefined, heapFloor: undefined },
  ];
  for (const { set, fetchLimit, interval, generational, heapFloor } of cases) {
    let timer: Timer | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no "listening" line within 10 s with ${JSON.stringify(set)}`)), 10_000);
    });
    const { child: server } = await Promise.race([startSluiceProcess({ ...base, ...set }), timeout]).finally(() => clearTimeout(timer));
    try {
      const environment = environmentOf(server.pid);
      expect(environment.BUN_CONFIG_MAX_HTTP_REQUESTS).toBe(fetchLimit);
      expect(environment.MIMALLOC_PURGE_HOLES_MIN_INTERVAL).toBe(interval as string);
      expect(environment.BUN_JSC_useGenerationalGC).toBe(generational as string);
      expect(environment.BUN_JSC_largeHeapSize).toBe(heapFloor as string);
    } finally {
      server.kill();
      await server.exited;
    }
  }
}, 60_000);

test("in shared mode (SLUICE_DB a PostgreSQL address) the restart keeps the collector's generations and its heap floor", () => {
  const shared = startEnvironment({ SLUICE_DB: "postgres://sluice@db.internal/sluice", SLUICE_REDIS_URL: "redis://cache.internal:6379" });
  expect(shared.BUN_JSC_useGenerationalGC).toBeUndefined();
  expect(shared.BUN_JSC_largeHeapSize).toBeUndefined();
  expect(shared.MIMALLOC_PURGE_HOLES_MIN_INTERVAL).toBe("1000");
  expect(shared.BUN_CONFIG_MAX_HTTP_REQUESTS).toBe("65535");
  expect(startEnvironment({ SLUICE_DB: "postgresql://db.internal/sluice", BUN_JSC_useGenerationalGC: "0" }).BUN_JSC_useGenerationalGC).toBe("0");
  expect(startEnvironment({ SLUICE_DB: "data/sluice.db" }).BUN_JSC_useGenerationalGC).toBe("0");
  expect(startEnvironment({ SLUICE_DB: "data/sluice.db" }).BUN_JSC_largeHeapSize).toBe(String(128 * 1024 * 1024));
  expect(startEnvironment({}).BUN_JSC_useGenerationalGC).toBe("0");
});
