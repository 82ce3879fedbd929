// Runs SQLite checkpoints on a thread of its own. A checkpoint copies the WAL into the database file and fsyncs it,
// and an fsync can take a hundred times its usual millisecond, so a checkpoint never runs inside a commit that an
// answer waits for (the ledger's writer runs with wal_autocheckpoint = 0).
// - PASSIVE passes never block the writer. They run once a second, not more often: even beside the writer, a slow
//   fsync holds up its WAL appends through the filesystem's journal, so fewer fsyncs mean fewer stalls.
// - Under steady writes a PASSIVE pass never finds the WAL idle, so the WAL would grow without end. Once it holds
//   `restartFrames`, a RESTART right after the PASSIVE pass (which did the copying) lets the next commit start the
//   WAL from its beginning; it holds the writer back for about one fsync, hence only that rarely.
// - No busy handler: a RESTART waiting for readers would hold the writer's lock while it slept, and every answer
//   with it; without one it does what it can at once, and the next pass tries again.
import { Database } from "bun:sqlite";

declare const self: Worker;

/** 16,384 pages of 4 KB: a 64 MB WAL, about three seconds of writes at 1,000 single-row commits a second. */
const restartFrames = 16_384;

interface CheckpointResult {
  busy: number;
  log: number;
  checkpointed: number;
}

/** First where the database is (and a flag the server waits on at stop), then "stop". */
export type CheckpointMessage = { path: string; intervalMs: number; stopped: SharedArrayBuffer } | "stop";

let database: Database | undefined;
let timer: Timer | undefined;
let stopped: Int32Array | undefined;

self.onmessage = (event: MessageEvent<CheckpointMessage>) => {
  const message = event.data;
  if (message === "stop") {
    // The connection is closed before the thread goes: only the last connection to close removes the WAL.
    clearInterval(timer);
    database?.close();
    if (stopped) {
      Atomics.store(stopped, 0, 1);
      Atomics.notify(stopped, 0);
    }
    return;
  }
  stopped = new Int32Array(message.stopped);
  const opened = new Database(message.path);
  database = opened;
  opened.run("PRAGMA busy_timeout = 0");
  const passive = opened.query<CheckpointResult, []>("PRAGMA wal_checkpoint(PASSIVE)");
  const restart = opened.query<CheckpointResult, []>("PRAGMA wal_checkpoint(RESTART)");
  timer = setInterval(() => {
    try {
      const pass = passive.get();
      if (pass && pass.log > restartFrames) restart.get();
    } catch {
      // the database is locked right now: the next pass tries again
    }
  }, message.intervalMs);
};
