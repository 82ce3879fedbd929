const levels = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const;
export type LogLevel = keyof typeof levels;

/**
 * Structured JSON logs, one object per line on stdout, at or above SLUICE_LOG_LEVEL (default info). Lines are
 * buffered and flushed every few milliseconds, so a busy server does not make a write call per request. Callers
 * must never pass a key, a password or message text.
 */
export class Logger {
  private readonly threshold: number;
  private buffer: string[] = [];
  private timer: Timer | undefined;
  /** The ISO time of `stampedAt`: a busy server writes many lines within one millisecond. */
  private stamp = "";
  private stampedAt = 0;

  constructor(
    level: string | undefined = process.env.SLUICE_LOG_LEVEL,
    private readonly write: (text: string) => void = (text) => process.stdout.write(text),
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
    if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), 5);
      this.timer.unref();
    }
  }

  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.buffer.length === 0) return;
    const text = `${this.buffer.join("\n")}\n`;
    this.buffer = [];
    this.write(text);
  }
}
