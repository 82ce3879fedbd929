// One upstream server of a model as the pool sees it: its circuit breaker (failures in a row, its failure rate over
// its last calls), its calls in flight and how its calls ended, its weight for routing by conversation.
import type { ModelConfig } from "../config/schema";
import { ClientGoneError, UpstreamError } from "../errors";
import { ServerShutdown } from "./errors";
import type { OpenAIBackend } from "./openai-backend";
import type { StreamEnding } from "./types";

/** The longest a health check waits for its answer. */
const healthCheckTimeoutMs = 3000;

/** Longest time out, as multiples of `breaker_cooldown_ms`, for a server taken out for its failure rate again and again. */
const longestOutlierCooldowns = 10;

/** Which of a server's last calls failed, in a ring: a server that fails often but seldom many times in a row. */
class RecentCalls {
  private readonly failed: Uint8Array;
  private at = 0;
  /** Calls held, up to the window. */
  calls = 0;
  failures = 0;

  constructor(private readonly size: number) {
    this.failed = new Uint8Array(size);
  }

  add(failure: boolean): void {
    if (this.calls === this.size) this.failures -= this.failed[this.at] as number;
    else this.calls++;
    const value = failure ? 1 : 0;
    this.failed[this.at] = value;
    this.failures += value;
    this.at = this.at + 1 === this.size ? 0 : this.at + 1;
  }

  /** Whether the window is full and at least `rate` of it failed. */
  failingAt(rate: number): boolean {
    return this.calls === this.size && this.failures >= rate * this.size;
  }

  clear(): void {
    this.failed.fill(0);
    this.at = 0;
    this.calls = 0;
    this.failures = 0;
  }
}

/** One upstream server of a model, with its circuit breaker. */
export class Endpoint {
  failures = 0;
  openUntil = 0;
  probing = false;
  /** Calls of this process on this server that have not ended: picked by `pick`, ended through `ended`. */
  inFlight = 0;
  /** Out for its failure rate (not for failures in a row) since then, until a probe succeeds. */
  outlier = false;
  /** Times in a row it was taken out for its failure rate: each keeps it out one cooldown longer. */
  outlierTimes = 0;
  readonly recent: RecentCalls;
  /** Its address as a number, for rendezvous hashing (see affinityWeight). */
  readonly seed: number;
  /** Calls sent here because their conversation prefers this server (routing = "affinity"). */
  affinityCalls = 0;
  /** Calls whose conversation prefers this server that went to a less busy one. */
  affinityMovedAway = 0;
  /** Calls of this process that ended: answered, failed against the server, refused as the request's fault, stopped. */
  readonly calls = { finished: 0, failed: 0, rejected: 0, stopped: 0 };
  /** Its base URL as operators may see it (see shownUrl), and as a request's log line names it. */
  readonly url: string;
  /** Whether a health check is scheduled (see checkHealth). */
  private checking = false;

  constructor(
    readonly backend: OpenAIBackend,
    private readonly model: ModelConfig,
    private readonly clock: () => number,
    /** Whether a server of the model other than this one takes calls now. */
    private readonly anotherUp: (endpoint: Endpoint) => boolean,
  ) {
    this.recent = new RecentCalls(model.breakerWindow);
    this.seed = Bun.hash.xxHash32(backend.baseUrl);
    this.url = shownUrl(backend.baseUrl);
  }

  /** Out, or due a probe before it takes calls again. */
  get tripped(): boolean {
    return this.outlier || this.failures >= this.model.breakerFailures;
  }

  private succeeded(): void {
    if (this.outlier) {
      // A call sent before it was taken out says nothing new: it succeeds part of the time. Only its probe brings it
      // back, to be judged afresh on the calls made since.
      if (!this.probing) return;
      this.outlier = false;
      this.recent.clear();
    } else this.recent.add(false);
    this.failures = 0;
    this.openUntil = 0;
    this.probing = false;
    if (this.outlierTimes > 0 && this.recent.calls === this.model.breakerWindow && !this.recent.failingAt(this.model.breakerFailureRate)) {
      this.outlierTimes = 0;
    }
  }

  private failed(error: unknown): void {
    const probe = this.probing;
    this.probing = false;
    if (!countsAgainstServer(error)) {
      if (stoppedByCaller(error)) this.calls.stopped++;
      else this.calls.rejected++;
      return;
    }
    this.calls.failed++;
    this.failures++;
    this.recent.add(true);
    if (this.outlier) {
      // Its probe failed: out again, for longer. A call sent before it was taken out changes nothing.
      if (probe) this.takeOutForRate();
    } else if (this.failures >= this.model.breakerFailures) {
      this.openUntil = this.clock() + this.model.breakerCooldownMs;
      this.checkHealth();
    } else if (this.model.breakerFailureRate > 0 && this.recent.failingAt(this.model.breakerFailureRate) && this.anotherUp(this)) {
      this.takeOutForRate();
    }
  }

  /**
   * While it is out for failures in a row, asks it every `health_check_ms` whether it answers again (`GET …/models`,
   * which every OpenAI-compatible server answers once its model is loaded); the first 200 ends the cooldown, so the
   * next call probes it at once. A model server restarted in seconds is then back in seconds, not after the whole
   * cooldown, and no caller's request is spent finding out that it is still down. A server out for its failure rate
   * answers such a question too while it fails calls, so it waits out its cooldown. The checks stop once the
   * cooldown is over by either way (a model a reload removed stops being checked then).
   */
  private checkHealth(): void {
    const interval = this.model.healthCheckMs;
    if (interval === 0 || this.checking) return;
    this.checking = true;
    const check = async () => {
      if (this.outlier || !this.tripped || this.openUntil <= this.clock()) {
        this.checking = false;
        return;
      }
      if (await this.backend.answers(Math.min(interval, healthCheckTimeoutMs))) {
        this.checking = false;
        if (!this.outlier && this.tripped) this.openUntil = Math.min(this.openUntil, this.clock());
        return;
      }
      setTimeout(check, interval).unref();
    };
    setTimeout(check, interval).unref();
  }

  /** Out for one cooldown more each time in a row (up to `longestOutlierCooldowns`): a flaky server's probe succeeds often. */
  private takeOutForRate(): void {
    this.outlier = true;
    this.outlierTimes = Math.min(this.outlierTimes + 1, longestOutlierCooldowns);
    this.openUntil = this.clock() + this.model.breakerCooldownMs * this.outlierTimes;
  }

  /**
   * Told by each call on this server how it ended (one function per server, not per call): the backend calls it, so
   * that a whole answer needs no async layer of the pool's own around it.
   */
  readonly ended = (ending: StreamEnding): void => {
    this.inFlight--;
    if (ending === "finished") {
      this.calls.finished++;
      this.succeeded();
    } else if (ending === "stopped") {
      // A consumer that stops early says nothing about the server's health; a probe must not stay stuck.
      this.calls.stopped++;
      this.probing = false;
    } else this.failed(ending.failure);
  };
}

/**
 * A server's calls in flight, and its failures in a row as if they were calls too: a server that fails at once has
 * none in flight, and on the count alone would be handed nearly every call until its breaker opened.
 */
export function loadOf(endpoint: Endpoint): number {
  return endpoint.inFlight + endpoint.failures;
}

/** A base URL as operators may see it: credentials and query (where some services take a key) left out. */
function shownUrl(baseUrl: string): string {
  const url = new URL(baseUrl);
  return `${url.protocol}//${url.host}${url.pathname}`;
}

/** Failures that are Sluice's side stopping the call: the caller left, or the server's drain ran out. */
function stoppedByCaller(error: unknown): boolean {
  return error instanceof ClientGoneError || (error instanceof Error && error.cause instanceof ServerShutdown);
}

/** Failures that say the server is unwell (not the request): connection failures, timeouts, 5xx, garbage. */
function countsAgainstServer(error: unknown): boolean {
  return error instanceof UpstreamError && error.isRetryable;
}
