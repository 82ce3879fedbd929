// A model's shared slots (in Redis) and this instance's line in front of them, against a real Redis.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { ModelConfig } from "../../../src/config/schema";
import { LeaseKeeper } from "../../../src/modules/admission/lease-keeper";
import { SharedModelQueue } from "../../../src/modules/queue/shared-model-queue";
import type { Slot } from "../../../src/modules/queue/model-queue";
import { RedisConnection } from "../../../src/storage/redis";
import { leasesHeld, type RedisServer, startRedis } from "../../support/services";

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis.stop();
});

test("the line in front of shared slots serves a plan's queue_weight in a row in its organization's turn, and gives every slot back", async () => {
  const connection = new RedisConnection(redis.url);
  const keeper = new LeaseKeeper(connection);
  const model = { id: "weighted", maxConcurrency: 1, queueSize: 8, queueTimeoutMs: 10_000 } as ModelConfig;
  const heard: string[] = [];
  const queue = new SharedModelQueue(model, connection, keeper, (modelId, result) => heard.push(`${modelId} ${result}`));
  try {
    while (!connection.connected) await Bun.sleep(10);
    const never = new AbortController().signal;
    const first = await queue.acquire("x", never);
    const started: string[] = [];
    const pending: Promise<void>[] = [];
    for (const [organization, weight, count] of [
      ["a", 2, 5],
      ["b", 1, 3],
    ] as const) {
      for (let index = 0; index < count; index++) {
        pending.push(
          queue.acquire(organization, never, weight).then((slot: Slot) => {
            started.push(`${organization}${index}`);
            slot.release();
          }),
        );
      }
    }
    await Bun.sleep(50);
    expect(queue.stats().queued).toBe(8);
    // A ninth finds the line full; the observer hears of it, and of each of the eight waits as it ends.
    await expect(queue.acquire("c", never)).rejects.toThrow("queue is full");
    first.release();
    await Promise.all(pending);
    expect(started).toEqual(["a0", "a1", "b0", "a2", "a3", "b1", "a4", "b2"]);
    expect(heard).toEqual(["weighted full", ...Array.from({ length: 8 }, () => "weighted granted")]);
    await queue.close();
    expect(await leasesHeld(redis.url)).toBe(0);
  } finally {
    keeper.close();
    connection.close();
  }
});
