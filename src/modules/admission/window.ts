import { bucketMs, fiveHoursMs } from "../../usage-periods";

interface Bucket {
  tokens: number;
  /** The latest time usage was added to this bucket; the bucket leaves the window at lastTime + 5 h. */
  lastTime: number;
}

/**
 * The tokens an organization used in the last 5 hours, in one-minute buckets. A bucket leaves the window only
 * when the latest usage in it is 5 hours old, so bucketing can delay usage's exit but never hasten it: usage
 * recorded at t counts until t + 5 h exactly (or a little longer if more was added to its minute later).
 */
export class RollingWindow {
  /** Oldest first; at most one bucket per minute. */
  private buckets: { minute: number; bucket: Bucket }[] = [];
  private total = 0;

  constructor(private readonly lengthMs = fiveHoursMs) {}

  add(tokens: number, time: number): void {
    if (tokens <= 0) return;
    this.expire(time);
    const minute = Math.floor(time / bucketMs);
    const last = this.buckets.at(-1);
    if (last && last.minute === minute) {
      last.bucket.tokens += tokens;
      last.bucket.lastTime = Math.max(last.bucket.lastTime, time);
    } else if (last && last.minute > minute) {
      // Out of order (a clock step back): keep it in the newest bucket, which leaves the window last.
      last.bucket.tokens += tokens;
    } else {
      this.buckets.push({ minute, bucket: { tokens, lastTime: time } });
    }
    this.total += tokens;
  }

  /** Tokens still inside the window at `now`. */
  used(now: number): number {
    this.expire(now);
    return this.total;
  }

  /**
   * Milliseconds from `now` until at least `excess` tokens have left the window; undefined if all of it leaving
   * is not enough.
   */
  timeUntilFreed(excess: number, now: number): number | undefined {
    this.expire(now);
    if (excess <= 0) return 0;
    let freed = 0;
    for (const { bucket } of this.buckets) {
      freed += bucket.tokens;
      if (freed >= excess) return bucket.lastTime + this.lengthMs - now;
    }
    return undefined;
  }

  /** Milliseconds until everything now in the window has left it. */
  timeUntilEmpty(now: number): number {
    this.expire(now);
    const newest = this.buckets.at(-1);
    return newest ? newest.bucket.lastTime + this.lengthMs - now : 0;
  }

  clear(): void {
    this.buckets = [];
    this.total = 0;
  }

  private expire(now: number): void {
    let drop = 0;
    while (drop < this.buckets.length && (this.buckets[drop] as { bucket: Bucket }).bucket.lastTime + this.lengthMs <= now) {
      this.total -= (this.buckets[drop] as { bucket: Bucket }).bucket.tokens;
      drop++;
    }
    if (drop > 0) this.buckets.splice(0, drop);
  }
}
