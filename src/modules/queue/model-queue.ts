import type { ModelConfig } from "../../config/schema";
import { FairLine, type QueueObserver, queueFull } from "./fair-line";

/** One upstream slot of a model; released exactly once. */
export interface Slot {
  release(): void;
}

/**
 * A slot of a ModelQueue: an object of its own rather than a closure over a flag, which would keep two functions and
 * two scopes for as long as a stream lasts (bench/HISTORY.md, "Fewer cells an open stream").
 */
class LocalSlot implements Slot {
  private done = false;

  constructor(private readonly queue: ModelQueue) {}

  release(): void {
    if (this.done) return;
    this.done = true;
    this.queue.released();
  }
}

/** A model's upstream slots and the line in front of them, in one process or shared by every instance. */
export interface Queue {
  /**
   * A slot now, or after waiting in the queue (each organization's turn there as many slots as `weight`, its plan's
   * `queue_weight`); throws 503 server_overloaded or ClientGoneError.
   */
  acquire(organizationId: string, signal: AbortSignal, weight?: number): Slot | Promise<Slot>;
  /** This process's slots in use and requests waiting. */
  stats(): { active: number; queued: number };
  /**
   * Applies a new configuration of its model (`max_concurrency`, `queue_size`, `queue_timeout_ms`) to the requests
   * that come after it; waiters are given the slots a higher limit frees.
   */
  reconfigure(model: ModelConfig): void;
  /** Stops its timers; a shared queue first delivers the slot releases not yet delivered. */
  close?(): void | Promise<void>;
}

/**
 * A model's upstream slots (`max_concurrency`) and the queue in front of them (`queue_size`, `queue_timeout_ms`),
 * in one process: waiting requests are served fairly between organizations (see FairLine).
 */
export class ModelQueue implements Queue {
  private active = 0;
  private readonly line: FairLine;

  constructor(
    private model: ModelConfig,
    private readonly observer?: QueueObserver,
  ) {
    this.line = new FairLine(model.id, model.queueTimeoutMs, observer);
  }

  reconfigure(model: ModelConfig): void {
    this.model = model;
    this.line.timeoutMs = model.queueTimeoutMs;
    this.dispatch();
  }

  acquire(organizationId: string, signal: AbortSignal, weight = 1): Slot | Promise<Slot> {
    const limit = this.model.maxConcurrency;
    if (limit === undefined || (this.active < limit && this.line.waiting === 0)) return this.take();
    if (this.line.waiting >= this.model.queueSize) {
      this.observer?.(this.model.id, "full", 0);
      throw queueFull(this.model.id);
    }
    return this.line.wait(organizationId, signal, weight);
  }

  stats(): { active: number; queued: number } {
    return { active: this.active, queued: this.line.waiting };
  }

  private take(): Slot {
    this.active++;
    return new LocalSlot(this);
  }

  /** A slot's release (LocalSlot calls it once): the next waiter, if any, takes it. */
  released(): void {
    this.active--;
    this.dispatch();
  }

  private dispatch(): void {
    const limit = this.model.maxConcurrency ?? Number.POSITIVE_INFINITY;
    while (this.active < limit && this.line.waiting > 0) this.line.grantNext(this.take());
  }
}

/** A slot that has to be waited for; `waited` learns how long the wait took, however it ends (granted, timed out, left). */
export async function timedWait(acquiring: Promise<Slot>, waited: (milliseconds: number) => void): Promise<Slot> {
  const startedAt = performance.now();
  try {
    return await acquiring;
  } finally {
    waited(performance.now() - startedAt);
  }
}
