import { workerModule } from "../workers";
import type { CheckpointMessage } from "./checkpoint-worker";
import type { DatabaseHandle } from "./client";

/** How long a stop waits for the checkpoint thread to close its connection (a pass in progress finishes first). */
const stopWaitMs = 5000;

/**
 * Moves the database's checkpoints to a thread of their own (see checkpoint-worker.ts); returns the function that
 * stops it. If the thread cannot run, `onFailure` is called so that writers checkpoint by themselves again.
 */
export function startCheckpointer(database: DatabaseHandle, onFailure: () => void, intervalMs = 1000): () => void {
  const path = database.sqlite.filename;
  if (!path || path === ":memory:") return () => {};
  database.sqlite.run("PRAGMA wal_autocheckpoint = 0");
  const worker = new Worker(workerModule("db/checkpoint-worker.ts"));
  worker.unref();
  let running = true;
  worker.onerror = (event) => {
    running = false;
    database.sqlite.run("PRAGMA wal_autocheckpoint = 1000");
    onFailure();
    console.error(JSON.stringify({ level: "error", message: "the checkpoint thread stopped; SQLite checkpoints after commits instead", error: event.message }));
  };
  const stopped = new Int32Array(new SharedArrayBuffer(4));
  const start: CheckpointMessage = { path, intervalMs, stopped: stopped.buffer as SharedArrayBuffer };
  worker.postMessage(start);
  return () => {
    const stop: CheckpointMessage = "stop";
    if (running) {
      worker.postMessage(stop);
      Atomics.wait(stopped, 0, 0, stopWaitMs);
    }
    worker.terminate();
    // The writers are closed by now: an emptied, truncated WAL lets the next start skip reading it back (measured:
    // start-up 150-170 ms with an 86 MB WAL left behind, instead of ~100).
    database.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
  };
}
