// The ledger's retention (`[ledger] retention_days`): rows of requests that ended longer ago are deleted, a small batch
// at a time, so that the database stops growing with every request. Reports keep their totals: they are read from the
// hourly and monthly aggregates, which stay.
import { isBusy } from "../db/busy";
import type { RequestLogRepository } from "../storage/types";
import { startOfMonth } from "../usage-periods";

const dayMs = 86_400_000;
const hourMs = 3_600_000;
/**
 * Rows one delete takes. On SQLite a delete runs on the server's thread and holds the database's write lock: 500 rows
 * (each leaving six B-trees) take a few milliseconds, which the answers that commit meanwhile wait for.
 */
export const retentionBatchRows = 500;
/** The pause between two deletes, for the answers' own commits: at most about 5,000 rows a second. */
const pauseMs = 100;
/** A database busy this many times in a row ends the run; the next one goes on. */
const busyTries = 10;
const everyMs = hourMs;
/** The first run waits this long after start-up, which it must not slow. */
const firstRunDelayMs = 60_000;

/**
 * The time before which a retention of `days` deletes rows. Never a row of the current UTC month or of the 6 hours
 * before it, whatever `days` says: a key's caps are read back from its rows of the month and of the last 5 hours, and
 * a usage reset rebuilds the month's totals from its rows.
 */
export function retentionCutoff(now: number, days: number): number {
  return Math.min(now - days * dayMs, startOfMonth(now) - 6 * hourMs);
}

export interface LedgerRetentionDependencies {
  requestLog: RequestLogRepository;
  /** Read at each run: a reloaded configuration's. Undefined: nothing is deleted. */
  retentionDays: () => number | undefined;
  clock: () => number;
  /** Told after each run that deleted rows: how many, and the time before which they ended. */
  deleted?: (rows: number, before: number) => void;
  /** Told of a run that stopped on an error (the next run tries again). */
  failed?: (error: unknown) => void;
}

/** Deletes the ledger's rows past their retention: a run a minute after start, then every hour. */
export class LedgerRetention {
  private timer: Timer | undefined;
  private running: Promise<number> | undefined;
  private closed = false;

  constructor(private readonly deps: LedgerRetentionDependencies) {}

  start(): void {
    const tick = (): void => {
      this.timer = undefined;
      void this.run()
        .catch((error: unknown) => this.deps.failed?.(error))
        .finally(() => {
          if (!this.closed) this.timer = setTimeout(tick, everyMs).unref();
        });
    };
    this.timer = setTimeout(tick, firstRunDelayMs).unref();
  }

  /** Deletes every row past the retention, a batch at a time; resolves with how many. One run at a time. */
  run(): Promise<number> {
    this.running ??= this.deleteOld().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** Stops the timer, and waits for a run under way to end its batch. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.running?.catch(() => undefined);
  }

  private async deleteOld(): Promise<number> {
    let total = 0;
    let before = 0;
    let busy = 0;
    try {
      while (!this.closed) {
        const days = this.deps.retentionDays();
        if (days === undefined) break;
        before = retentionCutoff(this.deps.clock(), days);
        let deleted: number;
        try {
          deleted = await this.deps.requestLog.deleteBefore(before, retentionBatchRows);
          busy = 0;
        } catch (error) {
          if (!isBusy(error) || ++busy >= busyTries) throw error;
          await Bun.sleep(pauseMs);
          continue;
        }
        total += deleted;
        if (deleted < retentionBatchRows) break;
        await Bun.sleep(pauseMs);
      }
    } finally {
      // Also what a run that failed halfway had deleted.
      if (total > 0) this.deps.deleted?.(total, before);
    }
    return total;
  }
}
