import type { Lease, SpentTokens } from "../admission/store";
import type { Slot } from "../queue/model-queue";

/** A request's admission lease and its model slot, released together, exactly once. */
export class Permit {
  private released = false;

  constructor(
    readonly lease: Lease,
    private readonly slot: Slot,
  ) {}

  release(spent: SpentTokens | null, at: number): void {
    if (this.released) return;
    this.released = true;
    this.slot.release();
    this.lease.settle(spent, at);
  }
}
