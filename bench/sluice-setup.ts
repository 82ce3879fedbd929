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
  return { environment, key: createOrganizationKey(binary, environment, "bench") };
}

/** Creates an organization through `binary`'s CLI and returns a new key of it (the last line the CLI prints). */
export function createOrganizationKey(binary: string, environment: Record<string, string | undefined>, organization: string): string {
  Bun.spawnSync([binary, "org", "create", organization], { env: environment });
  return Bun.spawnSync([binary, "key", "create", "--org", organization], { env: environment, stdout: "pipe", stderr: "ignore" })
    .stdout.toString()
    .trim()
    .split("\n")
    .at(-1) as string;
}
