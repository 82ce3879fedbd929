import type { Config } from "./config/schema";
import type { DatabaseHandle } from "./db/client";
import { createApp } from "./http/app";
import { Ledger } from "./ledger/ledger";
import { AuthService } from "./modules/auth/service";
import { ChatService } from "./modules/chat/service";
import { ModelRegistry } from "./modules/models/registry";
import { loadTokenizer } from "./tokens/count";

export interface ServerOptions {
  config: Config;
  database: DatabaseHandle;
  hostname?: string;
  port?: number;
  maxBodyBytes?: number;
  environment?: Record<string, string | undefined>;
}

export interface RunningServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

export const defaultMaxBodyBytes = 10 * 1024 * 1024;

/** Builds every service over one database and starts listening. */
export function startServer(options: ServerOptions): RunningServer {
  const plans = new Map(options.config.plans.map((plan) => [plan.id, plan]));
  const auth = new AuthService(options.database, plans);
  const models = new ModelRegistry(options.config, options.environment);
  const ledger = new Ledger(options.database.sqlite);
  const chat = new ChatService(models, ledger);
  const maxBodyBytes = options.maxBodyBytes ?? defaultMaxBodyBytes;
  const app = createApp({ auth, models, chat, maxBodyBytes }).listen({
    hostname: options.hostname ?? "127.0.0.1",
    port: options.port ?? 8080,
    idleTimeout: 30,
    // Bun's own limit only guards memory; the route answers 413 in the OpenAI format below it.
    maxRequestBodySize: maxBodyBytes + 1024 * 1024,
  });
  void loadTokenizer();
  const server = app.server;
  if (!server) throw new Error("server did not start");
  return {
    url: `http://${server.hostname}:${server.port}`,
    port: server.port as number,
    async stop() {
      await app.stop(true);
      ledger.flush();
      auth.close();
    },
  };
}
