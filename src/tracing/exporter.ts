import type { Logger } from "../modules/observability/logger";
import { otlpAttributes, otlpSpan, type Span } from "./span";
import { shownEndpoint, type TracingSettings } from "./settings";

export type ExportResult = "exported" | "failed" | "dropped";

/** A failed export is logged at most this often, with the spans lost since the last line. */
const failureLogIntervalMs = 60_000;
/** Sends of one batch at most, and the wait before the first resend (doubled each time). */
const maxAttempts = 5;
const firstRetryMs = 1000;
/** The collector's answers that say to try again later, as OTLP/HTTP's specification lists them. */
const retryableStatuses = new Set([429, 502, 503, 504]);

/**
 * Spans in batches to an OTLP/HTTP collector, as OpenTelemetry's batch span processor sends them: a batch goes when it
 * is full or when its first span has waited `scheduleDelayMs`, one export at a time. Spans beyond `maxQueueSize`
 * are dropped rather than held, so a collector that is down costs memory up to that bound and no request anything.
 * A batch the collector could not take for now (no connection, a time limit, 429, 502, 503, 504: a collector
 * restarting) is sent again after 1, 2, 4 and 8 s, as OTLP's exporters retry; after that, or for any other answer, its
 * spans are counted as failed.
 */
export class SpanExporter {
  private queue: Span[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private exporting: Promise<void> | undefined;
  /** A batch to send again, and how many times it was sent. */
  private retry: { batch: Span[]; attempts: number } | undefined;
  private readonly resource: { attributes: ReturnType<typeof otlpAttributes> };
  private lastFailureLog = Number.NEGATIVE_INFINITY;
  private failedSinceLog = 0;

  constructor(
    private readonly settings: TracingSettings,
    private readonly logger: Logger,
    private readonly counted: (result: ExportResult, spans: number) => void,
  ) {
    this.resource = { attributes: otlpAttributes(settings.resource) };
  }

  add(span: Span): void {
    if (this.queue.length >= this.settings.maxQueueSize) {
      this.counted("dropped", 1);
      return;
    }
    this.queue.push(span);
    // An export under way, or a batch waiting to be sent again: its timer sends the next.
    if (this.exporting || this.retry) return;
    if (this.queue.length >= this.settings.maxExportBatchSize) this.startExport();
    else this.timer ??= setTimeout(() => this.startExport(), this.settings.scheduleDelayMs).unref();
  }

  /** Sends every span held, batch by batch, waiting for an export under way first; for a stop. */
  async flush(): Promise<void> {
    while (this.exporting || this.queue.length > 0 || this.retry) {
      if (!this.exporting) this.startExport();
      await this.exporting;
    }
  }

  private startExport(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.exporting || (this.queue.length === 0 && !this.retry)) return;
    const retry = this.retry;
    this.retry = undefined;
    const batch = retry ? retry.batch : this.queue.splice(0, this.settings.maxExportBatchSize);
    this.exporting = this.post(batch, retry ? retry.attempts + 1 : 1).finally(() => {
      this.exporting = undefined;
      if (this.retry) this.timer ??= setTimeout(() => this.startExport(), firstRetryMs * 2 ** (this.retry.attempts - 1)).unref();
      else if (this.queue.length >= this.settings.maxExportBatchSize) this.startExport();
      else if (this.queue.length > 0) this.timer ??= setTimeout(() => this.startExport(), this.settings.scheduleDelayMs).unref();
    });
  }

  private async post(batch: Span[], attempts: number): Promise<void> {
    const body = JSON.stringify({
      resourceSpans: [{ resource: this.resource, scopeSpans: [{ scope: { name: "sluice" }, spans: batch.map(otlpSpan) }] }],
    });
    try {
      const response = await fetch(this.settings.endpoint, {
        method: "POST",
        headers: { ...this.settings.headers, "content-type": "application/json" },
        body,
        signal: AbortSignal.timeout(this.settings.timeoutMs),
        redirect: "manual",
      });
      await response.body?.cancel().catch(() => undefined);
      if (response.status >= 200 && response.status < 300) {
        this.counted("exported", batch.length);
        return;
      }
      if (retryableStatuses.has(response.status) && attempts < maxAttempts) this.retry = { batch, attempts };
      else this.failed(batch.length, `the collector answered ${response.status}`);
    } catch (error) {
      if (attempts < maxAttempts) this.retry = { batch, attempts };
      else this.failed(batch.length, error instanceof Error ? error.message : String(error));
    }
  }

  private failed(spans: number, reason: string): void {
    this.counted("failed", spans);
    this.failedSinceLog += spans;
    const now = performance.now();
    if (now - this.lastFailureLog < failureLogIntervalMs) return;
    this.lastFailureLog = now;
    this.logger.log("warn", { message: "trace export failed", endpoint: shownEndpoint(this.settings), reason, spans_lost: this.failedSinceLog });
    this.failedSinceLog = 0;
  }
}
