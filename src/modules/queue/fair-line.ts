import { SluiceError } from "../../errors";
import { ClientGoneError } from "../../errors";
import type { Slot } from "./model-queue";

interface Waiter {
  organizationId: string;
  grant(slot: Slot): void;
}

/**
 * The requests waiting for a model's slot: served round-robin across organizations and first-in first-out within
 * one, so one organization's burst cannot starve the others. A waiter leaves when its client does or its time is up.
 */
export class FairLine {
  waiting = 0;
  /** Organizations with waiters, in the order they are served next. */
  private readonly turn: string[] = [];
  private readonly waitersByOrganization = new Map<string, Waiter[]>();

  constructor(
    private readonly modelId: string,
    /** How long a request may wait; a new configuration's applies to the requests that come after it. */
    public timeoutMs: number,
  ) {}

  wait(organizationId: string, signal: AbortSignal): Promise<Slot> {
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
          new SluiceError("server_overloaded", `Model ${this.modelId} is at capacity; the request waited ${this.timeoutMs} ms in its queue. Retry shortly.`, {
            retryAfterSeconds: 1,
          }),
        );
      }, this.timeoutMs);
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

  /** Gives a slot to the organization whose turn it is, which then goes to the back; false if nobody waits. */
  grantNext(slot: Slot): boolean {
    if (this.waiting === 0) return false;
    const organizationId = this.turn.shift() as string;
    const queue = this.waitersByOrganization.get(organizationId) as Waiter[];
    const waiter = queue.shift() as Waiter;
    if (queue.length > 0) this.turn.push(organizationId);
    else this.waitersByOrganization.delete(organizationId);
    this.waiting--;
    waiter.grant(slot);
    return true;
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

/** The 503 of a full queue. */
export function queueFull(modelId: string): SluiceError {
  return new SluiceError("server_overloaded", `Model ${modelId} is at capacity and its queue is full. Retry shortly.`, { retryAfterSeconds: 1 });
}
