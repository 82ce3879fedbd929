import type { Logger } from "../modules/observability/logger";
import { otlpAttributes, otlpSpan, type Span } from "./span";
import { shownEndpoint, type TracingSettings } from "./settings";

export type ExportResult = "exported" | "failed" | "dropped";

/** A failed export is logged at most this often, with the spans lost since the last line. */
const failureLogIntervalMs = 60_000;

/**
 * Spans in batches to an OTLP/HTTP collector, as OpenTelemetry's batch span processor sends them: a batch goes when it
 * is full or when its first span has waited `scheduleDelayMs`, one export at a time. Spans beyond `maxQueueSize`
 * are dropped rather than held, so a collector that is down costs memory up to that bound and no request anything.
 * A failed export is not retried: its spans are counted as failed and the next batch goes as usual.
 */
export class SpanExporter {
  private queue: Span[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private exporting: Promise<void> | undefined;
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
    if (this.exporting) return;
    if (this.queue.length >= this.settings.maxExportBatchSize) this.startExport();
    else this.timer ??= setTimeout(() => this.startExport(), this.settings.scheduleDelayMs).unref();
  }

  /** Sends every span held, batch by batch, waiting for an export under way first; for a stop. */
  async flush(): Promise<void> {
    while (this.exporting || this.queue.length > 0) {
      if (!this.exporting) this.startExport();
      await this.exporting;
    }
  }

  private startExport(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.exporting || this.queue.length === 0) return;
    const batch = this.queue.splice(0, this.settings.maxExportBatchSize);
    this.exporting = this.post(batch).finally(() => {
      this.exporting = undefined;
      if (this.queue.length >= this.settings.maxExportBatchSize) this.startExport();
      else if (this.queue.length > 0) this.timer ??= setTimeout(() => this.startExport(), this.settings.scheduleDelayMs).unref();
    });
  }

  private async post(batch: Span[]): Promise<void> {
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
      this.failed(batch.length, `the collector answered ${response.status}`);
    } catch (error) {
      this.failed(batch.length, error instanceof Error ? error.message : String(error));
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
