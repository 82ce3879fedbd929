import { ConfigError, loadConfig } from "../config/load";
import type { Config } from "../config/schema";
import { openDatabase } from "../db/client";

interface Finding {
  ok: boolean;
  text: string;
}

async function checkUpstream(id: string, baseUrl: string, apiKey: string | undefined): Promise<Finding> {
  try {
    const response = await fetch(`${baseUrl}/models`, { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(3000) });
    await response.arrayBuffer();
    if (response.status === 401 || response.status === 403) return { ok: false, text: `model ${id}: ${baseUrl} answers but refuses the key (HTTP ${response.status}); check its api_key_env` };
    if (response.status >= 500) return { ok: false, text: `model ${id}: ${baseUrl} answers with HTTP ${response.status}` };
    return { ok: true, text: `model ${id}: ${baseUrl} reachable (HTTP ${response.status})` };
  } catch (error) {
    const reason = (error as Error).name === "TimeoutError" ? "no answer within 3 s" : (error as Error).message;
    return { ok: false, text: `model ${id}: cannot reach ${baseUrl} (${reason})` };
  }
}

/**
 * `sluice doctor`: checks the configuration, the database's integrity, and that every upstream answers, and says
 * in plain words what is wrong. Exit status 1 when something is.
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
    const database = openDatabase();
    const integrity = database.sqlite.query<{ integrity_check: string }, []>("PRAGMA integrity_check").all().map((row) => row.integrity_check);
    findings.push(integrity.join() === "ok" ? { ok: true, text: "database: integrity ok" } : { ok: false, text: `database: integrity problems: ${integrity.slice(0, 5).join("; ")}` });
    if (config) {
      const plans = new Set(config.plans.map((plan) => plan.id));
      const orphans = database.sqlite.query<{ name: string; plan: string }, []>("SELECT name, plan FROM organizations").all().filter((row) => !plans.has(row.plan));
      for (const orphan of orphans) findings.push({ ok: false, text: `organization ${orphan.name}: its plan "${orphan.plan}" is not in the configuration; its keys get 403` });
    }
    database.close();
  } catch (error) {
    findings.push({ ok: false, text: `database: ${(error as Error).message}` });
  }
  if (config) {
    for (const model of config.models) {
      if (model.backend === "demo") findings.push({ ok: true, text: `model ${model.id}: built-in demo` });
      else if (!model.enabled) findings.push({ ok: true, text: `model ${model.id}: disabled` });
      else for (const url of model.baseUrls) findings.push(await checkUpstream(model.id, url, model.apiKeyEnv ? process.env[model.apiKeyEnv] : undefined));
      if (model.apiKeyEnv && !process.env[model.apiKeyEnv]) findings.push({ ok: false, text: `model ${model.id}: the environment variable ${model.apiKeyEnv} is not set` });
    }
  }
  for (const finding of findings) console.log(`${finding.ok ? "ok     " : "PROBLEM"}  ${finding.text}`);
  const problems = findings.filter((finding) => !finding.ok).length;
  console.log(problems === 0 ? "everything looks right" : `${problems} problem(s) found`);
  return problems === 0 ? 0 : 1;
}
