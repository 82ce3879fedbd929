import { Database } from "bun:sqlite";
import type { Outcome } from "../modules/requests/row";
import { isBusy } from "../db/busy";
import { encodeRow, LedgerWriter, type LedgerValue } from "./ledger-writer";
import { entryPointModule } from "../entry-points";
import type { LedgerWorkerMessage, LedgerWorkerReply } from "./ledger-worker";
import { RowNotRecorded } from "./not-recorded";
import type { LedgerRefusalListener } from "../storage/types";

export interface LedgerRow {
  requestId: string;
  organizationId: string;
  keyId: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  /** Of the prompt tokens, those the upstream read from its prompt cache. */
  cachedTokens: number;
  /**
   * What the row counts against the token quotas: prompt + completion at its model's `quota_weight` (see quotaTokens).
   * Null or absent when the weight is 1, so that the quotas' reads count prompt + completion.
   */
  quotaTokens?: number | null;
  outcome: Outcome;
  errorCode: string | null;
  ruleId: string | null;
  usageSource: "upstream" | "tokenizer";
  startedAt: number;
  endedAt: number;
  /** Milliseconds from the start to the model's first token; null when none came. */
  firstTokenMs: number | null;
}

interface Waiter {
  resolve: () => void;
  reject: (error: unknown) => void;
}

/**
 * Each turn's rows are staged on this thread (inbox.ts): a page or two appended to the WAL, without an fsync, is
 * cheaper than handing the batch to the writer thread and back (a copy, two wake-ups, a reply to settle; whole
 * answers a second rose by 4-11% when every batch was staged here rather than only batches of a few rows:
 * bench/HISTORY.md). Moving staged rows and checkpoints, whose fsyncs can take hundreds of milliseconds on a slow
 * disk, stay on the writer thread: after this many rows here, or `commitsBetweenMoves` commits, or `moveDelayMs`
 * after the first, the writer is asked to move them (it checkpoints afterwards, while this thread goes on staging).
 * While it moves, rows wait for its reply (see `onlyMovesInFlight`); whenever another connection holds the lock,
 * batches go to the writer instead. The writer thread starts only when first needed: until then small moves run here
 * (see `rowsMovedHere`).
 */
const rowsBetweenMoves = 1000;
/**
 * Each commit appends at least a page to the WAL (a one-row commit about 1.1: bench/results/ledger-pages.json), and
 * this thread never checkpoints: this many keep each of the writer's passes to about 1 MB when rows come one a turn.
 * By rows alone, 1,000 one-row commits appended 4.9 MB between passes.
 */
const commitsBetweenMoves = 200;
/**
 * Staged rows wait about this long to be moved. Rows that come while the move is in flight wait for it, so a short
 * move keeps the tail short: at 1,000 requests a second, the p99 fell by a paired 0.79 ms with 25 ms rather
 * than 100 (lower in all 8 rounds), and whole answers a second did not move (bench/HISTORY.md).
 */
const moveDelayMs = 25;
/** How soon a move put off by the writer's checkpoint pass is asked again. */
const passRecheckMs = 5;
/** At most this many keys' last-used times are written on this thread (one UPDATE each). */
const touchesHere = 16;
/**
 * Until the writer thread has started, a move of at most this many rows runs on this thread (a one-row move writes
 * about nine pages, well under a millisecond). A server that answers a few requests never starts the thread: it
 * holds about 3 MB that an idle server does not need (bench/HISTORY.md, fortieth session). A larger move means
 * load, and load keeps the writer running.
 */
const rowsMovedHere = 16;
/**
 * Commits on this thread (staged, moved, last-used times) after which the writer thread starts anyway: this thread
 * never checkpoints (a pass's fsyncs must not stop the event loop), so this bounds the WAL a server with few
 * requests builds up before the writer's passes copy it back, to a few megabytes.
 */
const commitsBeforeWriter = 200;

/** How long `flush` waits for the writer thread before giving up on what it has not committed. */
const flushTimeoutMs = 10_000;

class LedgerWriteError extends Error {
  override name = "LedgerWriteError";
}

/** Why a row is refused, as its request's 503 says it. */
const notWritten = "its database could not be written";

/**
 * The usage ledger: a group commit a turn, staged on this thread, moved by a writer thread of its own once there is
 * load (see above and ledger-worker.ts), which also takes batches when this thread cannot write. `record` resolves
 * only once its row is committed, so a caller that waits for it before finishing an answer never answers a request
 * the ledger could lose. The rows of one turn of the event loop travel together; an in-memory database (no file the
 * thread could open) is always written on this thread.
 */
export class Ledger {
  private unsent: LedgerValue[] = [];
  private unsentWaiters: Waiter[] = [];
  private readonly sent: { sequence: number; waiters: Waiter[] }[] = [];
  private sequence = 0;
  private scheduled = false;
  private failuresSeen = 0;
  private worker: Worker | undefined;
  /** Set once the writer thread will not run again (closed, or it died at start): rows are refused. */
  private stopped = false;
  /** Why the writer thread will not run again when it died rather than was closed: what readiness reports. */
  private failure: string | undefined;
  private commitsWithoutWriter = 0;
  private progress = new Int32Array(new SharedArrayBuffer(16));
  /** This thread's own writes: every row of an in-memory database, the staged rows of a file (see `rowsBetweenMoves`). */
  private readonly local: LedgerWriter;
  /** The connection of those writes to a file: its own, so that it never waits for the lock (see `withoutWaiting`). */
  readonly staging: Database | undefined;
  private readonly inMemory: boolean;
  private rowsStagedHere = 0;
  private commitsStagedHere = 0;
  private moveTimer: Timer | undefined;
  private workerStartedAt = 0;
  /** The database file, which the writer thread opens for itself. */
  private readonly path: string;

  constructor(
    private readonly sqlite: Database,
    /** Told of every commit that failed (and of the writer thread's end): the error, and the rows it refused. */
    private readonly onRefused: LedgerRefusalListener = () => {},
  ) {
    const path = sqlite.filename;
    this.path = path;
    this.inMemory = !path || path === ":memory:";
    if (this.inMemory) {
      this.local = new LedgerWriter(sqlite);
      return;
    }
    // A connection of its own rather than the server's with busy_timeout lowered and put back around each write:
    // those two statements cannot be cached (the PRAGMA takes effect when prepared), and they cost about 2 % of the
    // process's CPU at 1,000 requests a second (bench/HISTORY.md, thirty-eighth session). Its writes must not wait for
    // the lock, and it never checkpoints: the writer thread does (see ledger-worker.ts).
    const staging = new Database(path, { strict: true });
    staging.run("PRAGMA busy_timeout = 0");
    staging.run("PRAGMA synchronous = NORMAL");
    staging.run("PRAGMA wal_autocheckpoint = 0");
    this.staging = staging;
    this.local = new LedgerWriter(staging);
    // Nor does the server's own connection, on the event loop.
    sqlite.run("PRAGMA wal_autocheckpoint = 0");
    // The writer thread starts when it is first needed (see `rowsMovedHere`).
  }

  /** Queues a row for the next group commit; resolves when it is committed. */
  record(row: LedgerRow): Promise<void> {
    return new Promise((resolve, reject) => {
      encodeRow(row, this.unsent);
      this.unsentWaiters.push({ resolve, reject });
      if (this.scheduled) return;
      this.scheduled = true;
      setImmediate(() => this.send(false));
    });
  }

  /**
   * Commits everything recorded so far before returning (it blocks this thread until the writer is done): used
   * before usage is read back from the database, and at shutdown.
   */
  flush(): void {
    if (!this.worker && !this.stopped && !this.inMemory) {
      // No writer thread yet: what is unsent is staged, and every staged row moved, here (a busy lock hands both to
      // the writer below).
      this.send(false);
      if (this.unsentWaiters.length === 0 && this.sent.length === 0 && this.moveHere()) return;
    }
    // Posted even when nothing is waiting: the writer handles messages in order, so this also waits for the
    // last-used times sent before it.
    this.send(true, true);
    if (!this.worker) return;
    const deadline = performance.now() + flushTimeoutMs;
    for (let done = Atomics.load(this.progress, 0); done < this.sequence; done = Atomics.load(this.progress, 0)) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      Atomics.wait(this.progress, 0, done, left);
    }
    const failures = Atomics.load(this.progress, 1);
    // A failure whose reply has not arrived yet may be among these batches: refuse them all rather than guess.
    this.acknowledge(Atomics.load(this.progress, 0), failures !== this.failuresSeen ? "the ledger could not be written" : undefined);
    this.failuresSeen = failures;
  }

  /**
   * Records when keys were last used ([key id, time] pairs); nothing waits for it. A few keys are written here: on
   * the writer thread their transaction would hold the lock, and a batch that found it taken would go the round
   * trip to the writer that staging here avoids.
   */
  touchKeys(entries: [string, number][]): void {
    if (this.inMemory) {
      this.local.touchKeys(entries);
      return;
    }
    if (this.stopped) return;
    if (this.sent.length === 0 && entries.length <= touchesHere && this.touchHere(entries)) return;
    const message: LedgerWorkerMessage = { type: "touch", entries };
    this.writerThread()?.postMessage(message);
  }

  /** Writes last-used times on this thread; false when the lock is taken (the writer thread then does it). */
  private touchHere(entries: [string, number][]): boolean {
    try {
      const written = this.withoutWaiting(() => this.local.touchKeys(entries));
      if (written && !this.worker) this.commitsWithoutWriter++;
      return written;
    } catch {
      // last_used_at is informational; the next second's update carries a newer time anyway
      return true;
    }
  }

  /** Flushes, then stops the writer thread; rows it never committed are refused. The WAL is emptied. */
  close(): void {
    clearTimeout(this.moveTimer);
    this.moveTimer = undefined;
    this.flush();
    // Nothing stages after this (rows are refused once stopped), and closed first, the staging connection cannot
    // hold up the checkpoint below.
    this.stopped = true;
    this.staging?.close();
    const worker = this.worker;
    if (worker) {
      const message: LedgerWorkerMessage = { type: "close" };
      worker.postMessage(message);
      Atomics.wait(this.progress, 2, 0, flushTimeoutMs);
      worker.terminate();
      this.worker = undefined;
    }
    if (!this.inMemory) {
      // The writer (if it ran) has closed its connection; this one empties and truncates the WAL, so that the next
      // start does not read it back (start-up 150-170 ms with an 86 MB WAL left behind, instead of ~100).
      try {
        this.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
      } catch {
        // another process is writing: it leaves the WAL to whoever closes last
      }
    }
    this.acknowledge(Number.POSITIVE_INFINITY, "the ledger was closed before the row was written");
  }

  private send(urgent: boolean, evenIfEmpty = false): void {
    this.scheduled = false;
    if (this.unsentWaiters.length === 0 && !evenIfEmpty) return;
    // Rows wait in `unsent` for the move's reply (`releaseHeld`).
    if (!urgent && this.onlyMovesInFlight()) return;
    const values = this.unsent;
    const waiters = this.unsentWaiters;
    this.unsent = [];
    this.unsentWaiters = [];
    if (this.inMemory) {
      this.commitHere(values, waiters, false);
      return;
    }
    if (!this.stopped && this.stagesHere(urgent) && this.withoutWaiting(() => this.commitHere(values, waiters, true))) {
      this.noteStagedRows(waiters.length);
      return;
    }
    const worker = this.writerThread();
    if (!worker) {
      const cause = new LedgerWriteError(this.failure ?? "the ledger is closed");
      const refused = new RowNotRecorded(notWritten, cause);
      for (const waiter of waiters) waiter.reject(refused);
      // Counted as every refused row is. Few come here: once the writer is gone, requests are refused before their
      // upstream is called (SQLite storage's `available`), so these are the ones already past that check.
      if (waiters.length > 0) this.onRefused(cause, waiters.length);
      return;
    }
    this.sendToWriter(worker, values, waiters, urgent);
  }

  /**
   * Hands a batch to the writer thread. It moves every staged row, this thread's included, after the batch (see
   * ledger-worker.ts), so the count of rows and commits staged here starts again; the commits go with the batch, for
   * the writer's checkpoint passes.
   */
  private sendToWriter(worker: Worker, values: LedgerValue[], waiters: Waiter[], urgent: boolean): void {
    const stagedCommits = this.commitsStagedHere;
    this.rowsStagedHere = 0;
    this.commitsStagedHere = 0;
    const sequence = ++this.sequence;
    this.sent.push({ sequence, waiters });
    const message: LedgerWorkerMessage = { type: "rows", sequence, values, urgent, stagedCommits };
    worker.postMessage(message);
  }

  /**
   * Whether everything sent to the writer is a move (or a flush), no rows: rows recorded meanwhile wait for its reply
   * and are staged here then (`releaseHeld`). Posted to the writer, they would wait behind the same move anyway, and
   * cost this thread a copy and the writer a commit of its own: whole answers a second rose by a paired 2-6 % in
   * three runs (bench/HISTORY.md, fortieth session).
   */
  private onlyMovesInFlight(): boolean {
    if (this.sent.length === 0) return false;
    for (const batch of this.sent) if (batch.waiters.length > 0) return false;
    return true;
  }

  /** After a reply: rows held for a move are staged (or sent) once nothing is in flight. */
  private releaseHeld(): void {
    if (this.sent.length === 0 && this.unsentWaiters.length > 0) this.send(false);
  }

  /** Whether this batch is committed here (see `rowsBetweenMoves`) rather than by the writer thread. */
  private stagesHere(urgent: boolean): boolean {
    // Nothing in flight at the writer: its connection holds no write lock this commit could wait behind.
    return !urgent && this.sent.length === 0;
  }

  /** After a commit here: its rows are moved, and the WAL checkpointed, by the writer thread soon (see above). */
  private noteStagedRows(rows: number): void {
    this.rowsStagedHere += rows;
    this.commitsStagedHere++;
    if (!this.worker) this.commitsWithoutWriter++;
    if (this.rowsStagedHere >= rowsBetweenMoves || this.commitsStagedHere >= commitsBetweenMoves) this.askToMove();
    else if (!this.moveTimer) {
      this.moveTimer = setTimeout(() => this.askToMove(), moveDelayMs);
      this.moveTimer.unref();
    }
  }

  /**
   * An empty batch that asks the writer to move the staged rows. No request waits for it; until its reply arrives,
   * rows recorded meanwhile wait for it (see `onlyMovesInFlight`) rather than for the move's lock here.
   */
  private askToMove(): void {
    clearTimeout(this.moveTimer);
    this.moveTimer = undefined;
    if (this.stopped || this.commitsStagedHere === 0) return;
    if (!this.worker && this.rowsStagedHere <= rowsMovedHere && this.commitsWithoutWriter < commitsBeforeWriter && this.moveHere()) return;
    const worker = this.writerThread();
    if (!worker) return;
    // A move asked during a pass would wait for its fsyncs (114 ms seen), and every row staged meanwhile with it.
    if (Atomics.load(this.progress, 3) === 1) {
      this.moveTimer = setTimeout(() => this.askToMove(), passRecheckMs);
      this.moveTimer.unref();
      return;
    }
    this.sendToWriter(worker, [], [], true);
  }

  /**
   * Moves the staged rows on this thread, before the writer thread has started (see `rowsMovedHere`). False, with
   * nothing moved, when the lock is taken or the move fails: the writer thread then takes the move.
   */
  private moveHere(): boolean {
    clearTimeout(this.moveTimer);
    this.moveTimer = undefined;
    try {
      if (!this.withoutWaiting(() => this.local.move())) return false;
    } catch {
      return false;
    }
    this.rowsStagedHere = 0;
    this.commitsStagedHere = 0;
    this.commitsWithoutWriter++;
    return true;
  }

  /** The writer thread, started at its first use; undefined once stopped. */
  private writerThread(): Worker | undefined {
    if (!this.worker && !this.stopped) this.startWorker();
    return this.worker;
  }

  /** Commits on this thread and settles the waiters; with `handOffWhenBusy`, a busy lock is thrown, not refused. */
  private commitHere(values: LedgerValue[], waiters: Waiter[], handOffWhenBusy: boolean): void {
    try {
      this.local.commit([values]);
      // No writer thread moves an in-memory database's rows: they are moved at once.
      if (this.inMemory) this.local.move();
    } catch (error) {
      if (handOffWhenBusy && isBusy(error)) throw error;
      this.onRefused(error, waiters.length);
      const refused = new RowNotRecorded(notWritten, error);
      for (const waiter of waiters) waiter.reject(refused);
      return;
    }
    for (const waiter of waiters) waiter.resolve();
  }

  /**
   * Runs a write on the staging connection, which never waits for the database's lock: another process holding it
   * (the CLI, a second server on the same file) must not stop the event loop for up to `busy_timeout`. False, with
   * nothing written, when the lock is taken: the caller hands the write to the writer thread, which may wait.
   */
  private withoutWaiting(write: () => void): boolean {
    try {
      write();
      return true;
    } catch (error) {
      if (isBusy(error)) return false;
      throw error;
    }
  }

  /** Settles every sent batch up to `upTo`: committed, or refused with `error`; returns how many rows it refused. */
  private acknowledge(upTo: number, error: string | undefined): number {
    const cause = error === undefined ? undefined : new LedgerWriteError(error);
    const refused = cause === undefined ? undefined : new RowNotRecorded(notWritten, cause);
    let rows = 0;
    while (this.sent.length > 0 && (this.sent[0] as { sequence: number }).sequence <= upTo) {
      const batch = this.sent.shift() as { waiters: Waiter[] };
      rows += batch.waiters.length;
      for (const waiter of batch.waiters) {
        if (refused === undefined) waiter.resolve();
        else waiter.reject(refused);
      }
    }
    if (cause === undefined) return 0;
    if (rows > 0) this.onRefused(cause, rows);
    return rows;
  }

  /**
   * The writer thread died or ended unasked: what it had not committed is refused, never left waiting, and a new thread
   * takes the next rows. A thread that dies at once (the file cannot be opened) is not restarted in a loop: rows are
   * refused instead.
   */
  private writerEnded(worker: Worker, error: string): void {
    // The close that follows an error, or the one this ledger's own stop causes: nothing left to do.
    if (this.worker !== worker) return;
    // Told even when no row was in flight: the thread's end is worth a line of the log.
    if (this.acknowledge(Number.POSITIVE_INFINITY, error) === 0) this.onRefused(new LedgerWriteError(error), 0);
    if (performance.now() - this.workerStartedAt > 1000) this.startWorker();
    else {
      this.worker = undefined;
      this.stopped = true;
      this.failure = error;
    }
    this.releaseHeld();
  }

  /** What stops this ledger from recording rows (its writer thread could not run), for readiness; undefined when none. */
  problem(): string | undefined {
    return this.failure;
  }

  private startWorker(): void {
    const worker = new Worker(entryPointModule("ledger/ledger-worker.ts"));
    worker.unref();
    worker.onmessage = (event: MessageEvent<LedgerWorkerReply>) => {
      const reply = event.data;
      this.failuresSeen = Math.max(this.failuresSeen, reply.failures);
      this.acknowledge(reply.upTo, reply.error);
      this.releaseHeld();
    };
    worker.onerror = (event) => this.writerEnded(worker, `the ledger's writer stopped: ${event.message}`);
    // A thread that ends without an error (stopped by the runtime) would otherwise leave its rows waiting for ever, and
    // every row after them, since none is staged here while batches are in flight.
    worker.addEventListener("close", () => this.writerEnded(worker, "the ledger's writer stopped"));
    this.progress = new Int32Array(new SharedArrayBuffer(16));
    this.sequence = 0;
    this.failuresSeen = 0;
    this.worker = worker;
    this.workerStartedAt = performance.now();
    const open: LedgerWorkerMessage = { type: "open", path: this.path, progress: this.progress.buffer as SharedArrayBuffer };
    worker.postMessage(open);
  }
}
