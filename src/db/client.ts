import { Database, type Statement } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { moveStagedRows } from "../ledger/inbox";
import { isBusy } from "./busy";
import { migrate } from "./migrate";
import * as schema from "./schema";

const changeVersionSql = "SELECT version FROM change_counter WHERE id = 1";

export type Drizzle = BunSQLiteDatabase<typeof schema>;

export interface DatabaseHandle {
  sqlite: Database;
  db: Drizzle;
  /**
   * Runs `listener` whenever a poll finds that another connection (the CLI, another process) changed what the
   * server caches: keys, organizations, usage resets (see `change_counter`).
   */
  onExternalChange(listener: () => void): void;
  /** One read of `change_counter`; if it moved, the listeners. */
  pollExternalChanges(): void;
  /**
   * Reads `change_counter` on `connection` from now on: another connection of this thread to the same file, the one
   * that writes on the hot path (the ledger's staging). See `pollExternalChanges`.
   */
  readChangesOn(connection: Database): void;
  close(): void;
}

/** Where the database lives when SLUICE_DB is unset or empty. */
export const defaultDatabasePath = "data/sluice.db";

/** Opens (creating if needed) the SQLite file, sets WAL and the pragmas, and applies pending migrations. */
export function openDatabase(path = process.env.SLUICE_DB || defaultDatabasePath): DatabaseHandle {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const sqlite = new Database(path, { create: true, strict: true });
  try {
    sqlite.run("PRAGMA journal_mode = WAL");
    sqlite.run("PRAGMA synchronous = NORMAL");
    sqlite.run("PRAGMA busy_timeout = 5000");
    sqlite.run("PRAGMA foreign_keys = ON");
    migrate(sqlite);
    // Rows a crash left staged count before anything reads usage (ledger/inbox.ts).
    moveStagedRows(sqlite);
  } catch (error) {
    sqlite.close();
    throw error;
  }
  const changeVersion = sqlite.query<{ version: number }, []>(changeVersionSql);
  let changeVersionElsewhere: Statement<{ version: number }, []> | undefined;
  const readChange = (): number => {
    if (changeVersionElsewhere) {
      try {
        return changeVersionElsewhere.get()?.version ?? 0;
      } catch (error) {
        // Busy (that connection waits for no lock): this once on the server's own, which waits. Closed: from now on.
        if (!isBusy(error)) changeVersionElsewhere = undefined;
      }
    }
    return changeVersion.get()?.version ?? 0;
  };
  let lastChange = readChange();
  const listeners: (() => void)[] = [];
  return {
    sqlite,
    db: drizzle(sqlite, { schema }),
    onExternalChange(listener) {
      listeners.push(listener);
    },
    pollExternalChanges() {
      // Not `PRAGMA data_version` first: it moves with every commit of the ledger's writer thread (another
      // connection), so under load it cost a second statement on nearly every request (7% of the CPU profile).
      // Read where this thread last committed: a connection's page cache outlives its own commits, and another
      // connection's commit makes the next read load its pages again. Read on the server's connection, after every
      // staged commit of the ledger's, it took 12 µs a turn against 2.5 (bench/HISTORY.md, forty-second session).
      const change = readChange();
      if (change === lastChange) return;
      lastChange = change;
      for (const listener of listeners) listener();
    },
    readChangesOn(connection) {
      changeVersionElsewhere = connection.query<{ version: number }, []>(changeVersionSql);
    },
    close() {
      sqlite.close();
    },
  };
}
