import type { DatabaseHandle } from "./client";

/** Moves the database's checkpoints to a worker thread; returns the function that stops it. */
export function startCheckpointer(database: DatabaseHandle, intervalMs = 200): () => void {
  const path = database.sqlite.filename;
  if (!path || path === ":memory:") return () => {};
  database.sqlite.run("PRAGMA wal_autocheckpoint = 0");
  const worker = new Worker(new URL("./checkpoint-worker.ts", import.meta.url).href);
  worker.unref();
  worker.postMessage({ path, intervalMs });
  return () => {
    worker.terminate();
    // A last checkpoint keeps the WAL small for the next start.
    database.sqlite.run("PRAGMA wal_checkpoint(PASSIVE)");
  };
}
