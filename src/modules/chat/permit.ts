import { clearDeadline, setDeadline } from "../../upstream/deadlines";
import type { Lease, SpentTokens } from "../admission/store";
import type { Slot } from "../queue/model-queue";

/**
 * A request's admission lease, its model slot and its upstream deadline, released together, exactly once. It holds
 * what the release needs rather than a closure over it: with thousands of open streams, each closure and the scope it
 * keeps are cells every full collection marks (bench/HISTORY.md, "Fewer cells an open stream").
 */
export class Permit {
  private released = false;
  private slot: Slot | null = null;
  private timeoutMs = 0;

  constructor(
    readonly lease: Lease,
    /** The request's controller: its deadline is set by `occupy`, and it is in `active` until released. */
    private readonly abort: AbortController,
    private readonly active: Set<AbortController>,
  ) {}

  /** Holds a slot of the model that will answer, and that model's deadline (`timeout_ms`) from now. */
  occupy(slot: Slot, timeoutMs: number): void {
    this.slot = slot;
    this.timeoutMs = timeoutMs;
    setDeadline(this.abort, timeoutMs);
    this.active.add(this.abort);
  }

  /** Gives back the model's slot and cancels its deadline, keeping the lease: another model is tried next. */
  vacate(): void {
    if (this.slot === null) return;
    clearDeadline(this.abort, this.timeoutMs);
    this.slot.release();
    this.slot = null;
  }

  /** Frees everything, once; the quotas count `spent` at `weight`, the quota weight of the model that answered. */
  release(spent: SpentTokens | null, at: number, weight = 1): void {
    if (this.released) return;
    this.released = true;
    this.vacate();
    this.active.delete(this.abort);
    this.lease.settle(spent, at, weight);
  }
}
