// Real PostgreSQL and Redis servers for the shared-mode tests: Debian's packages (installed by `make test`), started
// on loopback ports with temporary data directories and stopped after the tests. PostgreSQL refuses to run as root,
// so as root (CI) it runs as the `postgres` user.
import { afterAll, beforeAll } from "bun:test";
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { postgresStorage } from "../../src/storage/postgres";
import type { ChangeFeed, Storage } from "../../src/storage/types";

function freePort(): number {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}

function postgresBinary(name: string): string {
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root) ? readdirSync(root).sort().reverse() : [];
  for (const version of versions) {
    const path = join(root, version, "bin", name);
    if (existsSync(path)) return path;
  }
  return name;
}

const asRoot = process.getuid?.() === 0;

function postgresCommand(args: string[]): string[] {
  return asRoot ? ["runuser", "-u", "postgres", "--", ...args] : args;
}

function run(command: string[]): void {
  const result = Bun.spawnSync(command, { stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`${command.join(" ")} failed: ${result.stderr.toString()}${result.stdout.toString()}`);
}

export interface PostgresServer {
  url: string;
  /** Stops the server, keeping its data (for outage tests). */
  pause(): void;
  resume(): void;
  /** A fresh empty database on this server, as a URL. */
  createDatabase(name: string): Promise<string>;
  stop(): void;
}

/** Starts a PostgreSQL cluster in a temporary directory on a free loopback port. */
export async function startPostgres(): Promise<PostgresServer> {
  const directory = mkdtempSync(join(tmpdir(), "sluice-pg-"));
  const data = join(directory, "data");
  if (asRoot) {
    const user = Bun.spawnSync(["id", "-u", "postgres"]).stdout.toString().trim();
    const group = Bun.spawnSync(["id", "-g", "postgres"]).stdout.toString().trim();
    chownSync(directory, Number(user), Number(group));
  }
  chmodSync(directory, 0o700);
  const port = freePort();
  run(postgresCommand([postgresBinary("initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]));
  const start = () =>
    run(
      postgresCommand([
        postgresBinary("pg_ctl"),
        "-D",
        data,
        "-l",
        join(directory, "log"),
        "-w",
        "-t",
        "30",
        "-o",
        `-p ${port} -k ${directory} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`,
        "start",
      ]),
    );
  const stopServer = () => run(postgresCommand([postgresBinary("pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"]));
  start();
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    url,
    pause: stopServer,
    resume: start,
    async createDatabase(name) {
      const admin = new Bun.SQL(url);
      try {
        await admin.unsafe(`CREATE DATABASE "${name}"`);
      } finally {
        await admin.close();
      }
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    stop() {
      try {
        stopServer();
      } finally {
        rmSync(directory, { recursive: true, force: true });
      }
    },
  };
}

export interface RedisServer {
  url: string;
  /** Stops the server (its data is lost: Redis here keeps nothing on disk). */
  pause(): Promise<void>;
  resume(): Promise<void>;
  stop(): Promise<void>;
}

/** Starts redis-server on a free loopback port, keeping nothing on disk. */
export async function startRedis(): Promise<RedisServer> {
  const port = freePort();
  let child: Bun.Subprocess | undefined;
  const start = async () => {
    child = Bun.spawn(["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
      stdout: "ignore",
      stderr: "ignore",
    });
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
        socket.end();
        return;
      } catch {
        if (Date.now() > deadline) throw new Error("redis-server did not start");
        await Bun.sleep(20);
      }
    }
  };
  const stopServer = async () => {
    child?.kill("SIGKILL");
    await child?.exited;
    child = undefined;
  };
  await start();
  return { url: `redis://127.0.0.1:${port}`, pause: stopServer, resume: start, stop: stopServer };
}

/** Leases of every organization and model still held in the Redis at `url` (not yet expired). */
export async function leasesHeld(url: string): Promise<number> {
  const client = new Bun.RedisClient(url);
  try {
    const keys = (await client.send("KEYS", ["sluice:*:leases"])) as string[];
    const slots = (await client.send("KEYS", ["sluice:model:*:slots"])) as string[];
    const [seconds, microseconds] = ((await client.send("TIME", [])) as string[]).map(Number) as [number, number];
    const now = seconds * 1000 + Math.floor(microseconds / 1000);
    let total = 0;
    for (const key of [...keys, ...slots]) total += Number(await client.send("ZCOUNT", [key, `(${now}`, "+inf"]));
    return total;
  } finally {
    client.close();
  }
}

/** What useAdmissionServices gives a test file, once its beforeAll has run. */
export interface AdmissionServices {
  redis: RedisServer;
  storage: Storage;
}

/**
 * A PostgreSQL (with one database for this file, its repositories over it) and a Redis for a test file of shared-mode
 * admission below the HTTP layer, started before its tests and stopped after them.
 */
export function useAdmissionServices(databaseName: string): AdmissionServices {
  let postgres: PostgresServer | undefined;
  const services = {} as AdmissionServices;
  const quiet: ChangeFeed = { onChange() {}, check() {}, async announce() {} };
  beforeAll(async () => {
    let redis: RedisServer;
    [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
    services.redis = redis;
    services.storage = await postgresStorage(await postgres.createDatabase(databaseName), quiet);
  });
  afterAll(async () => {
    await services.storage?.close();
    postgres?.stop();
    await services.redis?.stop();
  });
  return services;
}
