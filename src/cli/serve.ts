import { serveSettings } from "../config/environment";
import { anyChange, type ConfigChanges } from "../config/changes";
import { loadConfig } from "../config/load";
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
    await server.stop({ drainMs });
    await storage.close();
    redis?.close();
    console.error(JSON.stringify({ level: "info", message: "stopped" }));
    process.exit(0);
  };
  const reload = async (trigger: ReloadTrigger) => {
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
    const message = anyChange(changes) ? "configuration reloaded" : "configuration reloaded: nothing changed";
    console.error(JSON.stringify({ level: "info", message, trigger, models: next.models.map((model) => model.id), changes }));
  };
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
