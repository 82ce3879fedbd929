// The writer thread of the request path: it moves staged ledger rows into usage_ledger and the aggregates, and
// checkpoints. The server stages each turn's rows itself (usage_ledger_inbox, inbox.ts: a page or two an answer
// waits for) and asks this thread, about every 100 ms, to move them and checkpoint (ledger.ts). Until that reply, and
// whenever another connection holds the lock, the server sends its rows here instead: every batch that arrived while
// a commit ran shares the next transaction, and after replying this thread moves what it staged, at most every
// `moveIntervalMs`, so that each move carries many rows. It also writes keys' last-used times in bulk.
// Checkpoints run here, right after the commit that fills `checkpointPages` of WAL, and when the server asks with its
// staged rows: nothing else appends meanwhile, so each pass copies the whole WAL and the next commit starts it again
// from its beginning. Small passes keep each fsync short: a separate checkpoint thread, whose passes chased a WAL
// that kept growing under its feet, stalled commits behind fsyncs of tens of megabytes (p99 at 1,000 requests a
// second after a burst: 40-260 ms, against 8-13 ms this way; bench/README.md).
import { Database } from "bun:sqlite";
import { LedgerWriter, type LedgerValue } from "./ledger-writer";

declare const self: Worker;

/** What the server sends: first where the database is, then rows and last-used times. */
export type LedgerWorkerMessage =
  | { type: "open"; path: string; progress: SharedArrayBuffer }
  /**
   * `urgent`: commit at once, and move every staged row before replying (a flush waits for that). `checkpoint`: the
   * server has staged rows itself (ledger.ts): move them and checkpoint before replying.
   */
  | { type: "rows"; sequence: number; values: LedgerValue[]; urgent: boolean; checkpoint: boolean }
  | { type: "touch"; entries: [string, number][] }
  | { type: "close" };

/** What the writer answers after each transaction: every batch up to `upTo` is committed, or failed. */
export interface LedgerWorkerReply {
  upTo: number;
  failures: number;
  error?: string;
}

/** About 1 MB of WAL: 1,000 pages gave p99s twice as long (bench/README.md). */
const checkpointPages = 250;
/**
 * Staged rows wait at most about this long to be moved (the request log and the usage charts read staged rows too;
 * `sluice requests` lags by no more). A move's rows share the index pages they enter: 200 rows a move cost about
 * 31 µs a row staged and moved, 1,000 about 22 (bench/README.md), and whole answers a second rose by 7-17% with
 * 100 ms rather than 20.
 */
const moveIntervalMs = 100;

let writerDatabase: Database;
let writer: LedgerWriter;
/**
 * [0]: the last sequence processed; [1]: how many transactions failed; [2]: 1 once the connection is closed. The
 * server may block on [0] and [2] (Atomics.wait).
 */
let progress: Int32Array;
let queued: LedgerValue[][] = [];
let queuedUpTo = 0;
let checkpointAsked = false;
let urgentAsked = false;
let scheduled = false;
let lastMove = 0;
let moveTimer: Timer | undefined;

/** Moves the staged rows; a failure (the lock held past busy_timeout, a full disk) leaves them staged for the next. */
function move(): void {
  if (moveTimer) {
    clearTimeout(moveTimer);
    moveTimer = undefined;
  }
  lastMove = performance.now();
  try {
    writer.move();
  } catch {
    moveSoon();
  }
}

function moveSoon(): void {
  moveTimer ??= setTimeout(move, Math.max(0, lastMove + moveIntervalMs - performance.now()));
}

function commit(): void {
  scheduled = false;
  if (queued.length === 0) return;
  const batches = queued;
  const upTo = queuedUpTo;
  queued = [];
  const moveFirst = urgentAsked || checkpointAsked;
  urgentAsked = false;
  let error: string | undefined;
  try {
    writer.commit(batches);
  } catch (failure) {
    error = String(failure);
    Atomics.add(progress, 1, 1);
  }
  if (moveFirst) move();
  if (checkpointAsked) {
    checkpointAsked = false;
    try {
      // Before the reply: until it arrives the server sends its rows here, so nothing appends during the pass and it
      // copies the whole WAL, which the next commit then starts again from its beginning.
      writerDatabase.run("PRAGMA wal_checkpoint(PASSIVE)");
    } catch {
      // the next commit past `checkpointPages` checkpoints anyway
    }
  }
  Atomics.store(progress, 0, upTo);
  Atomics.notify(progress, 0);
  const reply: LedgerWorkerReply = { upTo, failures: Atomics.load(progress, 1), error };
  self.postMessage(reply);
  if (moveFirst) return;
  // After the reply: the answers of this batch do not wait for the move.
  if (performance.now() - lastMove >= moveIntervalMs) move();
  else moveSoon();
}

self.onmessage = (event: MessageEvent<LedgerWorkerMessage>) => {
  const message = event.data;
  if (message.type === "open") {
    const database = new Database(message.path, { strict: true });
    database.run("PRAGMA busy_timeout = 5000");
    database.run("PRAGMA synchronous = NORMAL");
    // After a WAL restart, a WAL file grown by a burst is cut back to this size.
    database.run("PRAGMA journal_size_limit = 67108864");
    database.run(`PRAGMA wal_autocheckpoint = ${checkpointPages}`);
    writerDatabase = database;
    writer = new LedgerWriter(database);
    progress = new Int32Array(message.progress);
    return;
  }
  if (message.type === "close") {
    commit();
    move();
    clearTimeout(moveTimer);
    writerDatabase.close();
    Atomics.store(progress, 2, 1);
    Atomics.notify(progress, 2);
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
  checkpointAsked ||= message.checkpoint;
  urgentAsked ||= message.urgent;
  if (message.urgent) commit();
  else if (!scheduled) {
    scheduled = true;
    setImmediate(commit);
  }
};
