import { configChanges, type ConfigChanges } from "./config/changes";
import type { Config, ModelConfig, SsoConfig } from "./config/schema";
import { createApp } from "./http/app";
import { ClientAddresses } from "./http/client-address";
import { Cors } from "./http/cors";
import { raiseListenBacklog } from "./http/listen-backlog";
import { MemoryAdmissionStore } from "./modules/admission/memory-store";
import { RedisAdmissionStore } from "./modules/admission/redis-store";
import { LeaseKeeper } from "./modules/admission/lease-keeper";
import { syncAdmissionWithLedger } from "./modules/admission/service";
import type { AdmissionStore } from "./modules/admission/store";
import { AuthService } from "./modules/auth/service";
import { AuditLog, type AuditActor } from "./modules/audit/service";
import { AccountService } from "./modules/console/accounts";
import { ConsoleService } from "./modules/console/service";
import { SingleSignOn, ssoSettingsOf } from "./modules/console/sso";
import { networkList } from "./modules/keys/networks";
import { KeyService } from "./modules/keys/service";
import { OrganizationService } from "./modules/organizations/service";
import { ChatService } from "./modules/chat/service";
import { RequestLogService } from "./modules/requests/service";
import { ModelRegistry } from "./modules/models/registry";
import type { Lifecycle } from "./modules/observability/index";
import { Logger } from "./modules/observability/logger";
import { LedgerRetention } from "./ledger/retention";
import { EmbeddingsService } from "./modules/embeddings/service";
import { Metrics } from "./modules/observability/metrics";
import { registerQuotaGauges } from "./modules/observability/quota-gauges";
import type { QueueObserver } from "./modules/queue/fair-line";
import { ModelQueue, type Queue } from "./modules/queue/model-queue";
import { SharedModelQueue } from "./modules/queue/shared-model-queue";
import { SafetyService } from "./modules/safety/service";
import type { RedisConnection } from "./storage/redis";
import type { TracingSettings } from "./tracing/settings";
import { Tracer } from "./tracing/tracer";
import type { Storage } from "./storage/types";

export interface ServerOptions {
  config: Config;
  storage: Storage;
  /** Shared mode: admission state and model slots in Redis, for every instance at once. */
  redis?: RedisConnection;
  hostname?: string;
  port?: number;
  maxBodyBytes?: number;
  environment?: Record<string, string | undefined>;
  /** Milliseconds since the epoch; tests inject a controllable clock. */
  clock?: () => number;
  logger?: Logger;
  metricsToken?: string;
  /** Seconds a connection may stay silent (a client trickling its body included); chat answers are exempt. */
  idleTimeoutSeconds?: number;
  /** How long an Anthropic stream may stay silent before a `ping` event is sent. */
  heartbeatMs?: number;
  /** Where and which requests' spans are exported (src/tracing); none without. */
  tracing?: TracingSettings;
  /** The proxies whose `X-Forwarded-For` names a caller's address (see ClientAddresses); none without. */
  trustedProxies?: readonly string[];
  /** The web pages' origins that may call the API (src/http/cors.ts); none without. */
  corsOrigins?: { any: boolean; origins: readonly string[] };
  /** Every request's log line names its caller's address; otherwise only keys bound to networks have it. */
  logClientAddresses?: boolean;
}

export interface RunningServer {
  url: string;
  port: number;
  admission: AdmissionStore;
  queues: ReadonlyMap<string, Queue>;
  models: ModelRegistry;
  metrics: Metrics;
  /** Connections the kernel holds for this server before it accepts them (src/http/listen-backlog.ts). */
  acceptQueue: number;
  /** Deletes the ledger's rows past `[ledger] retention_days`, every hour (and when a test asks). */
  retention: LedgerRetention;
  /**
   * Serves a new configuration from the next request on: models (added, removed, changed: a changed model gets new
   * upstream connections), their concurrency limits and queues, plans and the red-line rules. Requests under way
   * finish under the configuration they started with. Records what changed in the audit trail, as `actor`.
   */
  reconfigure(config: Config, actor: AuditActor): Promise<ConfigChanges>;
  /**
   * Stops gracefully: new requests get 503 and /readyz turns 503 at once; requests in flight may finish for up to
   * `drainMs`; the rest are ended cleanly (a stream gets a final error event); everything is settled and the
   * ledger committed.
   */
  stop(options?: { drainMs?: number }): Promise<void>;
}

/** The address in SLUICE_HOST and SLUICE_PORT cannot be listened on: a name that does not resolve, an address not this machine's. */
export class ListenError extends Error {
  override name = "ListenError";
}

/** `sluice serve` could not listen: another process (often another Sluice) has the address. */
export class PortInUseError extends ListenError {
  override name = "PortInUseError";
  constructor(hostname: string, port: number) {
    super(`${hostname}:${port} is already in use (is another sluice serve running?); set SLUICE_PORT or SLUICE_HOST to another address`);
  }
}

export const defaultMaxBodyBytes = 10 * 1024 * 1024;
const settleWaitMs = 5000;
const defaultHeartbeatMs = 5000;

async function waitUntil(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition() && Date.now() < deadline) await Bun.sleep(5);
}

/** Builds every service over the storage (and Redis, in shared mode) and starts listening. */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const clock = options.clock ?? Date.now;
  const { storage, redis } = options;
  let config = options.config;
  // Shared by the services that read plans, and filled again when the configuration is reloaded.
  const plans = new Map(config.plans.map((plan) => [plan.id, plan]));
  const logger = options.logger ?? new Logger();
  const models = new ModelRegistry(config, options.environment);
  // One keeper renews every lease this instance holds: organizations' concurrency leases and model slots.
  const keeper = redis ? new LeaseKeeper(redis) : undefined;
  // Told only of requests that had to wait: a request that finds a slot free costs nothing here.
  const observeWait: QueueObserver = (model, result, seconds) => {
    metrics.queueWaits.inc({ model, result });
    if (result === "granted") metrics.queueWait.observe({ model }, seconds);
  };
  const newQueue = (model: ModelConfig): Queue =>
    redis && keeper ? new SharedModelQueue(model, redis, keeper, observeWait) : new ModelQueue(model, observeWait);
  // A model removed by a reload keeps its queue: requests under way release their slots to it.
  const queues = new Map<string, Queue>(config.models.map((model) => [model.id, newQueue(model)]));
  const metrics = new Metrics(queues, () => models.servers());
  const tracer = new Tracer(options.tracing, logger, (result, spans) => metrics.traceSpans.inc({ result }, spans));
  // At 0 from the start when tracing is on, so that an alert on failed or dropped spans sees their first increase.
  if (tracer.enabled) for (const result of ["exported", "failed", "dropped"]) metrics.traceSpans.inc({ result }, 0);
  // A failed commit refuses its rows' requests (503); the database's own error is the operator's clue, logged once a commit.
  const ledger = storage.openLedger((error, rows) => {
    metrics.ledgerRefusedRows.inc(rows);
    logger.log("error", { message: "ledger rows not recorded", rows, error: String((error as Error | undefined)?.stack ?? error) });
  });
  const retention = new LedgerRetention({
    requestLog: storage.requestLog,
    retentionDays: () => config.ledger.retentionDays,
    clock,
    deleted: (rows, before) => {
      metrics.ledgerDeletedRows.inc(rows);
      logger.log("info", { message: "ledger rows past their retention deleted", rows, ended_before: new Date(before).toISOString() });
    },
    failed: (error) => logger.log("warn", { message: "ledger retention stopped; it goes on within the hour", error: String(error) }),
  });
  retention.start();
  const addresses = new ClientAddresses(options.trustedProxies && networkList(options.trustedProxies), (peer) =>
    logger.log("warn", {
      message:
        "a request came with X-Forwarded-For from an address SLUICE_TRUSTED_PROXIES does not name: if it is a proxy, name it there, or keys bound to networks, sign-in limits and the audit trail see the proxy's address",
      peer,
    }),
  );
  const auth = new AuthService(storage.keys, storage.changes, plans, (entries) => ledger.touchKeys(entries), addresses);
  const organizationRate = async (organizationId: string) => {
    const organization = await storage.organizations.findById(organizationId);
    return organization ? plans.get(organization.plan)?.requestsPerMinute : undefined;
  };
  const admission: AdmissionStore = redis ? new RedisAdmissionStore(redis, storage.usage, storage.keys, keeper, organizationRate) : new MemoryAdmissionStore();
  await syncAdmissionWithLedger(admission, storage, ledger, clock);
  const safety = new SafetyService(config.safety, options.environment);
  const lifecycle: Lifecycle = { draining: false, openAnswers: 0 };
  const chat = new ChatService({ models, ledger, admission, queues, safety, clock, metrics, ledgerAvailable: () => storage.available() });
  const embeddings = new EmbeddingsService({ models, ledger, admission, queues, clock, metrics, ledgerAvailable: () => storage.available() });
  const maxBodyBytes = options.maxBodyBytes ?? defaultMaxBodyBytes;
  const audit = new AuditLog(storage.audit);
  const organizations = new OrganizationService(storage.organizations, plans, audit, storage.changes);
  registerQuotaGauges(metrics, { organizations: storage.organizations, keys: storage.keys, changes: storage.changes, plans, admission, clock });
  const keys = new KeyService(storage.keys, audit, storage.changes);
  const accounts = new AccountService(storage.accounts, audit);
  // The console's single sign-on: made again only when a reload changes [console.sso], so that the provider's
  // discovery document and keys, fetched once, outlive the reloads that change something else.
  let sso: { config: SsoConfig | undefined; client: SingleSignOn | undefined } = { config: undefined, client: undefined };
  function singleSignOn(): SingleSignOn | undefined {
    const current = config.console.sso;
    if (current !== sso.config && !Bun.deepEquals(current, sso.config)) {
      sso = { config: current, client: current && new SingleSignOn(ssoSettingsOf(current, options.environment)) };
    }
    return sso.client;
  }
  const consoleService = new ConsoleService({
    accounts,
    organizations,
    keys,
    auth,
    admission,
    models,
    queues,
    plans,
    usage: storage.usage,
    requestLog: new RequestLogService(storage.requestLog),
    audit,
    clock,
    // A reloaded configuration's from then on.
    signUpOpen: () => config.console.signUp,
    singleSignOn,
    consoleNetworks: () => config.console.networks,
  });
  /** Everything the services hold (threads, timers, connections' batches), let go once nothing is in flight. */
  const closeServices = async (): Promise<void> => {
    auth.close();
    await retention.close();
    await ledger.close();
    // Before the keeper stops renewing: what they deliver meanwhile still holds its lease.
    await Promise.all([admission.close?.(), ...[...queues.values()].map((queue) => queue.close?.())]);
    keeper?.close();
    // Last: the spans of requests that ended in the drain go too.
    await tracer.flush();
    logger.flush();
  };
  const hostname = options.hostname ?? "127.0.0.1";
  const port = options.port ?? 8080;
  const app = createApp({
    auth,
    models,
    chat,
    embeddings,
    maxBodyBytes,
    heartbeatMs: options.heartbeatMs ?? defaultHeartbeatMs,
    metrics,
    logger,
    readiness: async () => [...(await storage.problems()), ...((await admission.problems?.()) ?? [])],
    lifecycle,
    metricsToken: options.metricsToken,
    tracer,
    console: { service: consoleService, accounts },
    cors: options.corsOrigins && new Cors(options.corsOrigins.any, options.corsOrigins.origins),
    logClientAddresses: options.logClientAddresses ?? false,
  });
  try {
    app.listen({
      hostname,
      port,
      idleTimeout: options.idleTimeoutSeconds ?? 30,
      development: false,
      // Every body is read through readBodyText, which answers 413 in the caller's error format at Sluice's limit and
      // never holds more; a limit of Bun's own would answer first, with an empty body that no SDK can read.
      maxRequestBodySize: Number.MAX_SAFE_INTEGER,
      // Elysia turns SO_REUSEPORT on by default: a second `sluice serve` on a port already served (an old process
      // still draining, a typo in a unit file) would then start without a word and take half the connections, with
      // admission state of its own on SQLite, so every limit would count twice. Refused instead (PortInUseError).
      reusePort: false,
    });
  } catch (error) {
    await closeServices();
    if ((error as { code?: unknown })?.code === "EADDRINUSE") throw new PortInUseError(hostname, port);
    throw new ListenError(`cannot listen on ${hostname}:${port}: ${(error as Error).message} (set SLUICE_HOST to an address of this machine)`);
  }
  const server = app.server;
  if (!server) throw new Error("server did not start");
  const acceptQueue = await raiseListenBacklog(server.port as number);
  return {
    url: `http://${server.hostname}:${server.port}`,
    port: server.port as number,
    admission,
    queues,
    models,
    metrics,
    acceptQueue,
    retention,
    async reconfigure(next, actor) {
      const { changes, audited: fields } = configChanges(config, next);
      let audited = fields;
      // First: it reads the models' key files, and one that became unreadable since the file was checked refuses the
      // reload before anything else changed.
      for (const id of models.reconfigure(next)) {
        // A key rotated in its file: the trail says so, never what it was or is.
        changes.models.changed.push(id);
        audited = { ...audited, [`model ${id} api key`]: ["(hidden)", "(hidden, changed)"] };
      }
      safety.reconfigure(next.safety);
      config = next;
      for (const model of next.models) {
        const queue = queues.get(model.id);
        if (queue) queue.reconfigure(model);
        else queues.set(model.id, newQueue(model));
      }
      plans.clear();
      for (const plan of next.plans) plans.set(plan.id, plan);
      // Cached callers hold their plan.
      auth.invalidate();
      if (audited) {
        // The new configuration is in force either way: a trail that cannot be written is the operator's to hear of.
        await audit.record(actor, "config.reloaded", "configuration", { changes: audited }).catch((error: unknown) => {
          logger.log("error", { message: "configuration reload not recorded in the audit trail", error: String(error) });
        });
      }
      return changes;
    },
    async stop({ drainMs = 0 } = {}) {
      lifecycle.draining = true;
      const inFlight = () => chat.inFlight() + embeddings.inFlight();
      await waitUntil(() => inFlight() === 0, drainMs);
      chat.abortAll();
      embeddings.abortAll();
      await waitUntil(() => inFlight() === 0, settleWaitMs);
      // A settled answer still waits for its ledger commit before its last bytes go out.
      await waitUntil(() => lifecycle.openAnswers === 0, settleWaitMs);
      await app.stop(true);
      await waitUntil(() => admission.inFlight() === 0, settleWaitMs);
      await closeServices();
    },
  };
}
