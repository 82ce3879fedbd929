import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { ModelQueue } from "../queue/model-queue";

const latencyBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/** Every metric Sluice exports, in one Prometheus registry. */
export class Metrics {
  readonly registry = new Registry();
  readonly requests = new Counter({ name: "sluice_requests_total", help: "Requests by route, model, HTTP status and error code", labelNames: ["route", "model", "status", "code"], registers: [this.registry] });
  readonly duration = new Histogram({ name: "sluice_request_duration_seconds", help: "Time from request to the end of the answer", labelNames: ["route", "model"], buckets: latencyBuckets, registers: [this.registry] });
  readonly timeToFirstToken = new Histogram({ name: "sluice_time_to_first_token_seconds", help: "Time from request to the first streamed token", labelNames: ["model"], buckets: latencyBuckets, registers: [this.registry] });
  readonly tokens = new Counter({ name: "sluice_tokens_total", help: "Tokens billed, by model and kind (prompt, completion, reasoning)", labelNames: ["model", "kind"], registers: [this.registry] });
  readonly quotaRejections = new Counter({ name: "sluice_quota_rejections_total", help: "Requests refused by admission, by kind (five_hour, month, concurrency)", labelNames: ["kind"], registers: [this.registry] });
  readonly upstreamErrors = new Counter({ name: "sluice_upstream_errors_total", help: "Upstream failures by model and error code", labelNames: ["model", "code"], registers: [this.registry] });
  readonly refusals = new Counter({ name: "sluice_safety_refusals_total", help: "Red-line refusals by rule", labelNames: ["rule"], registers: [this.registry] });

  constructor(queues: ReadonlyMap<string, ModelQueue>) {
    new Gauge({
      name: "sluice_in_flight",
      help: "Requests holding an upstream slot, by model",
      labelNames: ["model"],
      registers: [this.registry],
      collect() {
        for (const [model, queue] of queues) this.set({ model }, queue.stats().active);
      },
    });
    new Gauge({
      name: "sluice_queued",
      help: "Requests waiting in a model's queue",
      labelNames: ["model"],
      registers: [this.registry],
      collect() {
        for (const [model, queue] of queues) this.set({ model }, queue.stats().queued);
      },
    });
  }
}
