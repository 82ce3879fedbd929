import type { ModelConfig } from "../config/schema";
import { SluiceError, UpstreamError } from "../errors";
import { affinityWeight } from "./affinity";
import { accessHeaders } from "./endpoint";
import { OpenAIBackend } from "./openai-backend";
import { Endpoint, loadOf } from "./server-state";
import type { Backend, BackendRequest, Completion, CompletionEvent, Embeddings, EventStream, ServerHealth } from "./types";

const noMoreEvents: IteratorResult<CompletionEvent[], void> = { done: true, value: undefined };

/**
 * A stream through the pool. Its first read chooses the server, and may move to another one; every later read goes
 * straight to that server's generator. A generator of the pool's own around it would cost each read a promise and
 * an iterator result more, and with thousands of open streams those are much of what each leaves in the old
 * generation (bench/promotion.ts). The server's breaker learns how the stream ended from the generator itself.
 */
class PooledStream implements EventStream {
  /** The chosen server's generator, once the first read has chosen. */
  events: EventStream | undefined;

  constructor(
    private readonly pool: UpstreamPool,
    readonly request: BackendRequest,
  ) {}

  next(): Promise<IteratorResult<CompletionEvent[], void>> {
    return this.events === undefined ? this.pool.firstRead(this) : this.events.next();
  }

  return(): Promise<IteratorResult<CompletionEvent[], void>> {
    return this.events === undefined ? Promise.resolve(noMoreEvents) : this.events.return(undefined);
  }
}

/**
 * A model's upstream servers: each call goes to the healthy server with the fewest calls of this process in flight
 * (in turn among equals), a circuit breaker per server, and one retry on another server when a connection fails before
 * the first byte or a server refuses the request (429, 503). After `breaker_failures` failures in a row a server is
 * left out for `breaker_cooldown_ms`, and so is one whose last `breaker_window` calls failed at `breaker_failure_rate`
 * while another server is up; then one request probes it, and success puts it back.
 */
export class UpstreamPool implements Backend {
  private readonly endpoints: Endpoint[];
  private next = 0;

  constructor(
    private readonly model: ModelConfig,
    apiKey: string | undefined,
    private readonly clock: () => number = Date.now,
  ) {
    const anotherUp = (endpoint: Endpoint) => this.endpoints.some((other) => other !== endpoint && !other.tripped && other.openUntil <= this.clock());
    this.endpoints = model.baseUrls.map(
      (url) => new Endpoint(new OpenAIBackend(model.id, url, accessHeaders(model, apiKey), model.healthCheckPath), model, clock, anotherUp),
    );
  }

  complete(request: BackendRequest): Promise<Completion> {
    let first: Endpoint;
    try {
      first = this.pick(undefined, request.affinity);
    } catch (error) {
      return Promise.reject(error);
    }
    // The backend's own promise, with no layer of the pool's around it: each async layer costs a whole answer a
    // promise and a turn (bench/HISTORY.md, "Three async layers fewer"). Only a pool with somewhere to retry catches.
    request.server = first.url;
    const answer = first.backend.complete(request, first.ended);
    if (this.endpoints.length < 2) return answer;
    return answer.catch((error: unknown) => {
      const second = this.retryTarget(error, first);
      if (!second) throw error;
      request.server = second.url;
      return second.backend.complete(request, second.ended);
    });
  }

  stream(request: BackendRequest): EventStream {
    return new PooledStream(this, request);
  }

  /** As `complete`: the least busy server, and one retry on another where the first did no work. */
  embed(request: BackendRequest): Promise<Embeddings> {
    let first: Endpoint;
    try {
      first = this.pick(undefined);
    } catch (error) {
      return Promise.reject(error);
    }
    request.server = first.url;
    return first.backend.embed(request, first.ended).catch((error: unknown) => {
      const second = this.retryTarget(error, first);
      if (!second) throw error;
      request.server = second.url;
      return second.backend.embed(request, second.ended);
    });
  }

  servers(): ServerHealth[] {
    const now = this.clock();
    return this.endpoints.map((endpoint) => {
      const out = endpoint.openUntil > now;
      const state = out ? "out" : endpoint.probing || endpoint.tripped ? "probing" : "up";
      return {
        url: endpoint.url,
        state,
        failures: endpoint.failures,
        outUntil: out ? endpoint.openUntil : null,
        inFlight: endpoint.inFlight,
        recentCalls: endpoint.recent.calls,
        recentFailures: endpoint.recent.failures,
        outFor: state === "up" ? null : endpoint.outlier ? "failure_rate" : "failures_in_a_row",
        affinityCalls: endpoint.affinityCalls,
        affinityMovedAway: endpoint.affinityMovedAway,
        calls: { ...endpoint.calls },
      };
    });
  }

  /**
   * A pooled stream's first read: on the next server, or, when the connection failed before the upstream got the
   * request, once more on another. Called by PooledStream only. Not an async function: the server's generator keeps
   * the promise of its first read for the stream's life, and an async function awaiting it would be kept with it, its
   * promise and scope, for as long (bench/HISTORY.md, "Fewer cells an open stream").
   */
  firstRead(stream: PooledStream): Promise<IteratorResult<CompletionEvent[], void>> {
    let first: Endpoint;
    try {
      first = this.pick(undefined, stream.request.affinity);
    } catch (error) {
      return Promise.reject(error);
    }
    stream.request.server = first.url;
    stream.events = first.backend.stream(stream.request, first.ended);
    const reading = stream.events.next();
    if (this.endpoints.length < 2) return reading;
    return reading.catch((error: unknown) => {
      // The generator has told the breaker of the failure already (through `ended`).
      const second = this.retryTarget(error, first);
      if (!second) throw error;
      stream.request.server = second.url;
      stream.events = second.backend.stream(stream.request, second.ended);
      return stream.events.next();
    });
  }

  /**
   * The server for the next call, counted in flight until the call ends: one whose cooldown is over and that no probe
   * is testing, to probe it; otherwise, of those whose breaker is closed, the least loaded (see `loadOf`), the next in
   * turn among equals. Reasoning answers run from seconds to many minutes, so turns alone pile the long ones on one
   * server while another has finished its own. With an `affinity` (routing = "affinity"), the server its conversation
   * prefers, unless that one has more than `affinity_slack` calls beyond the least loaded.
   */
  private pick(except: Endpoint | undefined, affinity?: number): Endpoint {
    const now = this.clock();
    const count = this.endpoints.length;
    let probe: Endpoint | undefined;
    let least: Endpoint | undefined;
    let preferred: Endpoint | undefined;
    let preferredWeight = -1;
    for (let tried = 0; tried < count; tried++) {
      const endpoint = this.endpoints[(this.next + tried) % count] as Endpoint;
      if (endpoint === except || endpoint.openUntil > now || endpoint.probing) continue;
      // Its cooldown is over: the next call probes it, whatever its load. Its failures, counted as load, would
      // otherwise keep it out for as long as another server is less busy.
      if (endpoint.tripped) {
        probe ??= endpoint;
        continue;
      }
      if (least === undefined || loadOf(endpoint) < loadOf(least)) least = endpoint;
      if (affinity !== undefined) {
        const weight = affinityWeight(affinity, endpoint.seed);
        if (weight > preferredWeight) {
          preferred = endpoint;
          preferredWeight = weight;
        }
      }
    }
    let chosen = probe ?? least;
    if (probe === undefined && preferred !== undefined && least !== undefined) {
      if (loadOf(preferred) <= loadOf(least) + this.model.affinitySlack) {
        chosen = preferred;
        preferred.affinityCalls++;
      } else preferred.affinityMovedAway++;
    }
    if (chosen !== undefined) {
      this.next = (this.endpoints.indexOf(chosen) + 1) % count;
      if (chosen.tripped) chosen.probing = true;
      chosen.inFlight++;
      return chosen;
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

  /**
   * Another server to retry on: only when the first did no work on the request, so that nothing is generated twice:
   * its connection failed before the request reached it, or it refused the request outright (429 or 503: busy,
   * overloaded, still loading its model). A 500, 502 or 504 may come after the model ran, and is not retried.
   */
  private retryTarget(error: unknown, failed: Endpoint): Endpoint | undefined {
    if (this.endpoints.length < 2 || !(error instanceof UpstreamError)) return undefined;
    const refused = error.upstreamStatus === 429 || error.upstreamStatus === 503;
    if (error.reachedUpstream && !refused) return undefined;
    try {
      return this.pick(failed);
    } catch {
      return undefined;
    }
  }
}
