import { loadConfig } from "../config/load";
import { openDatabase } from "../db/client";
import { startServer } from "../server";
import { parseCommand } from "./usage";

/** `sluice serve`: listens on SLUICE_HOST:SLUICE_PORT until SIGINT or SIGTERM. */
export function runServe(args: string[]): void {
  parseCommand(args, {}, 0);
  const config = loadConfig();
  const database = openDatabase();
  const server = startServer({
    config,
    database,
    hostname: process.env.SLUICE_HOST ?? "127.0.0.1",
    port: Number(process.env.SLUICE_PORT ?? 8080),
  });
  console.error(JSON.stringify({ level: "info", message: "sluice listening", url: server.url, models: config.models.map((model) => model.id) }));
  const stop = async () => {
    await server.stop();
    database.close();
    process.exit(0);
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}
