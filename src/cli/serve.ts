import { serveSettings } from "../config/environment";
import { loadConfig } from "../config/load";
import { Logger } from "../modules/observability/logger";
import { startServer } from "../server";
import { openBackends } from "../storage/open";
import { parseCommand } from "./usage";

/** `sluice serve`: listens on SLUICE_HOST:SLUICE_PORT until SIGINT or SIGTERM. */
export async function runServe(args: string[]): Promise<number> {
  parseCommand(args, {}, 0);
  const settings = serveSettings();
  const config = loadConfig();
  const { storage, redis } = await openBackends();
  const server = await startServer({
    config,
    storage,
    redis,
    hostname: settings.hostname,
    port: settings.port,
    metricsToken: settings.metricsToken,
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
    }),
  );
  const { drainMs } = settings;
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.error(JSON.stringify({ level: "info", message: "draining", signal, drain_ms: drainMs }));
    await server.stop({ drainMs });
    await storage.close();
    redis?.close();
    console.error(JSON.stringify({ level: "info", message: "stopped" }));
    process.exit(0);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
  return 0;
}
