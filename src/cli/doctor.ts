import { serveSettings } from "../config/environment";
import { type ConfigError, loadConfig } from "../config/load";
import type { Config, ModelConfig } from "../config/schema";
import { readSecret } from "../config/secrets";
import { openDatabase } from "../db/client";
import { postgresMigrations } from "../db/postgres/migrations/index";
import { isPostgresUrl } from "../storage/mode";
import { shownEndpoint, type TracingSettings } from "../tracing/settings";
import { redactUrl } from "../storage/open";
import { RedisConnection } from "../storage/redis";
import { withTimeout } from "../storage/with-timeout";
import { accessHeaders, upstreamUrl } from "../upstream/endpoint";
import { isUntrustedCertificate } from "../upstream/errors";

interface Finding {
  ok: boolean;
  text: string;
}

async function checkUpstream(model: ModelConfig, baseUrl: string): Promise<Finding> {
  const id = model.id;
  let apiKey: string | undefined;
  try {
    apiKey = readSecret({ env: model.apiKeyEnv, file: model.apiKeyFile }, `model ${id}: api_key_file`);
  } catch (error) {
    return { ok: false, text: (error as Error).message };
  }
  try {
    const response = await fetch(upstreamUrl(baseUrl, "/models"), { headers: accessHeaders(model, apiKey), signal: AbortSignal.timeout(3000) });
    await response.arrayBuffer();
    if (response.status === 401 || response.status === 403)
      return {
        ok: false,
        text: `model ${id}: ${baseUrl} answers but refuses the key (HTTP ${response.status}); check its ${model.apiKeyFile ? "api_key_file" : "api_key_env"}`,
      };
    if (response.status >= 500) return { ok: false, text: `model ${id}: ${baseUrl} answers with HTTP ${response.status}` };
    return { ok: true, text: `model ${id}: ${baseUrl} reachable (HTTP ${response.status})` };
  } catch (error) {
    const reason = (error as Error).name === "TimeoutError" ? "no answer within 3 s" : (error as Error).message;
    const hint = isUntrustedCertificate(error)
      ? "; if its certificate comes from a private CA, start Sluice (and this command) with NODE_EXTRA_CA_CERTS=/path/to/ca.pem"
      : "";
    return { ok: false, text: `model ${id}: cannot reach ${baseUrl} (${reason})${hint}` };
  }
}

/** Whether the collector takes an (empty) OTLP JSON export with the configured headers. */
async function checkCollector(settings: TracingSettings): Promise<Finding> {
  const shown = shownEndpoint(settings);
  try {
    const response = await fetch(settings.endpoint, {
      method: "POST",
      headers: { ...settings.headers, "content-type": "application/json" },
      body: JSON.stringify({ resourceSpans: [] }),
      signal: AbortSignal.timeout(3000),
      redirect: "manual",
    });
    await response.arrayBuffer();
    if (response.ok) return { ok: true, text: `traces: the collector at ${shown} takes OTLP/JSON (HTTP ${response.status})` };
    if (response.status === 401 || response.status === 403)
      return { ok: false, text: `traces: ${shown} refuses the export (HTTP ${response.status}); check OTEL_EXPORTER_OTLP_HEADERS` };
    return { ok: false, text: `traces: ${shown} answers HTTP ${response.status}; is it a collector's OTLP HTTP receiver (port 4318, /v1/traces)?` };
  } catch (error) {
    const reason = (error as Error).name === "TimeoutError" ? "no answer within 3 s" : (error as Error).message;
    return { ok: false, text: `traces: cannot reach ${shown} (${reason}); spans would be counted as failed` };
  }
}

function checkSqlite(config: Config | undefined, findings: Finding[]): void {
  try {
    const database = openDatabase();
    const integrity = database.sqlite
      .query<{ integrity_check: string }, []>("PRAGMA integrity_check")
      .all()
      .map((row) => row.integrity_check);
    findings.push(
      integrity.join() === "ok"
        ? { ok: true, text: "database: integrity ok" }
        : { ok: false, text: `database: integrity problems: ${integrity.slice(0, 5).join("; ")}` },
    );
    if (config) {
      const rows = database.sqlite.query<{ name: string; plan: string }, []>("SELECT name, plan FROM organizations").all();
      findings.push(...orphanFindings(config, rows));
    }
    database.close();
  } catch (error) {
    findings.push({ ok: false, text: `database: ${(error as Error).message}` });
  }
}

function orphanFindings(config: Config, organizations: { name: string; plan: string }[]): Finding[] {
  const plans = new Set(config.plans.map((plan) => plan.id));
  return organizations
    .filter((row) => !plans.has(row.plan))
    .map((orphan) => ({ ok: false, text: `organization ${orphan.name}: its plan "${orphan.plan}" is not in the configuration; its keys get 403` }));
}

/** Reachable, its version, and whether this build's migrations are all applied (without applying any). */
async function checkPostgres(url: string, config: Config | undefined, findings: Finding[]): Promise<void> {
  const sql = new Bun.SQL(url, { connectionTimeout: 3, max: 1 });
  try {
    const [version] = (await withTimeout(sql`SHOW server_version`, 3000, "PostgreSQL")) as { server_version: string }[];
    findings.push({ ok: true, text: `PostgreSQL: ${redactUrl(url)} reachable, version ${version?.server_version ?? "unknown"}` });
    const [table] = (await sql`SELECT to_regclass('sluice_migrations') AS name`) as { name: string | null }[];
    const applied = table?.name ? ((await sql`SELECT tag FROM sluice_migrations`) as { tag: string }[]).map((row) => row.tag) : [];
    const known = postgresMigrations.map((migration) => migration.tag);
    const missing = known.filter((tag) => !applied.includes(tag));
    const unknown = applied.filter((tag) => !known.includes(tag));
    if (unknown.length > 0)
      findings.push({ ok: false, text: `PostgreSQL: migrated by a newer Sluice (${unknown.join(", ")}); this build refuses to start on it` });
    else if (missing.length > 0)
      findings.push({ ok: false, text: `PostgreSQL: migrations not applied yet (${missing.join(", ")}); \`sluice serve\` applies them at start` });
    else findings.push({ ok: true, text: `PostgreSQL: all ${known.length} migration(s) applied` });
    if (config && missing.length === 0)
      findings.push(...orphanFindings(config, (await sql`SELECT name, plan FROM organizations`) as { name: string; plan: string }[]));
  } catch (error) {
    findings.push({
      ok: false,
      text: `PostgreSQL: cannot use ${redactUrl(url)} (${(error as Error).message}); is the server running and the database created?`,
    });
  } finally {
    await sql.close({ timeout: 1 }).catch(() => {});
  }
}

async function checkRedis(url: string | undefined, findings: Finding[]): Promise<void> {
  if (!url) {
    findings.push({
      ok: false,
      text: "Redis: SLUICE_REDIS_URL is not set; with PostgreSQL, Sluice needs Redis too (shared mode) and will not start without it",
    });
    return;
  }
  const redis = new RedisConnection(url);
  try {
    const deadline = Date.now() + 3000;
    while (!redis.connected && Date.now() < deadline) await Bun.sleep(20);
    const version = await redis.serverVersion();
    const [major = 0, minor = 0] = version.split(".").map(Number);
    findings.push(
      major > 6 || (major === 6 && minor >= 2)
        ? { ok: true, text: `Redis: ${redactUrl(url)} reachable, version ${version}` }
        : { ok: false, text: `Redis: version ${version} is too old; Sluice's scripts need 6.2 or newer` },
    );
  } catch (error) {
    findings.push({ ok: false, text: `Redis: cannot reach ${redactUrl(url)} (${(error as Error).message}); is redis-server running?` });
  } finally {
    redis.close();
  }
}

/**
 * `sluice doctor`: checks the configuration, the database (SQLite's integrity, or PostgreSQL and Redis), and that
 * every upstream answers, and says in plain words what is wrong. Exit status 1 when something is.
 */
export async function runDoctor(): Promise<number> {
  const findings: Finding[] = [];
  let config: Config | undefined;
  try {
    config = loadConfig();
    findings.push({ ok: true, text: `configuration: ${config.models.length} model(s), ${config.plans.length} plan(s)` });
  } catch (error) {
    findings.push({ ok: false, text: `configuration: ${(error as ConfigError).message}` });
  }
  try {
    const settings = serveSettings();
    findings.push({ ok: true, text: `environment: serve listens on ${settings.hostname}:${settings.port}` });
    if (settings.tracing) findings.push(await checkCollector(settings.tracing));
  } catch (error) {
    findings.push({ ok: false, text: `environment: ${(error as ConfigError).message}` });
  }
  const database = process.env.SLUICE_DB;
  if (isPostgresUrl(database)) {
    await checkPostgres(database, config, findings);
    await checkRedis(process.env.SLUICE_REDIS_URL || undefined, findings);
  } else {
    if (process.env.SLUICE_REDIS_URL)
      findings.push({ ok: false, text: "Redis: SLUICE_REDIS_URL is set but SLUICE_DB is a SQLite file; shared mode needs SLUICE_DB=postgres://... as well" });
    checkSqlite(config, findings);
  }
  if (config) {
    for (const model of config.models) {
      if (model.backend === "demo") findings.push({ ok: true, text: `model ${model.id}: built-in demo` });
      else if (!model.enabled) findings.push({ ok: true, text: `model ${model.id}: disabled` });
      else for (const url of model.baseUrls) findings.push(await checkUpstream(model, url));
      if (model.apiKeyEnv && !process.env[model.apiKeyEnv])
        findings.push({ ok: false, text: `model ${model.id}: the environment variable ${model.apiKeyEnv} is not set` });
    }
  }
  for (const finding of findings) console.log(`${finding.ok ? "ok     " : "PROBLEM"}  ${finding.text}`);
  const problems = findings.filter((finding) => !finding.ok).length;
  console.log(problems === 0 ? "everything looks right" : `${problems} problem(s) found`);
  return problems === 0 ? 0 : 1;
}
