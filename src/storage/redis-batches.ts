import type { RedisConnection, RedisReply, ScriptName } from "./redis";

/** Items in one script call at most: a burst is sent as several calls, none holding Redis for long. */
const maxBatch = 200;

interface Waiting {
  values: (string | number)[];
  resolve: (reply: RedisReply) => void;
  reject: (error: unknown) => void;
}

interface Group {
  keys: string[];
  head: (string | number)[];
  waiting: Waiting[];
  inFlight: number;
}

/**
 * Gathers calls of one script on the same keys into one call: the first is sent at once; those that come while it is
 * in flight wait for its answer and then go together. Under load, a script then reads and writes each key once a
 * batch instead of once a request (a Lua script's fixed cost and every redis.call in it are paid per call), at no
 * added wait when calls are rare. The script takes the group's arguments (`head`), then each item's values in turn.
 */
export class ScriptBatches {
  private readonly groups = new Map<string, Group>();

  constructor(
    private readonly redis: RedisConnection,
    private readonly script: ScriptName,
    /** "each": the script answers with an array, one entry an item; "whole": one answer for the batch. */
    private readonly answers: "each" | "whole",
    /** Called just before each call is sent: what must reach Redis first (settles before the admits that follow them). */
    private readonly beforeSend: () => void = () => {},
  ) {}

  /**
   * Runs the script for one item; resolves with its answer (or the batch's), rejects when the call failed. `id` names
   * the keys and head: items with the same id go in one call.
   */
  run(id: string, keys: string[], head: (string | number)[], values: (string | number)[]): Promise<RedisReply> {
    let group = this.groups.get(id);
    if (group === undefined) {
      group = { keys, head, waiting: [], inFlight: 0 };
      this.groups.set(id, group);
    }
    const waiting = group.waiting;
    const promise = new Promise<RedisReply>((resolve, reject) => waiting.push({ values, resolve, reject }));
    if (group.inFlight === 0) this.send(id, group);
    return promise;
  }

  /** Whether any item is waiting or in flight. */
  busy(): boolean {
    for (const group of this.groups.values()) if (group.waiting.length > 0 || group.inFlight > 0) return true;
    return false;
  }

  /**
   * Sends every waiting item now, without waiting for the calls in flight. Redis runs one connection's commands in
   * order, so what is sent here takes effect before anything sent after it.
   */
  sendWaiting(): void {
    for (const [id, group] of this.groups) if (group.waiting.length > 0) this.send(id, group);
  }

  private send(id: string, group: Group): void {
    if (group.waiting.length === 0) {
      if (group.inFlight === 0) this.groups.delete(id);
      return;
    }
    this.beforeSend();
    const batch = group.waiting.splice(0, maxBatch);
    group.inFlight++;
    const args = [...group.head];
    for (const waiting of batch) for (const value of waiting.values) args.push(value);
    this.redis
      .script(this.script, group.keys, args)
      .then(
        (reply) => {
          for (let index = 0; index < batch.length; index++) {
            (batch[index] as Waiting).resolve(this.answers === "each" ? ((reply as RedisReply[])[index] ?? null) : reply);
          }
        },
        (error: unknown) => {
          for (const waiting of batch) waiting.reject(error);
        },
      )
      .finally(() => {
        group.inFlight--;
        if (group.inFlight === 0) this.send(id, group);
      });
  }
}
