// The writer thread of the request path: it moves staged ledger rows into usage_ledger and the aggregates, and
// checkpoints. The server starts it when first needed (a server with few requests moves their rows itself: ledger.ts).
// The server stages each turn's rows itself (usage_ledger_inbox, inbox.ts: a page or two an answer waits for) and asks
// this thread, every 25 ms or so, to move them (ledger.ts); until that reply it holds the rows that come meanwhile.
// Whenever another connection holds the lock, the server sends its rows here instead: every batch that arrived while
// a commit ran shares the next transaction, and after replying this thread moves what it staged, at most every
// `moveIntervalMs`, so that each move carries many rows. It also writes keys' last-used times in bulk.
// A checkpoint follows a move (at most once a second, see `checkpointIntervalMs`) once no rows wait here, while the
// server goes on staging its own: no answer waits behind its fsyncs (p99 at 1,000 requests a second: 3.0 ms, against
// 3.7 with each pass before the reply to the server's move, when the rows of those milliseconds waited for it;
// bench/HISTORY.md). A pass that runs while rows are appended never leaves the WAL fully copied when the next write
// comes, and only then does SQLite start the WAL again from its beginning; so once it holds `restartPages`, the next
// pass runs before a reply, while the server holds its rows and nothing appends, and the WAL starts again. (A
// separate checkpoint thread that never did this chased a WAL that grew under its feet, and stalled commits behind
// fsyncs of tens of megabytes: p99 40-260 ms.)
import { Database, type Statement } from "bun:sqlite";
import { LedgerWriter, type LedgerValue } from "./ledger-writer";

declare const self: Worker;

/** What the server sends: first where the database is, then rows and last-used times. */
export type LedgerWorkerMessage =
  | { type: "open"; path: string; progress: SharedArrayBuffer }
  /**
   * `urgent`: commit at once, and move every staged row before replying (a flush waits for that, and the server asks
   * so for the rows it staged itself).
   */
  | {
      type: "rows";
      sequence: number;
      values: LedgerValue[];
      urgent: boolean;
      /** Commits the server made itself since its last message: each appended a page or more to the WAL. */
      stagedCommits: number;
    }
  | { type: "touch"; entries: [string, number][] }
  | { type: "close" };

/** What the writer answers after each transaction: every batch up to `upTo` is committed, or failed. */
export interface LedgerWorkerReply {
  upTo: number;
  failures: number;
  error?: string;
}

/**
 * Pages of WAL (16 MB) past which the next pass runs before a reply (see above): at 1,000 requests a second about
 * once every few seconds, where each pass ran before the reply to a move before, ten times a second.
 */
const restartPages = 4096;
/**
 * Staged rows wait at most about this long to be moved (the request log and the usage charts read staged rows too;
 * `sluice requests` lags by no more). A move's rows share the index pages they enter: 200 rows a move cost about
 * 31 µs a row staged and moved, 1,000 about 22 (bench/HISTORY.md), and whole answers a second rose by 7-17% with
 * 100 ms rather than 20.
 */
const moveIntervalMs = 100;
/**
 * Passes come at most this often, unless `commitsBetweenPasses` came sooner. A move rewrites the same few pages (each
 * index's last page, the aggregates' rows), and a pass copies each page once however often it changed since the
 * last: a pass after every move copied them every 25-100 ms, with an fsync each time, and cost the writer a third
 * more CPU a row (bench/HISTORY.md).
 */
const checkpointIntervalMs = 1000;
/**
 * Commits (the server's and this thread's) after which a pass comes at once: each appends at least a page, so this
 * bounds the WAL a pass finds to about 4 MB when rows come one a commit, as they do at light load.
 */
const commitsBetweenPasses = 1000;

let writerDatabase: Database;
let writer: LedgerWriter;
/**
 * [0]: the last sequence processed; [1]: how many transactions failed; [2]: 1 once the connection is closed; [3]: 1
 * while a checkpoint pass runs (the server does not ask for a move then: see ledger.ts). The
 * server may block on [0] and [2] (Atomics.wait).
 */
let progress: Int32Array;
let queued: LedgerValue[][] = [];
let queuedUpTo = 0;
let urgentAsked = false;
let scheduled = false;
let lastMove = 0;
let moveTimer: Timer | undefined;
let checkpointTimer: Timer | undefined;
let lastCheckpoint = 0;
/** Commits since the last pass began. */
let commitsSincePass = 0;
let checkpointStatement: Statement<{ log: number }, []>;
/** Pages in the WAL since it last started from its beginning, as the last pass found them. */
let walPages = 0;

/** Moves the staged rows; a failure (the lock held past busy_timeout, a full disk) leaves them staged for the next. */
function move(): void {
  if (moveTimer) {
    clearTimeout(moveTimer);
    moveTimer = undefined;
  }
  lastMove = performance.now();
  try {
    if (writer.move() > 0) commitsSincePass++;
    checkpointSoon();
  } catch {
    moveSoon();
  }
}

/** A pass once no rows wait here, so that none waits behind its fsyncs (see `checkpointIntervalMs`). */
function checkpointSoon(): void {
  const due = commitsSincePass >= commitsBetweenPasses;
  if (due && checkpointTimer) {
    clearTimeout(checkpointTimer);
    checkpointTimer = undefined;
  }
  checkpointTimer ??= setTimeout(
    () => {
      checkpointTimer = undefined;
      if (queued.length > 0) checkpointSoon();
      else checkpoint();
    },
    due ? 0 : Math.max(0, lastCheckpoint + checkpointIntervalMs - performance.now()),
  );
}

/** Copies what it can of the WAL into the database file, and notes how long the WAL has grown. */
function checkpoint(): void {
  lastCheckpoint = performance.now();
  commitsSincePass = 0;
  Atomics.store(progress, 3, 1);
  try {
    walPages = checkpointStatement.get()?.log ?? 0;
  } catch {
    // the next pass copies what this one could not
  } finally {
    Atomics.store(progress, 3, 0);
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
  const moveFirst = urgentAsked;
  urgentAsked = false;
  let error: string | undefined;
  try {
    writer.commit(batches);
    commitsSincePass++;
  } catch (failure) {
    error = String(failure);
    Atomics.add(progress, 1, 1);
  }
  if (moveFirst) move();
  if (walPages >= restartPages) {
    // The server holds its rows (or sends them here) until this reply: nothing appends during this pass, and the
    // next write starts the WAL again from its beginning.
    checkpoint();
    walPages = 0;
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
    database.run("PRAGMA wal_autocheckpoint = 0");
    checkpointStatement = database.query("PRAGMA wal_checkpoint(PASSIVE)");
    writerDatabase = database;
    writer = new LedgerWriter(database);
    progress = new Int32Array(message.progress);
    return;
  }
  if (message.type === "close") {
    commit();
    move();
    clearTimeout(moveTimer);
    clearTimeout(checkpointTimer);
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
  commitsSincePass += message.stagedCommits;
  urgentAsked ||= message.urgent;
  if (message.urgent) commit();
  else if (!scheduled) {
    scheduled = true;
    setImmediate(commit);
  }
};
