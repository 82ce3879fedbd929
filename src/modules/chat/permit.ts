import { clearDeadline } from "../../upstream/deadlines";
import type { Lease, SpentTokens } from "../admission/store";
import type { Slot } from "../queue/model-queue";

/**
 * A request's admission lease, its model slot and its upstream deadline, released together, exactly once. It holds
 * what the release needs rather than a closure over it: with thousands of open streams, each closure and the scope it
 * keeps are cells every full collection marks (bench/HISTORY.md, "Fewer cells an open stream").
 */
export class Permit {
  private released = false;

  constructor(
    readonly lease: Lease,
    private readonly slot: Slot,
    /** The request's controller: its deadline is set with `timeoutMs`, and it is in `active` until released. */
    private readonly abort: AbortController,
    private readonly timeoutMs: number,
    private readonly active: Set<AbortController>,
  ) {}

  release(spent: SpentTokens | null, at: number): void {
    if (this.released) return;
    this.released = true;
    clearDeadline(this.abort, this.timeoutMs);
    this.active.delete(this.abort);
    this.slot.release();
    this.lease.settle(spent, at);
  }
}
