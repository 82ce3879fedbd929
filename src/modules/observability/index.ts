import { Elysia } from "elysia";
import { SluiceError } from "../../errors";
import { secretsEqual } from "../keys/secret";
import type { Logger } from "./logger";
import type { Metrics } from "./metrics";
import type { RequestRecord } from "./request-record";

export interface Lifecycle {
  /** Set when the server is stopping: new work is refused and /readyz answers 503. */
  draining: boolean;
  /** Chat answers whose last byte is not yet handed to the socket; a stop waits for them before closing connections. */
  openAnswers: number;
}

export interface ObservabilityOptions {
  metrics: Metrics;
  /** What stops this instance from serving now (a database or Redis that does not answer); empty when ready. */
  readiness: () => Promise<string[]>;
  lifecycle: Lifecycle;
  /** When set, /metrics requires `Authorization: Bearer <token>`. */
  metricsToken: string | undefined;
}

/** GET /healthz (the process answers), GET /readyz (database and Redis answer, not draining), GET /metrics (Prometheus). */
export const observabilityRoutes = (options: ObservabilityOptions) =>
  new Elysia({ name: "observability" })
    .get("/healthz", () => ({ status: "ok" }))
    .get("/readyz", async ({ set }) => {
      const problems: string[] = [];
      if (options.lifecycle.draining) problems.push("draining");
      problems.push(...(await options.readiness()));
      if (problems.length === 0) return { status: "ready" };
      set.status = 503;
      set.headers["retry-after"] = "5";
      return { status: "not_ready", problems };
    })
    .get("/metrics", async ({ headers }) => {
      if (options.metricsToken && !secretsEqual(headers.authorization ?? "", `Bearer ${options.metricsToken}`)) {
        throw new SluiceError(
          headers.authorization ? "invalid_api_key" : "missing_api_key",
          "The metrics endpoint needs the token in SLUICE_METRICS_TOKEN as a bearer token.",
        );
      }
      return new Response(await options.metrics.text(), { headers: { "content-type": options.metrics.registry.contentType } });
    });

/** Turns a finished request into its metrics, its one log line and its span (when its trace is recorded). */
export function finishRecord(record: RequestRecord, metrics: Metrics, logger: Logger): void {
  record.trace?.end(record);
  const status = record.status ?? 200;
  const model = record.model ?? "";
  const seconds = (performance.now() - record.startedAt) / 1000;
  metrics.requests.inc({ route: record.route, model, status: String(status), code: record.code ?? "" });
  metrics.duration.observe({ route: record.route, model }, seconds);
  if (record.firstTokenAt !== undefined) {
    metrics.timeToFirstToken.observe({ model }, (record.firstTokenAt - record.startedAt) / 1000);
    const after = (record.completionTokens ?? 0) - 1;
    if (after > 0) metrics.timePerOutputToken.observe({ model }, (performance.now() - record.firstTokenAt) / 1000 / after);
  }
  if (!logger.enabled(status >= 500 ? "warn" : "info")) return;
  logger.log(status >= 500 ? "warn" : "info", {
    message: "request",
    request_id: record.requestId,
    method: record.method,
    route: record.route,
    status,
    code: record.code ?? null,
    organization_id: record.organizationId ?? null,
    key_id: record.keyId ?? null,
    client_ip: record.clientAddress ?? null,
    model: record.model ?? null,
    fallback_from: record.fallbackFrom ?? null,
    upstream_server: record.upstreamServer ?? null,
    trace_id: record.trace?.traceId ?? null,
    outcome: record.outcome ?? null,
    rule_id: record.ruleId ?? null,
    prompt_tokens: record.promptTokens ?? null,
    completion_tokens: record.completionTokens ?? null,
    reasoning_tokens: record.reasoningTokens ?? null,
    cached_tokens: record.cachedTokens ?? null,
    duration_ms: Math.round(seconds * 1000 * 100) / 100,
    ttft_ms: record.firstTokenAt === undefined ? null : Math.round((record.firstTokenAt - record.startedAt) * 100) / 100,
    queued_ms: record.queuedMs === undefined ? null : Math.round(record.queuedMs * 100) / 100,
  });
}
