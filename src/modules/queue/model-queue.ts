import type { ModelConfig } from "../../config/schema";
import { SluiceError } from "../../errors";
import { ClientGoneError } from "../../upstream/errors";

/** One upstream slot of a model; released exactly once. */
export interface Slot {
  release(): void;
}

interface Waiter {
  organizationId: string;
  grant(slot: Slot): void;
}

/**
 * A model's upstream slots (`max_concurrency`) and the queue in front of them (`queue_size`,
 * `queue_timeout_ms`). Waiting requests are served round-robin across organizations and first-in first-out
 * within one, so one organization's burst cannot starve the others.
 */
export class ModelQueue {
  private active = 0;
  private waiting = 0;
  /** Organizations with waiters, in the order they are served next. */
  private readonly turn: string[] = [];
  private readonly waitersByOrganization = new Map<string, Waiter[]>();

  constructor(private readonly model: ModelConfig) {}

  /** A slot now, or after waiting in the queue; throws 503 server_overloaded or ClientGoneError. */
  acquire(organizationId: string, signal: AbortSignal): Slot | Promise<Slot> {
    const limit = this.model.maxConcurrency;
    if (limit === undefined || (this.active < limit && this.waiting === 0)) return this.take();
    if (this.waiting >= this.model.queueSize) {
      throw new SluiceError("server_overloaded", `Model ${this.model.id} is at capacity and its queue is full. Retry shortly.`, { retryAfterSeconds: 1 });
    }
    return this.wait(organizationId, signal);
  }

  stats(): { active: number; queued: number } {
    return { active: this.active, queued: this.waiting };
  }

  private take(): Slot {
    this.active++;
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.active--;
        this.dispatch();
      },
    };
  }

  private wait(organizationId: string, signal: AbortSignal): Promise<Slot> {
    return new Promise<Slot>((resolve, reject) => {
      if (signal.aborted) return reject(new ClientGoneError("client disconnected while queued", false));
      const leave = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        this.remove(waiter);
      };
      const onAbort = () => {
        leave();
        reject(new ClientGoneError("client disconnected while queued", false));
      };
      const timer = setTimeout(() => {
        leave();
        reject(
          new SluiceError("server_overloaded", `Model ${this.model.id} is at capacity; the request waited ${this.model.queueTimeoutMs} ms in its queue. Retry shortly.`, {
            retryAfterSeconds: 1,
          }),
        );
      }, this.model.queueTimeoutMs);
      const waiter: Waiter = {
        organizationId,
        grant: (slot) => {
          clearTimeout(timer);
          signal.removeEventListener("abort", onAbort);
          resolve(slot);
        },
      };
      signal.addEventListener("abort", onAbort, { once: true });
      let queue = this.waitersByOrganization.get(organizationId);
      if (!queue) {
        queue = [];
        this.waitersByOrganization.set(organizationId, queue);
        this.turn.push(organizationId);
      }
      queue.push(waiter);
      this.waiting++;
    });
  }

  /** Gives free slots to waiters: the organization whose turn it is, then it goes to the back of the line. */
  private dispatch(): void {
    const limit = this.model.maxConcurrency ?? Number.POSITIVE_INFINITY;
    while (this.active < limit && this.waiting > 0) {
      const organizationId = this.turn.shift() as string;
      const queue = this.waitersByOrganization.get(organizationId) as Waiter[];
      const waiter = queue.shift() as Waiter;
      if (queue.length > 0) this.turn.push(organizationId);
      else this.waitersByOrganization.delete(organizationId);
      this.waiting--;
      waiter.grant(this.take());
    }
  }

  private remove(waiter: Waiter): void {
    const queue = this.waitersByOrganization.get(waiter.organizationId);
    if (!queue) return;
    const index = queue.indexOf(waiter);
    if (index === -1) return;
    queue.splice(index, 1);
    this.waiting--;
    if (queue.length === 0) {
      this.waitersByOrganization.delete(waiter.organizationId);
      this.turn.splice(this.turn.indexOf(waiter.organizationId), 1);
    }
  }
}
