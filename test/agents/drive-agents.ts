// Drives the real coding agents, Claude Code (`claude -p`) and Codex CLI (`codex exec`), against a Sluice server
// on its demo model, offline: each must complete one turn, and Sluice must have recorded it. Run by `make agents`,
// which installs both agents into test/agents/.installed (about 640 MB, hence not part of `make test`).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../src/db/client";

const installed = join(import.meta.dir, ".installed", "node_modules", ".bin");
const root = join(import.meta.dir, "..", "..");
const directory = mkdtempSync(join(tmpdir(), "sluice-agents-"));
const port = 18_765;
const environment = { ...process.env, SLUICE_DB: join(directory, "sluice.db"), SLUICE_CONFIG: join(directory, "sluice.toml"), SLUICE_PORT: String(port) };

// The demo model under the names the agents ask for; Claude Code asks for 32,000 output tokens.
writeFileSync(
  environment.SLUICE_CONFIG,
  `[[models]]\nid = "sluice-demo"\nbackend = "demo"\naliases = ["claude-sonnet-5-5"]\ncontext_window = 200000\nmax_output_tokens = 32000\n\n[[plans]]\nid = "default"\nmodels = ["*"]\n`,
);

function sluice(...args: string[]): string {
  const result = Bun.spawnSync([process.execPath, join(root, "src/main.ts"), ...args], { env: environment });
  if (result.exitCode !== 0) throw new Error(`sluice ${args.join(" ")}: ${result.stderr.toString()}`);
  return result.stdout.toString().trim();
}

async function drive(name: string, command: string[], extra: Record<string, string>): Promise<boolean> {
  const home = join(directory, `${name}-home`);
  mkdirSync(home, { recursive: true });
  const child = Bun.spawn(command, { env: { ...environment, HOME: home, ...extra }, stdout: "pipe", stderr: "pipe", cwd: directory });
  const timer = setTimeout(() => child.kill(), 120_000);
  const [output, errors, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  clearTimeout(timer);
  const answered = exitCode === 0 && output.includes("Sluice's built-in demo model");
  console.log(`${name}: exit ${exitCode}, ${answered ? "completed one turn" : "FAILED"}`);
  if (!answered) console.log(output.slice(-2000), errors.slice(-2000));
  return answered;
}

sluice("org", "create", "agents");
const key = sluice("key", "create", "--org", "agents").split("\n").at(-1) as string;
const server = Bun.spawn([process.execPath, join(root, "src/main.ts"), "serve"], { env: environment, stdout: "ignore", stderr: "inherit" });
let passed = false;
try {
  for (let tries = 0; tries < 100; tries++) {
    if (
      await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (response) => response.ok,
        () => false,
      )
    )
      break;
    await Bun.sleep(50);
  }
  const codexHome = join(directory, "codex");
  mkdirSync(codexHome, { recursive: true });
  writeFileSync(
    join(codexHome, "config.toml"),
    `model = "sluice-demo"\nmodel_provider = "sluice"\nweb_search = "disabled"\n\n[model_providers.sluice]\nname = "Sluice"\nbase_url = "http://127.0.0.1:${port}/v1"\nenv_key = "SLUICE_API_KEY"\nwire_api = "responses"\n`,
  );
  const claude = await drive("claude", [join(installed, "claude"), "-p", "Say hello in one word", "--model", "claude-sonnet-5-5"], {
    ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}`,
    ANTHROPIC_API_KEY: key,
    DISABLE_TELEMETRY: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    // Claude Code asks for the output limit of the Claude model it believes it talks to (64,000 for this name).
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: "32000",
  });
  const codex = await drive("codex", [join(installed, "codex"), "exec", "--skip-git-repo-check", "Say hello in one word"], {
    CODEX_HOME: codexHome,
    SLUICE_API_KEY: key,
  });
  const database = openDatabase(environment.SLUICE_DB);
  const rows = database.sqlite.query<{ outcome: string }, []>("SELECT outcome FROM usage_ledger").all();
  database.close();
  console.log(`ledger rows: ${rows.length} (${rows.map((row) => row.outcome).join(", ")})`);
  passed = claude && codex && rows.length >= 2 && rows.every((row) => row.outcome === "completed");
} finally {
  server.kill();
  await server.exited;
  rmSync(directory, { recursive: true, force: true });
}
process.exit(passed ? 0 : 1);
