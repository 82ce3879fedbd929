import { existsSync } from "node:fs";
import { defaultDatabasePath } from "../db/client";
import { isPostgresUrl } from "../storage/mode";
import { isSqliteStorage } from "../storage/sqlite";
import { withCliContext } from "./context";
import { CommandError, UsageError, parseCommand } from "./usage";

/** `sluice backup PATH`: a consistent copy of the live database (VACUUM INTO), safe while the server runs. */
export async function runBackup(args: string[]): Promise<number> {
  const { positionals } = parseCommand(args, {}, 1);
  const target = positionals[0] as string;
  if (isPostgresUrl(process.env.SLUICE_DB)) {
    throw new UsageError(
      "sluice backup copies a SQLite file; this installation keeps its data in PostgreSQL. Back it up with PostgreSQL's own tools: " +
        '`pg_dump --format=custom --file=sluice.dump "$SLUICE_DB"` for a consistent copy while Sluice runs (restore with pg_restore), ' +
        "or continuous archiving (pg_basebackup + WAL archiving) for point-in-time recovery. Redis needs no backup: Sluice rebuilds it from the ledger.",
    );
  }
  // SQLite reads an empty name as a temporary file: the copy would be written and thrown away.
  if (!target.trim()) throw new UsageError("the backup's path must not be empty");
  if (existsSync(target)) throw new UsageError(`${target} already exists; choose a new file`);
  const source = process.env.SLUICE_DB || defaultDatabasePath;
  // Opening a database creates it: a mistyped SLUICE_DB would be "backed up" as an empty one.
  if (!existsSync(source)) throw new CommandError(`there is no database at ${source} to back up (SLUICE_DB names it)`);
  await withCliContext(async (context) => {
    if (!isSqliteStorage(context.storage)) throw new UsageError("backup needs a SQLite database");
    const started = performance.now();
    try {
      context.storage.database.sqlite.run("VACUUM INTO ?", [target]);
    } catch (error) {
      throw new CommandError(`cannot write the backup to ${target}: ${(error as Error).message}`);
    }
    console.log(`backup written to ${target} in ${Math.round(performance.now() - started)} ms`);
  });
  return 0;
}
