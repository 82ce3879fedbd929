// Shared mode's reload announcements against a real Redis: an instance that heard an announcement reloads once; one
// that missed it (not listening when it went out) reloads at its next check, once; a Redis that lost its data, or was
// down at start, makes no reload of its own.
import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { lastReloadKey, ReloadAnnouncements, reloadChannel, type ReloadTrigger } from "../../src/config/reload-announcements";
import { RedisConnection } from "../../src/storage/redis";
import { eventually } from "../helpers";
import { startRedis, type RedisServer } from "../support/services";

let redis: RedisServer;
const opened: { connection: RedisConnection; announcements: ReloadAnnouncements }[] = [];

beforeAll(async () => {
  redis = await startRedis();
});
afterEach(() => {
  for (const { connection, announcements } of opened.splice(0)) {
    announcements.stop();
    connection.close();
  }
});
afterAll(async () => {
  await redis.stop();
});

const checkEveryMs = 50;

/** An instance's announcements, with the reloads they asked for. */
async function instance(): Promise<{ announcements: ReloadAnnouncements; reloads: ReloadTrigger[] }> {
  const connection = new RedisConnection(redis.url);
  await eventually(() => connection.connected);
  const reloads: ReloadTrigger[] = [];
  const announcements = new ReloadAnnouncements(
    connection,
    async (trigger) => {
      reloads.push(trigger);
    },
    checkEveryMs,
  );
  await announcements.start();
  opened.push({ connection, announcements });
  return { announcements, reloads };
}

async function send(command: string, args: string[]): Promise<unknown> {
  const client = new Bun.RedisClient(redis.url);
  try {
    return await client.send(command, args);
  } finally {
    client.close();
  }
}

test("an announced reload: every other instance reloads once, the announcing one not again", async () => {
  const [first, second, third] = await Promise.all([instance(), instance(), instance()]);
  await first.announcements.announce();
  await eventually(() => second.reloads.length === 1 && third.reloads.length === 1);
  // Several checks later: nothing more.
  await Bun.sleep(checkEveryMs * 5);
  expect(first.reloads).toEqual([]);
  expect(second.reloads).toEqual(["SIGHUP to another instance"]);
  expect(third.reloads).toEqual(["SIGHUP to another instance"]);
});

test("an announcement of an instance of the version before (its id alone, nothing recorded): every other instance reloads once", async () => {
  const [first, second] = await Promise.all([instance(), instance()]);
  await send("PUBLISH", [reloadChannel, crypto.randomUUID()]);
  await eventually(() => first.reloads.length === 1 && second.reloads.length === 1);
  await Bun.sleep(checkEveryMs * 5);
  expect([first.reloads, second.reloads]).toEqual([["SIGHUP to another instance"], ["SIGHUP to another instance"]]);
});

test("a reload recorded while an instance was not listening: it reloads at its next check, once", async () => {
  const [first, second] = await Promise.all([instance(), instance()]);
  // As an announcement whose message reached nobody: recorded in Redis, never published.
  await send("SET", [lastReloadKey, crypto.randomUUID()]);
  await eventually(() => first.reloads.length === 1 && second.reloads.length === 1);
  await Bun.sleep(checkEveryMs * 5);
  expect(first.reloads).toEqual(["SIGHUP to another instance, missed while not listening"]);
  expect(second.reloads).toEqual(["SIGHUP to another instance, missed while not listening"]);
});

test("Redis lost its data: no reload; the next announcement reaches everyone", async () => {
  const [first, second] = await Promise.all([instance(), instance()]);
  await first.announcements.announce();
  await eventually(() => second.reloads.length === 1);
  await send("FLUSHALL", []);
  await Bun.sleep(checkEveryMs * 5);
  expect(second.reloads.length).toBe(1);
  expect(first.reloads.length).toBe(0);
  await second.announcements.announce();
  await eventually(() => first.reloads.length === 1);
  await Bun.sleep(checkEveryMs * 5);
  expect([first.reloads.length, second.reloads.length]).toEqual([1, 1]);
});

test("a reload made while Redis was down is announced once Redis is back: the others reload late rather than never", async () => {
  const [first, second] = await Promise.all([instance(), instance()]);
  await redis.pause();
  await first.announcements.announce();
  await Bun.sleep(checkEveryMs * 3);
  expect(second.reloads).toEqual([]);
  await redis.resume();
  await eventually(() => second.reloads.length === 1, 10_000);
  await Bun.sleep(checkEveryMs * 5);
  expect(second.reloads.length).toBe(1);
  expect(first.reloads).toEqual([]);
}, 20_000);

test("an instance started while Redis did not answer: its first read of the last reload is no reload; later ones are", async () => {
  // A reload made before this instance started: the file it reads at start is newer.
  await send("SET", [lastReloadKey, "before"]);
  // Redis holds every command for 1.5 s: the start's read gives up after 1 s, as it would with Redis down.
  await send("CLIENT", ["PAUSE", "1500", "ALL"]);
  const connection = new RedisConnection(redis.url);
  const reloads: ReloadTrigger[] = [];
  const announcements = new ReloadAnnouncements(connection, async (trigger) => void reloads.push(trigger), checkEveryMs);
  await announcements.start();
  opened.push({ connection, announcements });
  // Well past the pause: the checks have read "before" for the first time.
  await Bun.sleep(2000);
  expect(reloads).toEqual([]);
  await send("SET", [lastReloadKey, "after"]);
  await eventually(() => reloads.length === 1);
  expect(reloads).toEqual(["SIGHUP to another instance, missed while not listening"]);
}, 20_000);
