// Redis in shared mode: admission state only (quota windows, reservations, concurrency leases, model slots) and the
// change epoch that tells instances to drop their caches. Everything in it can be rebuilt from PostgreSQL.
import { RedisClient } from "bun";
import preludeLua from "./redis-scripts/prelude.lua" with { type: "text" };
import admitLua from "./redis-scripts/admit.lua" with { type: "text" };
import settleLua from "./redis-scripts/settle.lua" with { type: "text" };
import restoreLua from "./redis-scripts/restore.lua" with { type: "text" };
import renewLua from "./redis-scripts/renew.lua" with { type: "text" };
import takeSlotLua from "./redis-scripts/take-slot.lua" with { type: "text" };
import adoptSlotsLua from "./redis-scripts/adopt-slots.lua" with { type: "text" };
import type { ChangeFeed } from "./types";
import { withTimeout } from "./with-timeout";

/** Every Redis call a request waits for gives up after this long. */
export const redisTimeoutMs = 1000;

/** Each script with the prelude its functions come from, and the SHA1 Redis knows it by. */
function script(body: string): { source: string; sha: string } {
  const source = `${preludeLua}\n${body}`;
  return { source, sha: new Bun.CryptoHasher("sha1").update(source).digest("hex") };
}

const scripts = {
  admit: script(admitLua),
  settle: script(settleLua),
  restore: script(restoreLua),
  renew: script(renewLua),
  takeSlot: script(takeSlotLua),
  adoptSlots: script(adoptSlotsLua),
};
export type ScriptName = keyof typeof scripts;

/** Redis's answer to a script: nested arrays of integers and strings. */
export type RedisReply = number | string | null | RedisReply[];

/** Every key Sluice writes starts with this, so that one Redis can serve other things too. */
export const keyPrefix = "sluice:";
const epochKey = `${keyPrefix}epoch`;
/**
 * The admission state's generation: set when it was rebuilt from the ledger, missing after Redis lost its data (see
 * RedisAdmissionStore.rebuildFromLedger).
 */
export const generationKey = `${keyPrefix}ready`;

export class RedisUnavailableError extends Error {
  override name = "RedisUnavailableError";
}

/**
 * One connection for commands and scripts (auto-pipelined by Bun), and one for pub/sub, made on first subscription.
 * Commands are never queued while disconnected (`enableOfflineQueue: false`): admission must fail fast instead.
 */
export class RedisConnection {
  readonly client: RedisClient;
  private subscriber: RedisClient | undefined;
  /** Scripts this connection has sent whole: Redis knows them by their SHA from then on. */
  private readonly sent = new Set<ScriptName>();
  private closed = false;

  constructor(readonly url: string) {
    this.client = this.connect();
  }

  /**
   * Runs one of Sluice's scripts: sent whole the first time (EVAL, which also makes Redis keep it), by its SHA after.
   * Both are sent at once, in the order of the calls, so a script always takes effect before the commands that follow
   * it (a settle before the next admission); Redis that forgot the script (a restart) gets it whole again.
   */
  async script(name: ScriptName, keys: string[], args: (string | number)[]): Promise<RedisReply> {
    const parameters = [String(keys.length), ...keys, ...args.map(String)];
    const script = scripts[name];
    if (!this.sent.has(name)) {
      this.sent.add(name);
      return (await this.call("EVAL", [script.source, ...parameters])) as RedisReply;
    }
    try {
      return (await this.call("EVALSHA", [script.sha, ...parameters])) as RedisReply;
    } catch (error) {
      if (!String((error as Error).message).includes("NOSCRIPT")) throw error;
      return (await this.call("EVAL", [script.source, ...parameters])) as RedisReply;
    }
  }

  /** One command with a deadline; a closed connection fails at once. */
  call(command: string, args: string[]): Promise<unknown> {
    if (!this.client.connected) return Promise.reject(new RedisUnavailableError(`Redis at ${this.url} is not connected`));
    return withTimeout(this.client.send(command, args), redisTimeoutMs, "Redis");
  }

  get connected(): boolean {
    return this.client.connected;
  }

  async subscribe(channel: string, listener: (message: string) => void): Promise<void> {
    if (!this.subscriber) {
      this.subscriber = new RedisClient(this.url, { enableOfflineQueue: true, autoReconnect: true, maxRetries: 1_000_000 });
      await this.subscriber.connect().catch(() => {});
    }
    await this.subscriber.subscribe(channel, (message) => listener(message)).catch(() => {});
  }

  async serverVersion(): Promise<string> {
    const info = String(await this.call("INFO", ["server"]));
    return /redis_version:([^\r\n]+)/.exec(info)?.[1] ?? "unknown";
  }

  close(): void {
    this.closed = true;
    this.client.close();
    this.subscriber?.close();
  }

  private connect(): RedisClient {
    const client = new RedisClient(this.url, { enableOfflineQueue: false, autoReconnect: true, maxRetries: 1_000_000, connectionTimeout: 2000 });
    client.onclose = () => {
      // Bun gives up after its retries (or an idle timeout): keep trying, once a second, for as long as we run.
      if (this.closed) return;
      setTimeout(() => {
        if (!this.closed && !client.connected) client.connect().catch(() => {});
      }, 1000).unref();
    };
    client.connect().catch(() => {});
    return client;
  }
}

/**
 * The change epoch: a random value that every change to keys, organizations or usage resets replaces. An instance
 * reads it before authenticating requests (once per turn of its event loop, see AuthService) and drops its caches
 * when it moved, so a revocation through any instance or the CLI applies to the very next request everywhere. (A
 * random value rather than a counter: a Redis that restarted empty cannot bring back the value an instance last saw.)
 */
export function redisChangeFeed(redis: RedisConnection): ChangeFeed {
  const listeners: (() => void | Promise<void>)[] = [];
  let seen: string | null | undefined;
  return {
    onChange(listener) {
      listeners.push(listener);
    },
    async check() {
      const epoch = (await redis.call("GET", [epochKey])) as string | null;
      if (epoch === seen) return;
      const first = seen === undefined;
      seen = epoch;
      if (!first) await Promise.all(listeners.map((listener) => listener()));
    },
    async announce() {
      await redis.call("SET", [epochKey, crypto.randomUUID()]);
    },
  };
}
