// Shared by the benchmark runners: a Sluice data directory configured as `make bench` measures it.
import { join } from "node:path";

/**
 * A Sluice data directory: config, database, one organization and key, through `binary`'s own CLI. Every product
 * check is on: quotas and a concurrency cap in the plan (too large to refuse anything), the default red-line rules.
 */
export async function prepareSluice(
  binary: string,
  directory: string,
  upstreamPort: number,
): Promise<{ environment: Record<string, string | undefined>; key: string }> {
  const config = join(directory, "sluice.toml");
  await Bun.write(
    config,
    `[[models]]\nid = "bench"\nbackend = "openai"\nbase_url = "http://127.0.0.1:${upstreamPort}/v1"\nupstream_model = "bench-upstream"\n\n` +
      `[[plans]]\nid = "default"\nmodels = ["*"]\ntokens_per_5h = 1000000000000\ntokens_per_month = 1000000000000\nmax_concurrency = 100000\n`,
  );
  const environment = { PATH: process.env.PATH, HOME: process.env.HOME, SLUICE_DB: join(directory, "sluice.db"), SLUICE_CONFIG: config };
  Bun.spawnSync([binary, "org", "create", "bench"], { env: environment });
  const key = Bun.spawnSync([binary, "key", "create", "--org", "bench"], { env: environment, stdout: "pipe", stderr: "ignore" })
    .stdout.toString()
    .trim()
    .split("\n")
    .at(-1) as string;
  return { environment, key };
}
