import type { Queue } from "../queue/model-queue";
import type { ServerHealth } from "../../upstream/types";
import { Counter, Gauge, Histogram, Registry, type Series } from "./prometheus";

/** A model's token counters, by kind. */
export interface TokenSeries {
  prompt: Series;
  completion: Series;
  reasoning: Series;
  /** Prompt tokens the upstream read from its prompt cache (counted in prompt as well). */
  cached: Series;
}

const latencyBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/** Every metric Sluice exports, in one Prometheus registry. */
export class Metrics {
  readonly registry = new Registry();
  readonly requests = new Counter(this.registry, "sluice_requests_total", "Requests by route, model, HTTP status and error code", [
    "route",
    "model",
    "status",
    "code",
  ]);
  readonly duration = new Histogram(
    this.registry,
    "sluice_request_duration_seconds",
    "Time from request to the end of the answer",
    ["route", "model"],
    latencyBuckets,
  );
  readonly timeToFirstToken = new Histogram(
    this.registry,
    "sluice_time_to_first_token_seconds",
    "Time from request to the first streamed token",
    ["model"],
    latencyBuckets,
  );
  readonly timePerOutputToken = new Histogram(
    this.registry,
    "sluice_time_per_output_token_seconds",
    "A streamed answer's time from its first token to its end, per completion token after the first: the model's decoding speed as callers see it",
    ["model"],
    [0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1],
  );
  readonly queueWait = new Histogram(
    this.registry,
    "sluice_queue_wait_seconds",
    "Time a request waited in a model's queue for a slot, of those that waited and got one",
    ["model"],
    [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
  );
  readonly queueWaits = new Counter(
    this.registry,
    "sluice_queue_waits_total",
    "Requests that had to wait for a model's slot, by how the wait ended (granted, timed_out, left, full: the queue was full on arrival)",
    ["model", "result"],
  );
  readonly tokens = new Counter(
    this.registry,
    "sluice_tokens_total",
    "Tokens billed, by model and kind (prompt, completion; reasoning, part of completion; cached, part of prompt)",
    ["model", "kind"],
  );
  readonly quotaRejections = new Counter(
    this.registry,
    "sluice_quota_rejections_total",
    "Requests refused by admission, by kind (five_hour, month, requests, concurrency)",
    ["kind"],
  );
  readonly upstreamErrors = new Counter(this.registry, "sluice_upstream_errors_total", "Upstream failures by model and error code", ["model", "code"]);
  readonly fallbacks = new Counter(
    this.registry,
    "sluice_fallbacks_total",
    "Requests a fallback model took over, by the model that could not take them and the fallback",
    ["model", "fallback"],
  );
  readonly traceSpans = new Counter(
    this.registry,
    "sluice_trace_spans_total",
    "Spans of traced requests, by what became of them: exported; failed, in an export the collector did not take; dropped, beyond the queue while exports lag",
    ["result"],
  );
  readonly refusals = new Counter(this.registry, "sluice_safety_refusals_total", "Red-line refusals by rule", ["rule"]);
  /** Ledger rows that could not be committed (a full disk, a database that does not answer): at 0 from the start. */
  readonly ledgerRefusedRows = new Counter(
    this.registry,
    "sluice_ledger_refused_rows_total",
    "Ledger rows that could not be committed; their requests were refused with 503 rather than answered unrecorded",
    [],
  ).series({});
  /** Ledger rows deleted past `[ledger] retention_days`: at 0 from the start. */
  readonly ledgerDeletedRows = new Counter(
    this.registry,
    "sluice_ledger_deleted_rows_total",
    "Ledger rows deleted past [ledger] retention_days (the reports keep their totals)",
    [],
  ).series({});
  readonly configReloads = new Counter(
    this.registry,
    "sluice_config_reloads_total",
    "Configuration reloads on SIGHUP, by result: applied, refused (the file was not valid; the configuration in force stays), or failed while applied (see the log)",
    ["result"],
  );
  /** Set by the scrape's refreshers (see quota-gauges.ts): an organization's use of its plan's token quotas. */
  readonly organizationTokens = new Gauge(
    this.registry,
    "sluice_organization_tokens",
    "Tokens an organization used in the window of each token quota its plan has (5h, month), as admission counts them",
    ["organization_id", "organization", "window"],
  );
  readonly organizationTokenLimit = new Gauge(
    this.registry,
    "sluice_organization_token_limit",
    "The token quota of an organization's plan, by window (5h, month)",
    ["organization_id", "organization", "window"],
  );
  /** The same for each key with token caps of its own (see quota-gauges.ts). */
  readonly keyTokens = new Gauge(
    this.registry,
    "sluice_key_tokens",
    "Tokens a key with caps of its own used in the window of each of its token caps (5h, month), as admission counts them",
    ["key_id", "key", "organization_id", "organization", "window"],
  );
  readonly keyTokenLimit = new Gauge(this.registry, "sluice_key_token_limit", "A key's own token cap, by window (5h, month)", [
    "key_id",
    "key",
    "organization_id",
    "organization",
    "window",
  ]);
  private readonly tokenSeries = new Map<string, TokenSeries>();
  private readonly refreshers: (() => Promise<void>)[] = [];

  /** Runs `refresh` before each scrape's text: for gauges whose values must be read asynchronously. */
  onScrape(refresh: () => Promise<void>): void {
    this.refreshers.push(refresh);
  }

  /** The registry as Prometheus text, once every refresher has run (one that fails leaves its gauges as they were). */
  async text(): Promise<string> {
    await Promise.all(this.refreshers.map((refresh) => refresh().catch(() => {})));
    return this.registry.text();
  }

  /** The token counters of a model, looked up once rather than by label on every answer. */
  tokensOf(model: string): TokenSeries {
    let series = this.tokenSeries.get(model);
    if (!series) {
      series = {
        prompt: this.tokens.series({ model, kind: "prompt" }),
        completion: this.tokens.series({ model, kind: "completion" }),
        reasoning: this.tokens.series({ model, kind: "reasoning" }),
        cached: this.tokens.series({ model, kind: "cached" }),
      };
      this.tokenSeries.set(model, series);
    }
    return series;
  }

  /** `upstreams`: each model's servers and their health, read at each scrape. */
  constructor(queues: ReadonlyMap<string, Queue>, upstreams: () => { model: string; servers: ServerHealth[] }[] = () => []) {
    new Gauge(
      this.registry,
      "sluice_upstream_server_up",
      "1 while a model's upstream server takes requests, 0 while its circuit breaker keeps it out (or a probe tests it)",
      ["model", "server"],
      (gauge) => {
        gauge.clear();
        for (const { model, servers } of upstreams()) for (const server of servers) gauge.set({ model, server: server.url }, server.state === "up" ? 1 : 0);
      },
    );
    new Gauge(
      this.registry,
      "sluice_upstream_server_in_flight",
      "Calls of this instance in flight on each of a model's upstream servers (each call goes to the least busy)",
      ["model", "server"],
      (gauge) => {
        gauge.clear();
        for (const { model, servers } of upstreams()) for (const server of servers) gauge.set({ model, server: server.url }, server.inFlight);
      },
    );
    new Gauge(
      this.registry,
      "sluice_upstream_server_recent_failure_ratio",
      "Of each upstream server's last calls (breaker_window), the share that failed; at breaker_failure_rate it is taken out while another server is up",
      ["model", "server"],
      (gauge) => {
        gauge.clear();
        for (const { model, servers } of upstreams()) {
          for (const server of servers) gauge.set({ model, server: server.url }, server.recentCalls === 0 ? 0 : server.recentFailures / server.recentCalls);
        }
      },
    );
    new Counter(
      this.registry,
      "sluice_upstream_server_calls_total",
      "Calls of this instance that ended on each upstream server: finished, failed (against the server), rejected (the request's own fault), stopped (by their caller)",
      ["model", "server", "result"],
      (counter) => {
        counter.clear();
        for (const { model, servers } of upstreams()) {
          for (const server of servers) {
            for (const [result, count] of Object.entries(server.calls)) counter.set({ model, server: server.url, result }, count);
          }
        }
      },
    );
    new Counter(
      this.registry,
      "sluice_upstream_affinity_calls_total",
      'Calls of a model routed by affinity, by the server their conversation prefers: sent there ("kept") or to a less busy server ("moved_away")',
      ["model", "server", "result"],
      (counter) => {
        counter.clear();
        for (const { model, servers } of upstreams()) {
          for (const server of servers) {
            if (server.affinityCalls + server.affinityMovedAway === 0) continue;
            counter.set({ model, server: server.url, result: "kept" }, server.affinityCalls);
            counter.set({ model, server: server.url, result: "moved_away" }, server.affinityMovedAway);
          }
        }
      },
    );
    new Gauge(this.registry, "sluice_in_flight", "Requests holding an upstream slot, by model", ["model"], (gauge) => {
      for (const [model, queue] of queues) gauge.set({ model }, queue.stats().active);
    });
    new Gauge(this.registry, "sluice_queued", "Requests waiting in a model's queue", ["model"], (gauge) => {
      for (const [model, queue] of queues) gauge.set({ model }, queue.stats().queued);
    });
  }
}
