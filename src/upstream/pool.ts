import type { ModelConfig } from "../config/schema";
import { SluiceError, UpstreamError } from "../errors";
import { OpenAIBackend } from "./openai-backend";
import type { Backend, BackendRequest, Completion, CompletionEvent } from "./types";

/** One upstream server of a model, with its circuit breaker. */
class Endpoint {
  failures = 0;
  openUntil = 0;
  probing = false;

  constructor(readonly backend: OpenAIBackend) {}
}

/** Failures that say the server is unwell (not the request): connection failures, timeouts, 5xx, garbage. */
function countsAgainstServer(error: unknown): boolean {
  return error instanceof UpstreamError && error.isRetryable;
}

/**
 * A model's upstream servers: round-robin over the healthy ones, a circuit breaker per server, and one retry on
 * another server when a connection fails before the first byte. After `breaker_failures` failures in a row a
 * server is left out for `breaker_cooldown_ms`; then one request probes it, and success puts it back.
 */
export class UpstreamPool implements Backend {
  private readonly endpoints: Endpoint[];
  private next = 0;

  constructor(
    private readonly model: ModelConfig,
    apiKey: string | undefined,
    private readonly clock: () => number = Date.now,
  ) {
    this.endpoints = model.baseUrls.map((url) => new Endpoint(new OpenAIBackend(model.id, url, apiKey)));
  }

  async complete(request: BackendRequest): Promise<Completion> {
    const first = this.pick(undefined);
    try {
      return this.succeeded(first, await first.backend.complete(request));
    } catch (error) {
      this.failed(first, error);
      const second = this.retryTarget(error, first);
      if (!second) throw error;
      try {
        return this.succeeded(second, await second.backend.complete(request));
      } catch (retryError) {
        this.failed(second, retryError);
        throw retryError;
      }
    }
  }

  async *stream(request: BackendRequest): AsyncGenerator<CompletionEvent[]> {
    let endpoint = this.pick(undefined);
    let events = endpoint.backend.stream(request);
    let first: IteratorResult<CompletionEvent[]>;
    try {
      first = await events.next();
    } catch (error) {
      this.failed(endpoint, error);
      const second = this.retryTarget(error, endpoint);
      if (!second) throw error;
      endpoint = second;
      events = endpoint.backend.stream(request);
      try {
        first = await events.next();
      } catch (retryError) {
        this.failed(endpoint, retryError);
        throw retryError;
      }
    }
    try {
      if (!first.done) yield first.value;
      for (let result = await events.next(); !result.done; result = await events.next()) yield result.value;
      this.succeeded(endpoint, undefined);
    } catch (error) {
      this.failed(endpoint, error);
      throw error;
    } finally {
      // A consumer that stops early says nothing about the server's health; a probe must not stay stuck.
      endpoint.probing = false;
      await events.return(undefined);
    }
  }

  /** The next server in turn whose breaker is closed, or whose cooldown is over and that no probe is testing. */
  private pick(except: Endpoint | undefined): Endpoint {
    const now = this.clock();
    for (let tried = 0; tried < this.endpoints.length; tried++) {
      const endpoint = this.endpoints[this.next++ % this.endpoints.length] as Endpoint;
      if (endpoint === except) continue;
      if (endpoint.openUntil <= now && !endpoint.probing) {
        if (endpoint.failures >= this.model.breakerFailures) endpoint.probing = true;
        return endpoint;
      }
    }
    const soonest = Math.min(...this.endpoints.filter((endpoint) => endpoint !== except).map((endpoint) => endpoint.openUntil));
    throw new SluiceError(
      "model_unavailable",
      `Model ${this.model.id} is temporarily unavailable: its upstream is failing. Retry after the time in Retry-After.`,
      {
        retryAfterSeconds: Math.max(1, Math.ceil((soonest - now) / 1000)),
      },
    );
  }

  /** Another server to retry on: only for a connection that failed before the upstream got the request. */
  private retryTarget(error: unknown, failed: Endpoint): Endpoint | undefined {
    if (this.endpoints.length < 2 || !(error instanceof UpstreamError) || error.reachedUpstream) return undefined;
    try {
      return this.pick(failed);
    } catch {
      return undefined;
    }
  }

  private succeeded<T>(endpoint: Endpoint, result: T): T {
    endpoint.failures = 0;
    endpoint.openUntil = 0;
    endpoint.probing = false;
    return result;
  }

  private failed(endpoint: Endpoint, error: unknown): void {
    endpoint.probing = false;
    if (!countsAgainstServer(error)) return;
    endpoint.failures++;
    if (endpoint.failures >= this.model.breakerFailures) endpoint.openUntil = this.clock() + this.model.breakerCooldownMs;
  }
}
