// Several `sluice serve` processes over one PostgreSQL database and one Redis: shared mode as operators run it.
import { SQL } from "bun";
import { join } from "node:path";
import { httpPost, temporaryDirectory } from "../helpers";
import type { PostgresServer, RedisServer } from "./services";
import { sluiceCommand, startSluiceProcess, type SluiceProcess } from "./sluice-process";

export interface Cluster {
  environment: Record<string, string | undefined>;
  instances: SluiceProcess[];
  databaseUrl: string;
  /** A client of the cluster's PostgreSQL database, to read the ledger as the truth. */
  sql: SQL;
  /** Runs a CLI command against the cluster's database and Redis. */
  cli(...args: string[]): { code: number; stdout: string; stderr: string };
  /** Creates an organization (and a key for it) through the CLI; returns the key. */
  addOrganization(name: string, plan?: string): string;
  /** POSTs a chat request to instance `index`. */
  chat(index: number, key: string, body: unknown): Promise<Response>;
  start(): Promise<SluiceProcess>;
  stop(): Promise<void>;
}

let databases = 0;

/**
 * A fresh database on `postgres` (Redis flushed) and `count` instances started on it at the same moment, with the
 * given TOML configuration.
 */
export async function startCluster(
  postgres: PostgresServer,
  redis: RedisServer,
  toml: string,
  count = 3,
  extra: Record<string, string> = {},
): Promise<Cluster> {
  const directory = temporaryDirectory();
  const configPath = join(directory.path, "sluice.toml");
  await Bun.write(configPath, toml);
  const databaseUrl = await postgres.createDatabase(`sluice_${process.pid}_${++databases}`);
  const flush = new Bun.RedisClient(redis.url);
  await flush.send("FLUSHALL", []);
  flush.close();
  const environment: Record<string, string | undefined> = {
    ...process.env,
    SLUICE_DB: databaseUrl,
    SLUICE_REDIS_URL: redis.url,
    SLUICE_CONFIG: configPath,
    SLUICE_PORT: "0",
    SLUICE_LOG_LEVEL: "warn",
    SLUICE_DRAIN_MS: "0",
    ...extra,
  };
  const instances: SluiceProcess[] = [];
  const start = async () => {
    const instance = await startSluiceProcess(environment);
    instances.push(instance);
    return instance;
  };
  await Promise.all(Array.from({ length: count }, start));
  const sql = new SQL(databaseUrl, { max: 2 });
  const cli = (...args: string[]) => sluiceCommand(environment, ...args);
  return {
    environment,
    instances,
    databaseUrl,
    sql,
    cli,
    addOrganization(name, plan) {
      const created = cli("org", "create", name, ...(plan ? ["--plan", plan] : []));
      if (created.code !== 0) throw new Error(`org create failed: ${created.stderr}`);
      const key = cli("key", "create", "--org", name);
      if (key.code !== 0) throw new Error(`key create failed: ${key.stderr}`);
      return key.stdout.trim().split("\n").at(-1) as string;
    },
    chat(index, key, body) {
      const instance = instances[index % instances.length] as SluiceProcess;
      return httpPost(`${instance.url}/v1/chat/completions`, JSON.stringify(body), { authorization: `Bearer ${key}`, "content-type": "application/json" });
    },
    start,
    async stop() {
      for (const instance of instances) instance.child.kill("SIGKILL");
      await Promise.all(instances.map((instance) => instance.child.exited));
      await sql.close();
      directory.remove();
    },
  };
}
