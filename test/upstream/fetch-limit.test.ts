import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import { repositoryRoot, temporaryDirectory, useFakeUpstream } from "../helpers";
import { sluiceCommand, startSluiceProcess } from "../support/sluice-process";

const upstream = useFakeUpstream();
const directory = temporaryDirectory();
afterAll(() => directory.remove());

test("`sluice serve`, started without BUN_CONFIG_MAX_HTTP_REQUESTS, sends more than 256 upstream requests at once", async () => {
  const environment: Record<string, string | undefined> = {
    ...process.env,
    SLUICE_DB: join(directory.path, "sluice.db"),
    SLUICE_CONFIG: join(directory.path, "sluice.toml"),
    SLUICE_PORT: "0",
    BUN_CONFIG_MAX_HTTP_REQUESTS: undefined,
  };
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
