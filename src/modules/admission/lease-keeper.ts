import type { RedisConnection } from "../../storage/redis";

/**
 * How long a concurrency lease or model slot lives in Redis unless its instance renews it: the longest an instance
 * that died (kill -9, a lost machine) keeps its places taken.
 */
export const leaseMs = 15_000;
const renewEveryMs = leaseMs / 3;

/**
 * Renews the leases this instance holds (organization concurrency leases and model slots), all in one script call
 * every five seconds, so that a lease outlives its request only when the instance dies.
 */
export class LeaseKeeper {
  /** lease id → the sorted set it lives in, or the sets (an organization's, and its key's when the key has caps) */
  private readonly held = new Map<string, string | readonly string[]>();
  private readonly timer: Timer;

  constructor(private readonly redis: RedisConnection) {
    this.timer = setInterval(() => void this.renew(), renewEveryMs);
    this.timer.unref();
  }

  hold(sets: string | readonly string[], leaseId: string): void {
    this.held.set(leaseId, sets);
  }

  release(leaseId: string): void {
    this.held.delete(leaseId);
  }

  close(): void {
    clearInterval(this.timer);
  }

  private async renew(): Promise<void> {
    if (this.held.size === 0) return;
    const keys: string[] = [];
    const args: string[] = [String(leaseMs)];
    for (const [leaseId, sets] of this.held) {
      for (const set of typeof sets === "string" ? [sets] : sets) {
        keys.push(set);
        args.push(leaseId);
      }
    }
    // A lease Redis could not renew now is renewed next time, well before it expires.
    await this.redis.script("renew", keys, args).catch(() => {});
  }
}
