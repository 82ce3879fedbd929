import { Database } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { moveStagedRows } from "../ledger/inbox";
import { migrate } from "./migrate";
import * as schema from "./schema";

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
  close(): void;
}

/** Opens (creating if needed) the SQLite file, sets WAL and the pragmas, and applies pending migrations. */
export function openDatabase(path = process.env.SLUICE_DB ?? "data/sluice.db"): DatabaseHandle {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const sqlite = new Database(path, { create: true, strict: true });
  sqlite.run("PRAGMA journal_mode = WAL");
  sqlite.run("PRAGMA synchronous = NORMAL");
  sqlite.run("PRAGMA busy_timeout = 5000");
  sqlite.run("PRAGMA foreign_keys = ON");
  migrate(sqlite);
  // Rows a crash left staged count before anything reads usage (ledger/inbox.ts).
  moveStagedRows(sqlite);
  const changeVersion = sqlite.query<{ version: number }, []>("SELECT version FROM change_counter WHERE id = 1");
  let lastChange = changeVersion.get()?.version ?? 0;
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
      const change = changeVersion.get()?.version ?? 0;
      if (change === lastChange) return;
      lastChange = change;
      for (const listener of listeners) listener();
    },
    close() {
      sqlite.close();
    },
  };
}
