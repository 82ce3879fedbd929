import type { ModelConfig } from "../../config/schema";
import { keyPrefix, type RedisConnection } from "../../storage/redis";
import { admissionUnavailable } from "../admission/redis-store";
import { leaseMs, type LeaseKeeper } from "../admission/lease-keeper";
import { FairLine, type QueueObserver, queueFull } from "./fair-line";
import type { Queue, Slot } from "./model-queue";

/**
 * While requests wait, slots are tried again this often even without a notice: a notice lost with a Redis
 * reconnect, or a slot freed by an instance that died (its lease expiring), still reaches the line.
 */
const pollMs = 25;
/** How long a slot release is retried (so how long closing can wait for it), and how often it is sent again. */
const closeFlushMs = 5000;
const releaseRetryMs = 100;

/**
 * A slot of a SharedModelQueue: a lease in Redis, or, taken while the model had no limit, a place counted here only
 * until a limit appears (see adopt).
 */
class SharedSlot implements Slot {
  private done = false;

  constructor(
    private readonly queue: SharedModelQueue,
    public leaseId: string | undefined,
  ) {}

  release(): void {
    if (this.done) return;
    this.done = true;
    this.queue.released(this);
  }
}

/**
 * A model's `max_concurrency` shared by every instance (a global cap on the upstream server): its slots are leases
 * in one Redis sorted set. Requests that find no slot wait in this instance's fair line (`queue_size` and
 * `queue_timeout_ms` apply per instance); a slot freed on any instance is announced over pub/sub, and the instances
 * with waiters race for it, each giving what it wins to the organization whose turn it is in its own line.
 */
export class SharedModelQueue implements Queue {
  private active = 0;
  private readonly line: FairLine;
  private readonly key: string;
  /** The keeper's keys for a slot (see LeaseSets): its set, and the same set again in place of those it has none of. */
  private readonly leaseSets: readonly string[];
  private readonly channel: string;
  private dispatching = false;
  private poller: Timer | undefined;
  /** Slot releases sent to Redis and not yet answered: closing waits for them (see close). */
  private readonly releasing = new Set<Promise<void>>();
  /** Slots taken while the model had no limit, and not released: they have no lease in Redis (see adopt). */
  private readonly unleased = new Set<SharedSlot>();

  private subscribed = false;

  constructor(
    private model: ModelConfig,
    private readonly redis: RedisConnection,
    private readonly keeper: LeaseKeeper,
    private readonly observer?: QueueObserver,
  ) {
    this.line = new FairLine(model.id, model.queueTimeoutMs, observer);
    this.key = `${keyPrefix}model:{${model.id}}:slots`;
    this.leaseSets = [this.key, this.key, this.key, this.key];
    this.channel = `${keyPrefix}model:{${model.id}}:freed`;
    this.subscribe();
  }

  /**
   * A new limit counts every slot in use on every instance: those taken while the model had no limit are given leases
   * first (see adopt), so that a request that comes next waits for them as for any other.
   */
  reconfigure(model: ModelConfig): void {
    this.model = model;
    this.line.timeoutMs = model.queueTimeoutMs;
    this.subscribe();
    if (model.maxConcurrency === undefined) {
      this.grantAll();
      return;
    }
    this.adopt();
    void this.dispatch();
  }

  /**
   * Gives each slot taken while the model had no limit a lease in Redis, whatever the new limit (a request under way
   * is not stopped, so the slots in use may exceed it for a while). Sent before any slot is taken under the limit, on
   * the same connection, so Redis counts them first; a release sent after finds its lease there. Should Redis not
   * take them now, the keeper's next renewal adds them (it puts back what Redis lacks).
   */
  private adopt(): void {
    if (this.unleased.size === 0) return;
    const leaseIds: string[] = [];
    for (const slot of this.unleased) {
      slot.leaseId = crypto.randomUUID();
      this.keeper.hold(this.leaseSets, slot.leaseId);
      leaseIds.push(slot.leaseId);
    }
    this.unleased.clear();
    void this.redis.script("adoptSlots", [this.key], [leaseMs, ...leaseIds]).catch(() => {});
  }

  /** Listens for slots freed on any instance, once the model has a limit. */
  private subscribe(): void {
    if (this.subscribed || this.model.maxConcurrency === undefined) return;
    this.subscribed = true;
    void this.redis.subscribe(this.channel, () => void this.dispatch());
  }

  /** The model's limit is gone: every waiter goes on at once, as a request that comes now would. */
  private grantAll(): void {
    while (this.line.waiting > 0) this.line.grantNext(this.localSlot());
  }

  async acquire(organizationId: string, signal: AbortSignal, weight = 1): Promise<Slot> {
    if (this.model.maxConcurrency === undefined) return this.localSlot();
    if (this.line.waiting === 0) {
      let slot: Slot | undefined;
      try {
        slot = await this.tryTake();
      } catch (error) {
        throw admissionUnavailable(error);
      }
      if (slot) return slot;
    }
    if (this.line.waiting >= this.model.queueSize) {
      this.observer?.(this.model.id, "full", 0);
      throw queueFull(this.model.id);
    }
    const waiting = this.line.wait(organizationId, signal, weight);
    this.poller ??= setInterval(() => void this.dispatch(), pollMs);
    return waiting;
  }

  stats(): { active: number; queued: number } {
    return { active: this.active, queued: this.line.waiting };
  }

  /** Stops polling, once the releases on their way have reached Redis or given up (see release). */
  async close(): Promise<void> {
    clearInterval(this.poller);
    await Promise.all(this.releasing);
  }

  private localSlot(): SharedSlot {
    this.active++;
    const slot = new SharedSlot(this, undefined);
    this.unleased.add(slot);
    return slot;
  }

  private async tryTake(): Promise<Slot | undefined> {
    const leaseId = crypto.randomUUID();
    const taken = await this.redis.script("takeSlot", [this.key], [this.model.maxConcurrency as number, leaseId, leaseMs]);
    if (Number(taken) !== 1) return undefined;
    this.keeper.hold(this.leaseSets, leaseId);
    this.active++;
    return new SharedSlot(this, leaseId);
  }

  /** A slot's release (SharedSlot calls it once): its lease, if it has one, is freed for every instance. */
  released(slot: SharedSlot): void {
    this.active--;
    if (slot.leaseId === undefined) {
      this.unleased.delete(slot);
      return;
    }
    this.keeper.release(slot.leaseId);
    const released = this.release(slot.leaseId).finally(() => this.releasing.delete(released));
    this.releasing.add(released);
    void this.dispatch();
  }

  /**
   * Frees a slot in Redis and tells the other instances. A release Redis does not take is sent again for a few seconds
   * (a closing instance waits for it); after that the lease expires by itself.
   */
  private async release(leaseId: string): Promise<void> {
    const givesUpAt = Date.now() + closeFlushMs;
    for (;;) {
      try {
        await this.redis.call("ZREM", [this.key, leaseId]);
        break;
      } catch {
        if (Date.now() >= givesUpAt) return;
        await Bun.sleep(releaseRetryMs);
      }
    }
    await this.redis.call("PUBLISH", [this.channel, "1"]).catch(() => {});
  }

  /** Takes free slots for waiters while there are both. */
  private async dispatch(): Promise<void> {
    if (this.dispatching) return;
    this.dispatching = true;
    try {
      while (this.line.waiting > 0) {
        const slot = await this.tryTake().catch(() => undefined);
        if (!slot) break;
        // The waiter may have left while the slot was being taken.
        if (!this.line.grantNext(slot)) slot.release();
      }
    } finally {
      this.dispatching = false;
      if (this.line.waiting === 0 && this.poller) {
        clearInterval(this.poller);
        this.poller = undefined;
      }
    }
  }
}
