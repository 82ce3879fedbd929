import { ConfigError } from "../config/load";
import { defaultDatabasePath, openDatabase } from "../db/client";
import { DatabaseTooNewError } from "../db/migrate";
import { isPostgresUrl } from "./mode";
import { RedisConnection, redisChangeFeed } from "./redis";
import { sqliteStorage } from "./sqlite";
import type { Storage } from "./types";

/** The database or Redis named in the environment cannot be used; the message says why in plain words. */
export class BackendError extends Error {
  override name = "BackendError";
}

/** A connection URL without its password, for messages. */
export function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, "//$1:***@");
}

/** SQLite's own words for a file it cannot use (not a database, a directory, unreadable), with the path. */
function openSqlite(path: string) {
  try {
    return openDatabase(path);
  } catch (error) {
    if (error instanceof DatabaseTooNewError) throw error;
    throw new BackendError(`cannot open the SQLite database at ${path}: ${(error as Error).message} (SLUICE_DB names the file)`);
  }
}

export interface Backends {
  storage: Storage;
  /** Set in shared mode (PostgreSQL + Redis): admission state and the change epoch live there. */
  redis?: RedisConnection;
}

/**
 * Opens what SLUICE_DB and SLUICE_REDIS_URL name: a SQLite file (the default, one instance), or PostgreSQL and Redis
 * together (shared mode, any number of instances). PostgreSQL without Redis is refused: admission state and cache
 * invalidation would then live in each process, and a second instance would multiply every limit.
 */
export async function openBackends(environment: Record<string, string | undefined> = process.env): Promise<Backends> {
  const database = environment.SLUICE_DB;
  const redisUrl = environment.SLUICE_REDIS_URL || undefined;
  if (!isPostgresUrl(database)) {
    if (redisUrl)
      throw new ConfigError(
        "SLUICE_REDIS_URL is set but SLUICE_DB is a SQLite file: shared mode needs SLUICE_DB=postgres://... as well (unset SLUICE_REDIS_URL to run one instance on SQLite)",
      );
    return { storage: sqliteStorage(openSqlite(database || defaultDatabasePath)) };
  }
  if (!redisUrl || !/^rediss?:\/\//.test(redisUrl)) {
    throw new ConfigError(
      "SLUICE_DB is a PostgreSQL database, which is shared mode: set SLUICE_REDIS_URL=redis://host:port as well (quotas and concurrency limits of every instance live there)",
    );
  }
  const redis = new RedisConnection(redisUrl);
  try {
    // Loaded only in shared mode: PostgreSQL's client and schema cost a SQLite server ~10 ms of start-up.
    const { postgresStorage } = await import("./postgres");
    const storage = await postgresStorage(database, redisChangeFeed(redis));
    return { storage, redis };
  } catch (error) {
    redis.close();
    if (error instanceof DatabaseTooNewError) throw error;
    throw new BackendError(`cannot open the PostgreSQL database at ${redactUrl(database)}: ${(error as Error).message}`);
  }
}
