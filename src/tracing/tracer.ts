import type { Logger } from "../modules/observability/logger";
import { SpanExporter, type ExportResult } from "./exporter";
import { RequestTrace } from "./request-trace";
import type { TracingSettings } from "./settings";
import { randomHexId } from "./span";
import { callerContextOf, PassedContext, type CallerContext, type TraceContext } from "./trace-context";

/** 2^56: the ratio test reads the trace id's last 56 bits, random in every id W3C's level 2 calls random. */
const ratioScale = 2 ** 56;

/**
 * Each request's trace: recorded and exported when tracing is on and the sampler takes it, otherwise the caller's
 * context passed on unchanged (or none). The samplers are OpenTelemetry's: a `parentbased_*` one follows a caller's
 * sampled flag and applies its root sampler to requests that come without a trace; `traceidratio` decides by the
 * trace id, so every service with the same ratio keeps the same traces.
 */
export class Tracer {
  private readonly exporter: SpanExporter | undefined;

  constructor(
    private readonly settings: TracingSettings | undefined,
    logger: Logger,
    counted: (result: ExportResult, spans: number) => void,
  ) {
    this.exporter = settings && new SpanExporter(settings, logger, counted);
  }

  get enabled(): boolean {
    return this.exporter !== undefined;
  }

  /** The trace of a request with these headers. */
  contextOf(headers: Headers): TraceContext | undefined {
    const caller = callerContextOf(headers);
    const exporter = this.exporter;
    if (exporter === undefined) return caller && new PassedContext(caller);
    const traceId = caller?.traceId ?? randomHexId(16);
    if (!this.samples(caller, traceId)) return caller && new PassedContext(caller);
    return new RequestTrace(exporter, caller, traceId);
  }

  /**
   * Sends every span held, for a stop, waiting at most `timeoutMs`: a collector that hangs must not hold the stop for
   * a timeout a batch.
   */
  async flush(timeoutMs = 5000): Promise<void> {
    if (this.exporter === undefined) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([this.exporter.flush(), new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
  }

  private samples(caller: CallerContext | undefined, traceId: string): boolean {
    const settings = this.settings as TracingSettings;
    const sampler = settings.sampler;
    if (caller !== undefined && sampler.startsWith("parentbased_")) return caller.sampled;
    if (sampler === "parentbased_always_off") return false;
    if (sampler.endsWith("traceidratio")) return Number.parseInt(traceId.slice(18), 16) / ratioScale < settings.ratio;
    return true;
  }
}
