import { expect, test } from "bun:test";
import { resolveConfig } from "../../../src/config/load";
import { SluiceError } from "../../../src/errors";
import type { QueueObserver, WaitResult } from "../../../src/modules/queue/fair-line";
import { ModelQueue, type Slot } from "../../../src/modules/queue/model-queue";
import { ClientGoneError } from "../../../src/errors";

function queue(maxConcurrency: number, queueSize = 100, queueTimeoutMs = 10_000, observer?: QueueObserver) {
  const [model] = resolveConfig({
    models: [{ id: "m", backend: "demo", max_concurrency: maxConcurrency, queue_size: queueSize, queue_timeout_ms: queueTimeoutMs }],
  }).models;
  return new ModelQueue(model!, observer);
}

const never = new AbortController().signal;

test("waiters are served round-robin across organizations, FIFO within one", async () => {
  const models = queue(1);
  const first = models.acquire("a", never) as Slot;
  const started: string[] = [];
  const pending: Promise<void>[] = [];
  const enqueue = (organization: string, label: string) =>
    pending.push(
      Promise.resolve(models.acquire(organization, never)).then((slot) => {
        started.push(label);
        slot.release();
      }),
    );
  for (let index = 0; index < 6; index++) enqueue("a", `a${index}`);
  enqueue("b", "b0");
  enqueue("b", "b1");
  enqueue("c", "c0");
  first.release();
  await Promise.all(pending);
  expect(started).toEqual(["a0", "b0", "c0", "a1", "b1", "a2", "a3", "a4", "a5"]);
  expect(models.stats()).toEqual({ active: 0, queued: 0 });
});

test("a plan's queue_weight gives its organization that many slots in a row in its turn; every organization still gets its turn", async () => {
  const models = queue(1);
  const first = models.acquire("x", never) as Slot;
  const started: string[] = [];
  const pending: Promise<void>[] = [];
  const enqueue = (organization: string, weight: number, count: number) => {
    for (let index = 0; index < count; index++) {
      pending.push(
        Promise.resolve(models.acquire(organization, never, weight)).then((slot) => {
          started.push(`${organization}${index}`);
          slot.release();
        }),
      );
    }
  };
  enqueue("a", 3, 8);
  enqueue("b", 1, 4);
  enqueue("c", 2, 3);
  first.release();
  await Promise.all(pending);
  expect(started).toEqual(["a0", "a1", "a2", "b0", "c0", "c1", "a3", "a4", "a5", "b1", "c2", "a6", "a7", "b2", "b3"]);
  expect(models.stats()).toEqual({ active: 0, queued: 0 });
});

test("a weighted organization whose waiter leaves mid-turn: the line goes on, in order, and empties", async () => {
  const models = queue(1);
  const first = models.acquire("x", never) as Slot;
  const started: string[] = [];
  const leaving = new AbortController();
  const waits = [
    ["a", never, 2],
    ["a", leaving.signal, 2],
    ["a", never, 2],
    ["b", never, 1],
  ] as const;
  const pending = waits.map(([organization, signal, weight], index) =>
    Promise.resolve(models.acquire(organization, signal, weight)).then(
      (slot) => {
        started.push(`${organization}${index}`);
        slot.release();
      },
      () => started.push(`left ${index}`),
    ),
  );
  leaving.abort();
  first.release();
  await Promise.all(pending);
  expect(started).toEqual(["left 1", "a0", "a2", "b3"]);
  expect(models.stats()).toEqual({ active: 0, queued: 0 });
});

test("a full queue and a long wait are 503 server_overloaded; a caller who leaves is gone from the queue at once", async () => {
  const models = queue(1, 1, 50);
  const held = models.acquire("a", never) as Slot;
  const waiting = models.acquire("a", never) as Promise<Slot>;
  expect(() => models.acquire("b", never)).toThrow(SluiceError);
  const timedOut = await waiting.catch((error: unknown) => error);
  expect((timedOut as SluiceError).code).toBe("server_overloaded");
  expect(models.stats().queued).toBe(0);
  const controller = new AbortController();
  const leaving = (models.acquire("b", controller.signal) as Promise<Slot>).catch((error: unknown) => error);
  expect(models.stats().queued).toBe(1);
  controller.abort();
  expect(models.stats().queued).toBe(0);
  expect(await leaving).toBeInstanceOf(ClientGoneError);
  held.release();
  expect(models.stats()).toEqual({ active: 0, queued: 0 });
});

test("the observer hears of every wait as it ends, and of nothing for a request that finds a slot free", async () => {
  const heard: [WaitResult, number][] = [];
  const models = queue(1, 2, 150, (model, result, seconds) => {
    expect(model).toBe("m");
    heard.push([result, seconds]);
  });
  const first = models.acquire("a", never) as Slot;
  expect(heard).toEqual([]);
  const granted = Promise.resolve(models.acquire("a", never));
  const leaving = new AbortController();
  const left = Promise.resolve(models.acquire("b", leaving.signal)).catch((error: unknown) => error);
  // The queue holds two: a third is turned away at once.
  expect(() => models.acquire("c", never)).toThrow(SluiceError);
  await Bun.sleep(30);
  leaving.abort();
  expect(await left).toBeInstanceOf(ClientGoneError);
  first.release();
  (await granted).release();
  // Alone in the queue behind a held slot, one waits out its 150 ms.
  const holder = models.acquire("a", never) as Slot;
  const timedOut = await Promise.resolve(models.acquire("d", never)).catch((error: unknown) => error);
  expect(timedOut).toBeInstanceOf(SluiceError);
  holder.release();
  expect(heard.map(([result]) => result)).toEqual(["full", "left", "granted", "timed_out"]);
  expect(heard[0]![1]).toBe(0);
  expect(heard[1]![1]).toBeGreaterThanOrEqual(0.025);
  expect(heard[2]![1]).toBeGreaterThanOrEqual(0.025);
  expect(heard[3]![1]).toBeGreaterThanOrEqual(0.14);
  expect(models.stats()).toEqual({ active: 0, queued: 0 });
});
