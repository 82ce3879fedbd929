import { generationKey, keyPrefix, type RedisConnection, type RedisReply } from "../../storage/redis";

/**
 * How long a concurrency lease or model slot lives in Redis unless its instance renews it: the longest an instance
 * that died (kill -9, a lost machine) keeps its places taken.
 */
export const leaseMs = 15_000;
const renewEveryMs = leaseMs / 3;
/** Where the instance that rebuilt the state from the ledger says so: every instance renews at once (see LeaseKeeper). */
export const rebuiltChannel = `${keyPrefix}rebuilt`;

/**
 * Where a lease lives, for renew.lua: groups of four keys, one per subject (its organization, its capped key) or model:
 * the sorted set of leases, the set they move to when they expire (the subject's `expired` set), and the subject's
 * state and reservations. A model slot, which has none of the last three, names its own set in their place.
 */
export type LeaseSets = readonly string[];

interface HeldLease {
  sets: LeaseSets;
  /** The admission state's generation its settle belongs to ("" for a model slot, which settles nothing). */
  generation: string;
  /** The tokens its admission reserved in each of its subjects (0 for a model slot). */
  reservation: number;
}

/**
 * Renews the leases this instance holds (organization concurrency leases and model slots), all in one script call
 * every five seconds, so that a lease outlives its request only when the instance dies.
 *
 * If Redis lost its data (a restart without persistence, a failover), the next renewal puts the leases back, so that
 * requests still under way count against their caps again; once the state has been rebuilt from the ledger, it
 * moves an organization's lease into the new generation, so that its settle records what the request spent. The
 * request's row is not in the ledger the rebuild read: its settle, and so its row, comes after this renewal.
 */
export class LeaseKeeper {
  private readonly held = new Map<string, HeldLease>();
  private readonly timer: Timer;
  private lastGeneration: string | undefined;

  constructor(private readonly redis: RedisConnection) {
    this.timer = setInterval(() => void this.renew(), renewEveryMs);
    this.timer.unref();
    // Without it, an instance that admits nothing after the rebuild would bring its requests under way back only at
    // its next renewal, up to 5 s later: meanwhile other instances' admissions would not count them.
    void redis.subscribe(rebuiltChannel, () => void this.renew());
  }

  hold(sets: LeaseSets, leaseId: string, generation = "", reservation = 0): void {
    this.held.set(leaseId, { sets, generation, reservation });
  }

  /** Stops renewing a lease; the generation its settle belongs to (a renewal may have moved it). */
  release(leaseId: string): string | undefined {
    const lease = this.held.get(leaseId);
    this.held.delete(leaseId);
    return lease?.generation;
  }

  /** An admission answered in this generation: a new one (the state was rebuilt) moves the leases held into it now. */
  sawGeneration(generation: string): void {
    if (generation === this.lastGeneration) return;
    const first = this.lastGeneration === undefined;
    this.lastGeneration = generation;
    if (!first) void this.renew();
  }

  close(): void {
    clearInterval(this.timer);
  }

  /** Renews every lease held now. */
  async renew(): Promise<void> {
    if (this.held.size === 0) return;
    const keys: string[] = [generationKey];
    const args: string[] = [String(leaseMs)];
    for (const [leaseId, lease] of this.held) {
      for (let index = 0; index < lease.sets.length; index += 4) {
        keys.push(...(lease.sets.slice(index, index + 4) as string[]));
        args.push(leaseId, lease.generation, String(lease.reservation));
      }
    }
    // A lease Redis could not renew now is renewed next time, well before it expires.
    const reply = (await this.redis.script("renew", keys, args).catch(() => undefined)) as RedisReply[] | undefined;
    if (!Array.isArray(reply) || typeof reply[0] !== "string" || reply[0] === "") return;
    const generation = reply[0];
    for (const leaseId of reply.slice(1)) {
      const lease = this.held.get(String(leaseId));
      if (lease) lease.generation = generation;
    }
  }
}
