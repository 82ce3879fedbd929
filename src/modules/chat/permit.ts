import type { Lease, SpentTokens } from "../admission/store";
import type { Slot } from "../queue/model-queue";

/** A request's admission lease, its model slot and its upstream deadline, released together, exactly once. */
export class Permit {
  private released = false;

  constructor(
    readonly lease: Lease,
    private readonly slot: Slot,
    private readonly cancelDeadline: () => void,
  ) {}

  release(spent: SpentTokens | null, at: number): void {
    if (this.released) return;
    this.released = true;
    this.cancelDeadline();
    this.slot.release();
    this.lease.settle(spent, at);
  }
}
