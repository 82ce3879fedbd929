// Shared mode: a SIGHUP to one instance reloads every instance. The instance that reloaded records the reload's id in
// Redis and announces it (pub/sub, at once); every instance also reads the last id every few seconds, so that one
// which was not listening when an announcement went out (disconnected from Redis, its subscription being restored)
// still reloads.
import { keyPrefix, type RedisConnection } from "../storage/redis";

/** The channel announcements go out on: the announcing instance's id and the reload's. */
export const reloadChannel = `${keyPrefix}config-reload`;
/** The id of the last reload announced. */
export const lastReloadKey = `${keyPrefix}config-reload:last`;
/** How often each instance reads the last reload's id: the longest one that missed an announcement runs the old file. */
const defaultCheckEveryMs = 5000;
/** How long a start waits for its subscription. */
const subscribeWaitMs = 2000;

/** What made an instance read its file: its own SIGHUP, another's announced, or another's it did not hear. */
export type ReloadTrigger = "SIGHUP" | "SIGHUP to another instance" | "SIGHUP to another instance, missed while not listening";

/** One instance's side of the announcements: it announces its own reloads, and reloads for the others'. */
export class ReloadAnnouncements {
  private readonly instance = crypto.randomUUID();
  /**
   * The last reload this instance has acted on (or knew of when it started; its file is newer than those): null when
   * Redis holds none, undefined until Redis could first be read.
   */
  private seen: string | null | undefined;
  private timer: Timer | undefined;
  /** A reload of this instance's own that Redis could not be told of yet: told at the next check that reaches it. */
  private untold: string | undefined;

  constructor(
    private readonly redis: RedisConnection,
    private readonly reload: (trigger: ReloadTrigger) => Promise<void>,
    private readonly checkEveryMs = defaultCheckEveryMs,
  ) {}

  /**
   * Starts listening and checking. Waits a moment at most for the subscription: a Redis that is down at start must not
   * hold the server's start (its subscription is made once Redis is back; the checks cover what it misses meanwhile).
   */
  async start(): Promise<void> {
    this.seen = await this.last();
    const subscribing = this.redis.subscribe(reloadChannel, (message) => {
      // An instance of an earlier version, in a rolling upgrade, announces its id alone.
      const [origin, reloadId] = message.split(" ");
      // Its own, or one a check has already acted on (the id is recorded before it is announced).
      if (origin === this.instance || (reloadId !== undefined && reloadId === this.seen)) return;
      if (reloadId !== undefined) this.seen = reloadId;
      void this.reload("SIGHUP to another instance");
    });
    await Promise.race([subscribing, Bun.sleep(subscribeWaitMs)]);
    this.timer = setInterval(() => void this.check(), this.checkEveryMs);
    this.timer.unref();
  }

  /**
   * Records and announces a reload this instance made on its own SIGHUP. If Redis cannot be reached now, the checks
   * try again until it can: the other instances then reload, late rather than never.
   */
  async announce(): Promise<void> {
    const reloadId = crypto.randomUUID();
    this.seen = reloadId;
    this.untold = reloadId;
    await this.tell();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Tells Redis of this instance's own reload, if it has one untold; on failure, the next check tries again. */
  private async tell(): Promise<void> {
    const reloadId = this.untold;
    if (reloadId === undefined) return;
    try {
      await this.redis.call("SET", [lastReloadKey, reloadId]);
      await this.redis.call("PUBLISH", [reloadChannel, `${this.instance} ${reloadId}`]);
    } catch {
      return;
    }
    if (this.untold === reloadId) this.untold = undefined;
    this.seen = reloadId;
  }

  /**
   * Reloads once if a reload was announced that this instance did not hear; then tells of its own untold one. In that
   * order: another instance's reload announced while this one was cut off is not hidden by this one's.
   */
  private async check(): Promise<void> {
    const last = await this.last();
    if (last !== undefined && last !== this.seen) {
      const known = this.seen !== undefined;
      this.seen = last;
      // Not read before (Redis was down at start): the file this instance started with is the newest it knows of.
      // And none recorded (Redis lost its data) is no reload.
      if (known && last !== null) await this.reload("SIGHUP to another instance, missed while not listening");
    }
    await this.tell();
  }

  /** The last reload's id; null when there is none, undefined when Redis cannot be read. */
  private async last(): Promise<string | null | undefined> {
    try {
      const value = await this.redis.call("GET", [lastReloadKey]);
      return typeof value === "string" ? value : null;
    } catch {
      return undefined;
    }
  }
}
