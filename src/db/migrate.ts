import type { Database } from "bun:sqlite";
import { embeddedMigrations, type EmbeddedMigration } from "./migrations";

export class DatabaseTooNewError extends Error {
  override name = "DatabaseTooNewError";
}

/**
 * Applies the migrations this build knows and has not yet applied, each in its own transaction. A database
 * migrated by a newer Sluice is refused rather than guessed at.
 */
export function migrate(database: Database, migrations: EmbeddedMigration[] = embeddedMigrations): void {
  database.run("CREATE TABLE IF NOT EXISTS sluice_migrations (tag TEXT PRIMARY KEY NOT NULL, applied_at INTEGER NOT NULL)");
  const applied = new Set(
    database
      .query<{ tag: string }, []>("SELECT tag FROM sluice_migrations")
      .all()
      .map((row) => row.tag),
  );
  const known = new Set(migrations.map((migration) => migration.tag));
  const unknown = [...applied].filter((tag) => !known.has(tag));
  if (unknown.length > 0) {
    throw new DatabaseTooNewError(
      `the database was migrated by a newer Sluice (migration ${unknown.join(", ")} is unknown to this build); run the newer version or restore a backup`,
    );
  }
  for (const migration of migrations) {
    if (applied.has(migration.tag)) continue;
    database.transaction(() => {
      for (const statement of migration.sql.split("--> statement-breakpoint")) {
        if (statement.trim()) database.run(statement);
      }
      database.run("INSERT INTO sluice_migrations (tag, applied_at) VALUES (?, ?)", [migration.tag, Date.now()]);
    })();
  }
}
