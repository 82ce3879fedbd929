const levels = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const;
export type LogLevel = keyof typeof levels;

/** Lines are written together at most this often while lines keep coming. */
const flushIntervalMs = 5;
/** The longest a line waits when no other line follows it (the end of a burst). */
const quietFlushMs = 50;

/**
 * Structured JSON logs, one object per line on stdout, at or above SLUICE_LOG_LEVEL (default info). Lines are
 * buffered, so a busy server does not make a write call per request. They are written by the line that finds the
 * last write `flushIntervalMs` old, in the turn of the event loop that logs it: a timer of its own woke an idle
 * event loop about 200 times a second at 1,000 requests a second, and each wake-up cost more than the write
 * (bench/HISTORY.md, "The request log line's wake-ups, priced at 1,000 requests a second"). A timer writes what is
 * left once lines stop coming. Callers must never pass a key, a password or message text.
 */
export class Logger {
  private readonly threshold: number;
  private buffer: string[] = [];
  private timer: Timer | undefined;
  /** The ISO time of `stampedAt`: a busy server writes many lines within one millisecond. */
  private stamp = "";
  private stampedAt = 0;
  private flushedAt = Number.NEGATIVE_INFINITY;

  constructor(
    level: string | undefined = process.env.SLUICE_LOG_LEVEL,
    private readonly write: (text: string) => void = (text) => process.stdout.write(text),
    /** Milliseconds, for the write interval (a test's own clock). */
    private readonly clock: () => number = () => performance.now(),
  ) {
    this.threshold = levels[(level ?? "info") as LogLevel] ?? levels.info;
  }

  enabled(level: LogLevel): boolean {
    return levels[level] >= this.threshold;
  }

  log(level: LogLevel, fields: Record<string, unknown>): void {
    if (!this.enabled(level)) return;
    const now = Date.now();
    if (now !== this.stampedAt) {
      this.stampedAt = now;
      this.stamp = new Date(now).toISOString();
    }
    // The fields are serialized as they are, not copied into a new object behind time and level (a copy per line).
    const body = JSON.stringify(fields);
    this.buffer.push(`{"time":"${this.stamp}","level":"${level}"${body === "{}" ? "}" : `,${body.slice(1)}`}`);
    if (this.clock() - this.flushedAt >= flushIntervalMs) this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), quietFlushMs);
      this.timer.unref();
    }
  }

  /** Writes every buffered line now (at shutdown, and before a test reads them). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.buffer.length === 0) return;
    this.flushedAt = this.clock();
    const text = `${this.buffer.join("\n")}\n`;
    this.buffer = [];
    try {
      this.write(text);
    } catch {
      // Lines are written in the turn of a request (see above): stdout gone must not fail the request that logs.
    }
  }
}
