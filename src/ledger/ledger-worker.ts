// The writer thread of the request path: ledger rows, and keys' last-used times. A commit writes every page it
// touched to the WAL; on the server's event loop that was ~15% of the CPU of a whole answer. Here it runs beside
// the server: rows arrive in batches (grouped by the server, see ledger.ts), and every batch that arrived while a
// commit ran shares the next transaction.
import { Database } from "bun:sqlite";
import { LedgerWriter, type LedgerValue } from "./ledger-writer";

declare const self: Worker;

/** What the server sends: first where the database is, then rows and last-used times. */
export type LedgerWorkerMessage =
  | { type: "open"; path: string; progress: SharedArrayBuffer; autocheckpoint: boolean }
  | { type: "rows"; sequence: number; values: LedgerValue[]; urgent: boolean }
  | { type: "touch"; entries: [string, number][] }
  /** Whether SQLite checkpoints after this thread's commits (when no checkpoint thread runs). */
  | { type: "autocheckpoint"; enabled: boolean }
  | { type: "close" };

/** What the writer answers after each transaction: every batch up to `upTo` is committed, or failed. */
export interface LedgerWorkerReply {
  upTo: number;
  failures: number;
  error?: string;
}

let writerDatabase: Database;
let writer: LedgerWriter;
/**
 * [0]: the last sequence processed; [1]: how many transactions failed; [2]: 1 once the connection is closed. The
 * server may block on [0] and [2] (Atomics.wait).
 */
let progress: Int32Array;
let queued: LedgerValue[][] = [];
let queuedUpTo = 0;
let scheduled = false;

function commit(): void {
  scheduled = false;
  if (queued.length === 0) return;
  const batches = queued;
  const upTo = queuedUpTo;
  queued = [];
  let error: string | undefined;
  try {
    writer.commit(batches);
  } catch (failure) {
    error = String(failure);
    Atomics.add(progress, 1, 1);
  }
  Atomics.store(progress, 0, upTo);
  Atomics.notify(progress, 0);
  const reply: LedgerWorkerReply = { upTo, failures: Atomics.load(progress, 1), error };
  self.postMessage(reply);
}

self.onmessage = (event: MessageEvent<LedgerWorkerMessage>) => {
  const message = event.data;
  if (message.type === "open") {
    const database = new Database(message.path, { strict: true });
    database.run("PRAGMA busy_timeout = 5000");
    database.run("PRAGMA synchronous = NORMAL");
    // After a WAL restart, a WAL file grown by a burst is cut back to this size.
    database.run("PRAGMA journal_size_limit = 67108864");
    // The checkpoint thread does this; a checkpoint here would make the answers waiting for a commit wait for fsync.
    database.run(`PRAGMA wal_autocheckpoint = ${message.autocheckpoint ? 1000 : 0}`);
    writerDatabase = database;
    writer = new LedgerWriter(database);
    progress = new Int32Array(message.progress);
    return;
  }
  if (message.type === "close") {
    commit();
    writerDatabase.close();
    Atomics.store(progress, 2, 1);
    Atomics.notify(progress, 2);
    return;
  }
  if (message.type === "autocheckpoint") {
    writerDatabase.run(`PRAGMA wal_autocheckpoint = ${message.enabled ? 1000 : 0}`);
    return;
  }
  if (message.type === "touch") {
    try {
      writer.touchKeys(message.entries);
    } catch {
      // last_used_at is informational; the next second's update carries a newer time anyway
    }
    return;
  }
  queued.push(message.values);
  queuedUpTo = message.sequence;
  if (message.urgent) commit();
  else if (!scheduled) {
    scheduled = true;
    setImmediate(commit);
  }
};
