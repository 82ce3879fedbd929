// `sluice serve` and SIGHUP: the configuration file is read again and served from the next request on; a file that is
// not valid leaves the one in force, and says why.
import { afterAll, expect, test } from "bun:test";
import { renameSync } from "node:fs";
import { join } from "node:path";
import { httpPost, temporaryDirectory, useFakeUpstream } from "../helpers";
import { startFakeCollector } from "../support/otlp-collector";
import { reloadConfiguration, sluiceCommand, sluiceEnvironment, startSluiceProcess } from "../support/sluice-process";

const upstream = useFakeUpstream();
const directory = temporaryDirectory();
afterAll(() => directory.remove());

function toml(models: string[]): string {
  const blocks = models.map((id) => `[[models]]\nid = "${id}"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "usage-10-5"\n`);
  return `${blocks.join("\n")}\n[[plans]]\nid = "default"\nmodels = ["*"]\n`;
}

test("SIGHUP: a model added to the file is served at once; an invalid file is refused with its reason and the old one serves on", async () => {
  const configPath = join(directory.path, "sluice.toml");
  await Bun.write(configPath, toml(["m"]));
  const environment = sluiceEnvironment(join(directory.path, "sluice.db"), configPath);
  expect(sluiceCommand(environment, "org", "create", "acme").code).toBe(0);
  const key = sluiceCommand(environment, "key", "create", "--org", "acme").stdout.trim().split("\n").at(-1) as string;
  const server = await startSluiceProcess(environment);
  const status = async (model: string) => {
    const response = await httpPost(`${server.url}/v1/chat/completions`, JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }), {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
    });
    await response.arrayBuffer();
    return response.status;
  };
  try {
    expect([await status("m"), await status("n")]).toEqual([200, 404]);

    await Bun.write(configPath, toml(["m", "n"]));
    const reloaded = await reloadConfiguration(server);
    expect(reloaded).toMatchObject({ level: "info", message: "configuration reloaded", changes: { models: { added: ["n"], removed: [], changed: [] } } });
    expect([await status("m"), await status("n")]).toEqual([200, 200]);

    expect(await reloadConfiguration(server)).toMatchObject({ message: "configuration reloaded: nothing changed" });

    await Bun.write(configPath, `${toml(["m"])}\n[[plans]]\nid = "default"\nmodels = ["*"]\n`);
    const refused = await reloadConfiguration(server);
    expect(refused).toMatchObject({ level: "error", message: "configuration not reloaded; the one in force stays" });
    expect(refused.error).toContain('duplicate id "default"');
    expect([await status("m"), await status("n")]).toEqual([200, 200]);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toContain('sluice_config_reloads_total{result="applied"} 2');
    expect(metrics).toContain('sluice_config_reloads_total{result="refused"} 1');

    await Bun.write(configPath, toml(["m", "n"]));
    const audit = sluiceCommand(environment, "audit", "--action", "config.reloaded");
    expect(audit.stderr).toBe("");
    expect(audit.code).toBe(0);
    const entries = audit.stdout.trim().split("\n").slice(1);
    expect(entries).toHaveLength(1);
    expect(entries[0]).toContain("SIGHUP (server)");
    expect(entries[0]).toContain("model n:");
  } finally {
    server.child.kill("SIGTERM");
    await server.child.exited;
  }
  expect(server.child.exitCode).toBe(0);
});

/**
 * `sluice serve` over a model whose upstream key is read from a file (holding `firstKey` at start), and `ask`: one
 * request through it, answered with its status and the Authorization the upstream got.
 */
async function keyFileServer(name: string, firstKey: string, extra: Record<string, string> = {}) {
  const configPath = join(directory.path, `${name}.toml`);
  const keyPath = join(directory.path, `${name}-key`);
  await Bun.write(keyPath, `${firstKey}\n`);
  const model = `[[models]]\nid = "m"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "usage-10-5"\napi_key_file = "${keyPath}"\n`;
  await Bun.write(configPath, `${model}\n[[plans]]\nid = "default"\nmodels = ["*"]\n`);
  const environment = sluiceEnvironment(join(directory.path, `${name}.db`), configPath, extra);
  expect(sluiceCommand(environment, "org", "create", "acme").code).toBe(0);
  const key = sluiceCommand(environment, "key", "create", "--org", "acme").stdout.trim().split("\n").at(-1) as string;
  const server = await startSluiceProcess(environment);
  const ask = async () => {
    const response = await httpPost(`${server.url}/v1/chat/completions`, JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }), {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
    });
    await response.arrayBuffer();
    return [response.status, upstream.authorizations.at(-1)];
  };
  return { configPath, keyPath, model, environment, server, ask };
}

test("api_key_file: the key is read from its file, and a key rotated in it applies on SIGHUP without a restart; the file's key never shows", async () => {
  // The file checks off: this test is about the SIGHUP's read, which a check between the write and the signal would do.
  const { configPath, keyPath, model, environment, server, ask } = await keyFileServer("keyfile", "sk-upstream-first", { SLUICE_KEY_FILE_CHECK_MS: "0" });
  try {
    expect(await ask()).toEqual([200, "Bearer sk-upstream-first"]);
    await Bun.write(keyPath, "sk-upstream-second");
    const reloaded = await reloadConfiguration(server);
    expect(reloaded).toMatchObject({ message: "configuration reloaded", changes: { models: { changed: ["m"] } } });
    expect(JSON.stringify(reloaded)).not.toContain("sk-upstream");
    expect(await ask()).toEqual([200, "Bearer sk-upstream-second"]);
    // Unchanged: nothing to reload. Gone: the reload is refused with the file named, and the key in force stays.
    expect(await reloadConfiguration(server)).toMatchObject({ message: "configuration reloaded: nothing changed" });
    await Bun.write(keyPath, "");
    const refused = await reloadConfiguration(server);
    expect(refused).toMatchObject({ level: "error", message: "configuration not reloaded; the one in force stays" });
    expect(refused.error).toBe(`invalid configuration key models[0].api_key_file: ${keyPath} is empty`);
    expect(await ask()).toEqual([200, "Bearer sk-upstream-second"]);
    // Other commands never read the key: they work with the file empty.
    const audit = sluiceCommand(environment, "audit", "--action", "config.reloaded").stdout;
    expect(audit).toContain("model m api key");
    expect(audit).not.toContain("sk-upstream");
  } finally {
    server.child.kill("SIGTERM");
    await server.child.exited;
  }
  // At start, a file that cannot be read stops the server with its key named.
  await Bun.write(configPath, `${model.replace(keyPath, join(directory.path, "missing"))}\n[[plans]]\nid = "default"\nmodels = ["*"]\n`);
  const failed = sluiceCommand(environment, "serve");
  expect(failed.code).toBe(1);
  expect(failed.stderr).toContain(`invalid configuration key models[0].api_key_file: cannot read ${join(directory.path, "missing")} (ENOENT)`);
});

test("OTEL_* variables: `sluice serve` exports its spans to the collector they name, the last ones as it stops; a protocol it cannot speak stops the start", async () => {
  const collector = startFakeCollector();
  const configPath = join(directory.path, "traced.toml");
  await Bun.write(configPath, toml(["m"]));
  const base = sluiceEnvironment(join(directory.path, "traced.db"), configPath);
  const environment = { ...base, OTEL_EXPORTER_OTLP_ENDPOINT: collector.url.replace("/v1/traces", ""), OTEL_SERVICE_NAME: "gateway-test" };
  expect(sluiceCommand(environment, "org", "create", "acme").code).toBe(0);
  const key = sluiceCommand(environment, "key", "create", "--org", "acme").stdout.trim().split("\n").at(-1) as string;
  const server = await startSluiceProcess(environment);
  try {
    const response = await httpPost(`${server.url}/v1/chat/completions`, JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }), {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
    });
    expect(response.status).toBe(200);
    // The batch's time (5 s by default) has not come: the stop sends it.
    expect(collector.spans.length).toBe(0);
  } finally {
    server.child.kill("SIGTERM");
    await server.child.exited;
    await collector.stop();
  }
  expect(collector.spans.map((span) => [span.name, span.resource["service.name"]])).toEqual([
    ["chat usage-10-5", "gateway-test"],
    ["POST /v1/chat/completions", "gateway-test"],
  ]);
  const refused = sluiceCommand({ ...environment, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }, "serve");
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain("OTEL_EXPORTER_OTLP_PROTOCOL must be http/json");
});

test("a key file rotated in place (a Kubernetes secret, Vault Agent) applies within SLUICE_KEY_FILE_CHECK_MS, without a signal; one that cannot be used keeps the key in force", async () => {
  const { keyPath, environment, server, ask } = await keyFileServer("watched", "sk-watched-first", { SLUICE_KEY_FILE_CHECK_MS: "50" });
  const askUntil = async (expected: string) => {
    for (let tries = 0; tries < 100; tries++) {
      const answer = await ask();
      if (answer[1] === expected) return answer;
      await Bun.sleep(20);
    }
    return ask();
  };
  try {
    expect(await ask()).toEqual([200, "Bearer sk-watched-first"]);
    // Rewritten in place, as a rotation job does; then replaced by a rename, as Kubernetes swaps a secret's files.
    await Bun.write(keyPath, "sk-watched-second\n");
    expect(await askUntil("Bearer sk-watched-second")).toEqual([200, "Bearer sk-watched-second"]);
    await Bun.write(`${keyPath}.new`, "sk-watched-third");
    renameSync(`${keyPath}.new`, keyPath);
    expect(await askUntil("Bearer sk-watched-third")).toEqual([200, "Bearer sk-watched-third"]);
    // Emptied by mistake: the key in force stays.
    await Bun.write(keyPath, "");
    await Bun.sleep(300);
    expect(await ask()).toEqual([200, "Bearer sk-watched-third"]);
    // The audit trail names what changed and why, never the key.
    const audit = sluiceCommand(environment, "audit", "--action", "config.reloaded").stdout;
    expect(audit).toContain("key file changed");
    expect(audit).toContain("model m api key");
    expect(audit).not.toContain("sk-watched");
  } finally {
    server.child.kill("SIGTERM");
    await server.child.exited;
  }
});
