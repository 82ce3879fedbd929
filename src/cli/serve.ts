import { serveSettings } from "../config/environment";
import { anyChange, type ConfigChanges } from "../config/changes";
import { loadConfig } from "../config/load";
import { KeyFileWatch, keyFilesOf } from "../config/key-file-watch";
import { checkKeyFiles } from "../config/secrets";
import type { Config } from "../config/schema";
import { Logger } from "../modules/observability/logger";
import { startServer } from "../server";
import { openBackends } from "../storage/open";
import { ReloadAnnouncements, type ReloadTrigger } from "../config/reload-announcements";
import { shownEndpoint } from "../tracing/settings";
import { parseCommand } from "./usage";

/**
 * `sluice serve`: listens on SLUICE_HOST:SLUICE_PORT until SIGINT or SIGTERM; SIGHUP reads the configuration file
 * again and serves it from the next request on, or keeps the one in force if the file is not valid. In shared mode
 * the other instances are told, and each does the same with its own file.
 */
export async function runServe(args: string[]): Promise<number> {
  parseCommand(args, {}, 0);
  const settings = serveSettings();
  const config = loadConfig();
  checkKeyFiles(config);
  const { storage, redis } = await openBackends();
  const server = await startServer({
    config,
    storage,
    redis,
    hostname: settings.hostname,
    port: settings.port,
    metricsToken: settings.metricsToken,
    tracing: settings.tracing,
    trustedProxies: settings.trustedProxies,
    corsOrigins: settings.corsOrigins,
    logClientAddresses: settings.logClientAddresses,
    logger: new Logger(settings.logLevel),
  }).catch(async (error: unknown) => {
    await storage.close();
    redis?.close();
    throw error;
  });
  console.error(
    JSON.stringify({
      level: "info",
      message: "sluice listening",
      url: server.url,
      models: config.models.map((model) => model.id),
      mode: redis ? "shared (PostgreSQL + Redis)" : "SQLite",
      accept_queue: server.acceptQueue,
      traces: settings.tracing ? shownEndpoint(settings.tracing) : null,
    }),
  );
  const { drainMs } = settings;
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.error(JSON.stringify({ level: "info", message: "draining", signal, drain_ms: drainMs }));
    announcements?.stop();
    keyFiles?.stop();
    await server.stop({ drainMs });
    await storage.close();
    redis?.close();
    console.error(JSON.stringify({ level: "info", message: "stopped" }));
    process.exit(0);
  };
  // Reloads and key refreshes one at a time: each reconfigures the server from what it read. One that failed does not
  // stop the next.
  let applying: Promise<void> = Promise.resolve();
  const serially = (work: () => Promise<void>): Promise<void> => {
    const run = applying.then(work);
    applying = run.catch(() => undefined);
    return run;
  };
  /** The configuration in force: the start's, or the last one a reload applied. */
  let current = config;
  const reload = (trigger: ReloadTrigger) => serially(() => reloadNow(trigger));
  const reloadNow = async (trigger: ReloadTrigger) => {
    if (stopping) return;
    let next: Config;
    try {
      next = loadConfig();
      checkKeyFiles(next);
    } catch (error) {
      server.metrics.configReloads.inc({ result: "refused" });
      console.error(JSON.stringify({ level: "error", message: "configuration not reloaded; the one in force stays", error: (error as Error).message }));
      return;
    }
    let changes: ConfigChanges;
    try {
      changes = await server.reconfigure(next, { kind: "server", name: trigger });
    } catch (error) {
      // A signal's handler must not end the server: a rejection nobody awaits would.
      server.metrics.configReloads.inc({ result: "failed" });
      console.error(JSON.stringify({ level: "error", message: "configuration reload failed", error: String((error as Error)?.stack ?? error) }));
      return;
    }
    server.metrics.configReloads.inc({ result: "applied" });
    current = next;
    // The reload read the key files as they are now.
    keyFiles?.remember();
    const message = anyChange(changes) ? "configuration reloaded" : "configuration reloaded: nothing changed";
    console.error(JSON.stringify({ level: "info", message, trigger, models: next.models.map((model) => model.id), changes }));
  };
  // A key file rotated in place (a Kubernetes secret, Vault Agent): the keys are read again, as a reload reads them, and
  // the configuration in force is kept (its own file is read only at a SIGHUP).
  const refreshKeys = async () => {
    if (stopping) return;
    try {
      checkKeyFiles(current);
    } catch (error) {
      console.error(
        JSON.stringify({ level: "error", message: "a key file changed but cannot be used; the key in force stays", error: (error as Error).message }),
      );
      return;
    }
    try {
      const changes = await server.reconfigure(current, { kind: "server", name: "key file changed" });
      if (changes.models.changed.length > 0)
        console.error(JSON.stringify({ level: "info", message: "upstream keys read again", models: changes.models.changed }));
    } catch (error) {
      console.error(JSON.stringify({ level: "error", message: "upstream keys not read again", error: String((error as Error)?.stack ?? error) }));
    }
  };
  const keyFiles =
    settings.keyFileCheckMs > 0
      ? new KeyFileWatch(
          () => keyFilesOf(current),
          () => void serially(refreshKeys),
          settings.keyFileCheckMs,
        )
      : undefined;
  // Each instance announces its own SIGHUP once it has reloaded, whatever its file said: the others read theirs. A
  // reload an announcement caused is not announced again.
  const announcements = redis ? new ReloadAnnouncements(redis, reload) : undefined;
  await announcements?.start();
  process.on("SIGHUP", () => {
    void reload("SIGHUP").then(() => announcements?.announce());
  });
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
  return 0;
}
