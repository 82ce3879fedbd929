import { SluiceError } from "../../errors";
import { ClientGoneError } from "../../errors";
import type { Slot } from "./model-queue";

interface Waiter {
  organizationId: string;
  grant(slot: Slot): void;
}

/** How a wait in a model's queue ended: given a slot, out of time, its caller gone, or the queue full on arrival. */
export type WaitResult = "granted" | "timed_out" | "left" | "full";

/** Told of every wait in a model's queue as it ends, with its length in seconds (0 for a full queue): the metrics. */
export type QueueObserver = (modelId: string, result: WaitResult, seconds: number) => void;

/** An organization's waiters, and how many slots it has been given in its current turn. */
interface Turn {
  waiters: Waiter[];
  /** Slots in a row its plan's `queue_weight` gives it before the next organization's turn. */
  weight: number;
  served: number;
}

/**
 * The requests waiting for a model's slot: served round-robin across organizations, each organization's turn as many
 * slots as its plan's `queue_weight` (1 unless set), and first-in first-out within one, so one organization's burst
 * cannot starve the others and a heavier plan gets its share first. A waiter leaves when its client does or its time
 * is up.
 */
export class FairLine {
  waiting = 0;
  /** Organizations with waiters, in the order they are served next. */
  private readonly turn: string[] = [];
  private readonly turns = new Map<string, Turn>();

  constructor(
    private readonly modelId: string,
    /** How long a request may wait; a new configuration's applies to the requests that come after it. */
    public timeoutMs: number,
    private readonly observer?: QueueObserver,
  ) {}

  /** Waits for a slot; `weight`, the plan's `queue_weight`, applies to the organization's turns from now on. */
  wait(organizationId: string, signal: AbortSignal, weight = 1): Promise<Slot> {
    return new Promise<Slot>((resolve, reject) => {
      if (signal.aborted) return reject(new ClientGoneError("client disconnected while queued", false));
      const since = performance.now();
      const ended = (result: WaitResult) => this.observer?.(this.modelId, result, (performance.now() - since) / 1000);
      const leave = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        this.remove(waiter);
      };
      const onAbort = () => {
        leave();
        ended("left");
        reject(new ClientGoneError("client disconnected while queued", false));
      };
      const timer = setTimeout(() => {
        leave();
        ended("timed_out");
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
          ended("granted");
          resolve(slot);
        },
      };
      signal.addEventListener("abort", onAbort, { once: true });
      let turn = this.turns.get(organizationId);
      if (!turn) {
        turn = { waiters: [], weight, served: 0 };
        this.turns.set(organizationId, turn);
        this.turn.push(organizationId);
      }
      turn.weight = weight;
      turn.waiters.push(waiter);
      this.waiting++;
    });
  }

  /**
   * Gives a slot to the organization whose turn it is; once its turn has had its weight's slots (or it has no more
   * waiters), the next organization's turn begins. False if nobody waits.
   */
  grantNext(slot: Slot): boolean {
    if (this.waiting === 0) return false;
    const organizationId = this.turn[0] as string;
    const turn = this.turns.get(organizationId) as Turn;
    const waiter = turn.waiters.shift() as Waiter;
    turn.served++;
    if (turn.waiters.length === 0) {
      this.turns.delete(organizationId);
      this.turn.shift();
    } else if (turn.served >= turn.weight) {
      turn.served = 0;
      this.turn.shift();
      this.turn.push(organizationId);
    }
    this.waiting--;
    waiter.grant(slot);
    return true;
  }

  private remove(waiter: Waiter): void {
    const turn = this.turns.get(waiter.organizationId);
    if (!turn) return;
    const index = turn.waiters.indexOf(waiter);
    if (index === -1) return;
    turn.waiters.splice(index, 1);
    this.waiting--;
    if (turn.waiters.length === 0) {
      this.turns.delete(waiter.organizationId);
      this.turn.splice(this.turn.indexOf(waiter.organizationId), 1);
    }
  }
}

/** The 503 of a full queue. */
export function queueFull(modelId: string): SluiceError {
  return new SluiceError("server_overloaded", `Model ${modelId} is at capacity and its queue is full. Retry shortly.`, { retryAfterSeconds: 1 });
}
