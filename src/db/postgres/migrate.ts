import type { SQL } from "bun";
import { DatabaseTooNewError } from "../migrate";
import type { EmbeddedMigration } from "../migrations/index";
import { postgresMigrations } from "./migrations/index";

/** Any fixed number, the same in every instance: the advisory lock that lets exactly one of them migrate. */
const migrationLock = 0x51_75_1c_e0;

/**
 * Applies pending migrations once, whichever of several instances starting at the same moment gets here first:
 * under a transaction-scoped advisory lock, the others wait and then find nothing left to do. A database migrated
 * by a newer Sluice is refused.
 */
export async function migratePostgres(sql: SQL, migrations: EmbeddedMigration[] = postgresMigrations): Promise<string[]> {
  return await sql.begin(async (transaction) => {
    await transaction`SELECT pg_advisory_xact_lock(${migrationLock})`;
    await transaction`CREATE TABLE IF NOT EXISTS sluice_migrations (tag text PRIMARY KEY NOT NULL, applied_at bigint NOT NULL)`;
    const rows = (await transaction`SELECT tag FROM sluice_migrations`) as { tag: string }[];
    const applied = new Set(rows.map((row) => row.tag));
    const known = new Set(migrations.map((migration) => migration.tag));
    const unknown = [...applied].filter((tag) => !known.has(tag));
    if (unknown.length > 0) {
      throw new DatabaseTooNewError(
        `the database was migrated by a newer Sluice (migration ${unknown.join(", ")} is unknown to this build); run the newer version`,
      );
    }
    const done: string[] = [];
    for (const migration of migrations) {
      if (applied.has(migration.tag)) continue;
      for (const statement of migration.sql.split("--> statement-breakpoint")) {
        if (statement.trim()) await transaction.unsafe(statement);
      }
      await transaction`INSERT INTO sluice_migrations (tag, applied_at) VALUES (${migration.tag}, ${Date.now()})`;
      done.push(migration.tag);
    }
    return done;
  });
}
