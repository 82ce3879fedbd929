import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { startFakeUpstream } from "../fake-upstream";
import { ledgerRow, repositoryRoot, stageRows, temporaryDirectory } from "../helpers";
import { startFakeCollector } from "../support/otlp-collector";
import { moveStagedRows } from "../../src/ledger/inbox";
import { openDatabase } from "../../src/db/client";
import { AuditLog } from "../../src/modules/audit/service";
import { AccountService } from "../../src/modules/console/accounts";
import { sqliteStorage } from "../../src/storage/sqlite";

const directory = temporaryDirectory();
afterAll(() => directory.remove());

const environment = {
  ...process.env,
  SLUICE_DB: join(directory.path, "cli.db"),
  SLUICE_CONFIG: join(repositoryRoot, "test/fixtures/demo.toml"),
};

function sluiceWith(overrides: Record<string, string | undefined>, ...args: string[]) {
  const result = Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), ...args], {
    env: { ...environment, ...overrides },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 20_000,
  });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}

function sluice(...args: string[]) {
  return sluiceWith({}, ...args);
}

/** The command stopped with `code` and one plain line naming the problem: no runtime stack trace, no source listing. */
function expectPlainFailure(result: ReturnType<typeof sluice>, code: number, message: string) {
  expect(result.code).toBe(code);
  expect(result.stderr).toStartWith(`sluice: ${message}`);
  expect(result.stderr).not.toMatch(/^\s+at |Bun v\d|^\d+ \| /m);
}

describe("sluice org", () => {
  test("create with defaults, create with options, update, list", () => {
    const created = sluice("org", "create", "acme");
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^org_\S+\tacme\tdefault\tactive\tany\n$/);
    expect(sluice("org", "create", "beta", "--status", "waitlist").stdout).toContain("\tbeta\tdefault\twaitlist");
    expect(sluice("org", "update", "beta", "--status", "active").stdout).toContain("\tbeta\tdefault\tactive");
    const listed = sluice("org", "list").stdout.trim().split("\n");
    expect(listed.map((line) => line.split("\t")[1])).toEqual(["acme", "beta"]);
  });

  test("bad arguments: a clear message and exit 2", () => {
    const cases: [string[], string][] = [
      [["org", "create"], "expected 1 argument"],
      [["org", "create", "x", "--status", "sleepy"], "--status must be one of"],
      [["org", "create", "x", "--plan", "platinum"], 'unknown plan "platinum"'],
      [["org", "create", "acme"], "already exists"],
      [["org", "update", "ghost", "--status", "active"], 'no organization named "ghost"'],
      [["org", "create", "x", "--colour", "red"], "Unknown option"],
      [["org", "frobnicate"], "unknown org command"],
      [["teleport"], 'unknown command "teleport"'],
      [["key", "create"], "--org NAME is required"],
      [["key", "create", "--org", "acme", "--expires-in", "soon"], "--expires-in must look like"],
      [["key", "revoke", "key_nothing"], 'no key with id "key_nothing"'],
    ];
    for (const [args, message] of cases) {
      const result = sluice(...args);
      expect({ args, code: result.code }).toEqual({ args, code: 2 });
      expect(result.stderr).toContain(message);
    }
  });
});

describe("sluice key", () => {
  test("create prints the key alone on the last line of stdout; list never shows it; revoke marks it", () => {
    const created = sluice("key", "create", "--org", "acme", "--name", "ci", "--expires-in", "30d");
    expect(created.code).toBe(0);
    const lines = created.stdout.trim().split("\n");
    const secret = lines.at(-1) as string;
    expect(secret).toMatch(/^sk-sluice-[A-Za-z0-9_-]{43}$/);
    expect(created.stderr).toContain("only time");
    const listed = sluice("key", "list", "--org", "acme");
    expect(listed.stdout).not.toContain(secret);
    const fields = listed.stdout.trim().split("\t");
    const [id, label, prefix, createdAt, lastUsed, expires, revoked] = fields;
    expect(id).toMatch(/^key_/);
    expect(label).toBe("ci");
    expect(secret.startsWith(prefix as string)).toBe(true);
    expect(Date.parse(createdAt as string)).toBeGreaterThan(0);
    expect(lastUsed).toBe("-");
    expect(Date.parse(expires as string) - Date.parse(createdAt as string)).toBe(30 * 86_400_000);
    expect(revoked).toBe("-\n".trim());
    expect(sluice("key", "revoke", id as string).code).toBe(0);
    expect(Date.parse(sluice("key", "list", "--org", "acme").stdout.trim().split("\t")[6] as string)).toBeGreaterThan(0);
  });
});

describe("sluice token", () => {
  test("create prints a console token that acts as its account; list never shows it; revoke ends it; mistakes exit 1 or 2", async () => {
    expect(sluiceWith({ SLUICE_OPERATOR_PASSWORD: "a long operator password" }, "operator", "create", "root@example.com").code).toBe(0);
    const created = sluice("token", "create", "Root@Example.com", "--name", "provisioning", "--expires-in", "90d");
    expect(created.code).toBe(0);
    const secret = created.stdout.trim().split("\n").at(-1) as string;
    expect(secret).toMatch(/^sluice-console-[A-Za-z0-9_-]{43}$/);
    expect(created.stderr).toContain("only time");
    const listed = sluice("token", "list", "--email", "root@example.com");
    expect(listed.stdout).not.toContain(secret);
    const [id, name, email, prefix, createdAt, lastUsed, expires, revoked] = listed.stdout.trim().split("\t");
    expect([name, email, lastUsed, revoked]).toEqual(["provisioning", "root@example.com", "-", "-"]);
    expect(secret.startsWith(prefix as string)).toBe(true);
    expect(Date.parse(expires as string) - Date.parse(createdAt as string)).toBe(90 * 86_400_000);

    // The token is the operator, as the console API will read it from the same database.
    const database = openDatabase(environment.SLUICE_DB);
    try {
      const storage = sqliteStorage(database);
      const accounts = new AccountService(storage.accounts, new AuditLog(storage.audit));
      expect(await accounts.tokens.actorOf(secret)).toMatchObject({ email: "root@example.com", role: "operator", tokenName: "provisioning" });
      expect(sluice("token", "revoke", id as string).code).toBe(0);
      expect(await accounts.tokens.actorOf(secret)).toBeUndefined();
    } finally {
      database.close();
    }
    // Used once (above), then revoked.
    const [, , , , , usedAt, , revokedAt] = sluice("token", "list").stdout.trim().split("\t");
    expect([usedAt, revokedAt].every((value) => value !== "-" && Number.isFinite(Date.parse(value as string)))).toBe(true);
    expect(sluice("audit", "--action", "token.created").stdout).toContain(id as string);

    expectPlainFailure(sluice("token", "create", "nobody@example.com", "--name", "x"), 1, 'no console account with the email "nobody@example.com"');
    expectPlainFailure(sluice("token", "create", "root@example.com"), 2, "--name NAME is required");
    expectPlainFailure(sluice("token", "create", "root@example.com", "--name", "x", "--expires-in", "soon"), 2, "--expires-in must look like");
    expectPlainFailure(sluice("token", "revoke", "tok_nothing"), 1, 'no console token with the id "tok_nothing"');
    expectPlainFailure(sluice("token", "mint"), 2, 'unknown token command "mint"');
  });
});

describe("configuration", () => {
  test("an unknown or mistyped key is refused at start with the key named", async () => {
    const config = join(directory.path, "bad.toml");
    await Bun.write(config, '[[models]]\nid = "m"\nbackend = "demo"\ncontext_windw = 5\n');
    const result = Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), "serve"], {
      env: { ...environment, SLUICE_CONFIG: config, SLUICE_PORT: "0" },
      stderr: "pipe",
    });
    expect(result.exitCode).toBe(1);
    expect(result.stderr.toString()).toContain("models[0].context_windw");
    await Bun.write(config, '[[models]]\nid = "m"\nbackend = "demo"\ncontext_window = "big"\n');
    const mistyped = Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), "org", "list"], {
      env: { ...environment, SLUICE_CONFIG: config },
      stderr: "pipe",
    });
    expect(mistyped.exitCode).toBe(1);
    expect(mistyped.stderr.toString()).toContain("models[0].context_window");
  });
});

describe("sluice serve", () => {
  test("a second serve on an address already served is refused with the address named; the first keeps answering", async () => {
    const first = Bun.spawn([process.execPath, join(repositoryRoot, "src/main.ts"), "serve"], {
      env: { ...environment, SLUICE_PORT: "0" },
      stderr: "pipe",
    });
    try {
      const reader = first.stderr.getReader();
      let logged = "";
      while (!logged.includes("sluice listening")) {
        const { done, value } = await reader.read();
        if (done) throw new Error(`the first serve stopped: ${logged}`);
        logged += new TextDecoder().decode(value);
      }
      reader.releaseLock();
      const url = JSON.parse(logged.split("\n").find((line) => line.includes("sluice listening")) as string).url as string;
      const port = new URL(url).port;
      const second = Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), "serve"], {
        env: { ...environment, SLUICE_PORT: port },
        stderr: "pipe",
        timeout: 20_000,
      });
      expect(second.exitCode).toBe(1);
      expect(second.stderr.toString()).toContain(`sluice: 127.0.0.1:${port} is already in use`);
      for (let attempt = 0; attempt < 20; attempt++) expect((await fetch(`${url}/healthz`)).status).toBe(200);
    } finally {
      first.kill();
      await first.exited;
    }
  });
});

describe("sluice backup and doctor", () => {
  test("backup writes a consistent copy that opens and holds the same data; an existing target is refused", async () => {
    const target = join(directory.path, "backup.db");
    const result = sluice("backup", target);
    expect(result.code).toBe(0);
    const { Database } = await import("bun:sqlite");
    const copy = new Database(target, { readonly: true });
    expect(copy.query<{ integrity_check: string }, []>("PRAGMA integrity_check").get()?.integrity_check).toBe("ok");
    expect(copy.query<{ count: number }, []>("SELECT count(*) AS count FROM organizations").get()?.count).toBe(2);
    copy.close();
    const again = sluice("backup", target);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain("already exists");
  });

  test("doctor says in plain words what is wrong: an unreachable upstream, a missing key variable, an organization on an unknown plan", async () => {
    const healthy = sluice("doctor");
    expect(healthy.code).toBe(0);
    expect(healthy.stdout).toContain("database: integrity ok");
    expect(healthy.stdout).toContain("everything looks right");
    const config = join(directory.path, "doctor.toml");
    await Bun.write(
      config,
      '[[models]]\nid = "far"\nbackend = "openai"\nbase_url = "http://127.0.0.1:1/v1"\napi_key_env = "SLUICE_TEST_MISSING_KEY"\n\n' +
        `[[models]]\nid = "filed"\nbackend = "openai"\nbase_url = "http://127.0.0.1:1/v1"\napi_key_file = "${join(directory.path, "no-such-key")}"\n\n` +
        '[[plans]]\nid = "other"\nmodels = ["*"]\n',
    );
    const result = Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), "doctor"], {
      env: { ...environment, SLUICE_CONFIG: config },
      stdout: "pipe",
    });
    const output = result.stdout.toString();
    expect(result.exitCode).toBe(1);
    expect(output).toContain("model far: cannot reach http://127.0.0.1:1/v1");
    expect(output).toContain("SLUICE_TEST_MISSING_KEY is not set");
    expect(output).toContain(`model filed: api_key_file: cannot read ${join(directory.path, "no-such-key")} (ENOENT)`);
    expect(output).toContain('organization acme: its plan "default" is not in the configuration');
  });

  test("doctor asks each server with the model's route, query and headers: Azure's api-key, not a bearer token", async () => {
    const upstream = startFakeUpstream();
    try {
      const config = join(directory.path, "azure.toml");
      const base = `${upstream.url.replace(/\/v1$/, "")}/openai/deployments/d?api-version=2024-10-21`;
      await Bun.write(
        config,
        `[[models]]\nid = "azure"\nbackend = "openai"\nbase_url = "${base}"\napi_key_env = "SLUICE_TEST_AZURE_KEY"\napi_key_header = "api-key"\nheaders = { "X-Title" = "Sluice" }\n\n[[plans]]\nid = "default"\nmodels = ["*"]\n`,
      );
      const result = Bun.spawn([process.execPath, join(repositoryRoot, "src/main.ts"), "doctor"], {
        env: { ...environment, SLUICE_CONFIG: config, SLUICE_TEST_AZURE_KEY: "azure-secret" },
        stdout: "pipe",
      });
      const output = await new Response(result.stdout).text();
      expect(output).toContain(`model azure: ${base} reachable (HTTP 200)`);
      expect(upstream.requests.map((request) => request.path)).toEqual(["/openai/deployments/d/models?api-version=2024-10-21"]);
      expect(upstream.requests[0]?.headers).toMatchObject({ "api-key": "azure-secret", "x-title": "Sluice" });
      expect(upstream.requests[0]?.headers.authorization).toBeUndefined();
    } finally {
      await upstream.stop();
    }
  });
});

describe("sluice ledger prune", () => {
  test("deletes now the rows past --days (or [ledger] retention_days), keeps the rest, and records it in the audit trail; mistakes exit 1 or 2", async () => {
    const database = join(directory.path, "prune.db");
    const run = (...args: string[]) => sluiceWith({ SLUICE_DB: database }, ...args);
    expect(run("org", "create", "acme").code).toBe(0);
    const handle = openDatabase(database);
    try {
      const organizationId = handle.sqlite.query<{ id: string }, []>("SELECT id FROM organizations").get()?.id as string;
      const yearAgo = Date.now() - 365 * 86_400_000;
      stageRows(handle.sqlite, [
        ...Array.from({ length: 1200 }, (_, index) => ledgerRow({ requestId: `req_old_${index}`, organizationId, endedAt: yearAgo + index })),
        ledgerRow({ requestId: "req_new", organizationId, endedAt: Date.now() }),
      ]);
      moveStagedRows(handle.sqlite);
    } finally {
      handle.close();
    }
    expectPlainFailure(run("ledger", "prune"), 1, "no retention to apply: set [ledger] retention_days");
    expectPlainFailure(run("ledger", "prune", "--days", "0"), 2, '--days must be a whole number from 1 to 36500, got "0"');
    expectPlainFailure(run("ledger", "vacuum"), 2, 'ledger: unknown subcommand "vacuum"');
    const pruned = run("ledger", "prune", "--days", "90");
    expect(pruned.code).toBe(0);
    expect(pruned.stdout).toMatch(/^deleted 1200 ledger rows of requests that ended before \d{4}-\d\d-\d\dT/);
    expect(run("ledger", "prune", "--days", "90").stdout).toStartWith("deleted 0 ledger rows");
    const reopened = openDatabase(database);
    try {
      expect(reopened.sqlite.query<{ id: string }, []>("SELECT request_id AS id FROM usage_ledger").all()).toEqual([{ id: "req_new" }]);
    } finally {
      reopened.close();
    }
    const audited = run("audit", "--action", "ledger.pruned");
    expect(audited.code).toBe(0);
    expect(audited.stdout.trim().split("\n").length).toBe(2);
    expect(audited.stdout).toContain("usage_ledger");

    // The configuration's retention when no --days is given.
    const again = openDatabase(database);
    try {
      const organizationId = again.sqlite.query<{ id: string }, []>("SELECT id FROM organizations").get()?.id as string;
      stageRows(again.sqlite, [ledgerRow({ requestId: "req_older", organizationId, endedAt: Date.now() - 200 * 86_400_000 })]);
      moveStagedRows(again.sqlite);
    } finally {
      again.close();
    }
    const configuration = join(directory.path, "retention.toml");
    await Bun.write(configuration, `${await Bun.file(join(repositoryRoot, "test/fixtures/demo.toml")).text()}\n[ledger]\nretention_days = 180\n`);
    expect(sluiceWith({ SLUICE_DB: database, SLUICE_CONFIG: configuration }, "ledger", "prune").stdout).toStartWith("deleted 1 ledger rows");
  });
});

describe("a mistyped environment or file stops the command with the variable or file named, never a stack trace", () => {
  test("serve: SLUICE_PORT, SLUICE_LOG_LEVEL and SLUICE_DRAIN_MS are checked before anything opens", () => {
    for (const port of ["abc", "99999", "-1", "1.5", "0x50"]) {
      expectPlainFailure(sluiceWith({ SLUICE_PORT: port }, "serve"), 1, `SLUICE_PORT must be a port number from 0 to 65535, got "${port}"`);
    }
    expectPlainFailure(
      sluiceWith({ SLUICE_PORT: "0", SLUICE_LOG_LEVEL: "loud" }, "serve"),
      1,
      'SLUICE_LOG_LEVEL must be one of debug, info, warn, error, silent, got "loud"',
    );
    for (const drain of ["abc", "-5", "1e3", "99999999999"]) {
      expectPlainFailure(sluiceWith({ SLUICE_PORT: "0", SLUICE_DRAIN_MS: drain }, "serve"), 1, "SLUICE_DRAIN_MS must be a whole number of milliseconds");
    }
  });

  test("serve: an address that is not this machine's, or a name that does not resolve, is refused with the address named", () => {
    expectPlainFailure(sluiceWith({ SLUICE_PORT: "0", SLUICE_HOST: "192.0.2.1" }, "serve"), 1, "cannot listen on 192.0.2.1:0: ");
    expectPlainFailure(sluiceWith({ SLUICE_PORT: "0", SLUICE_HOST: "not..a..host" }, "serve"), 1, "cannot listen on not..a..host:0: ");
  });

  test("a configuration file that SLUICE_CONFIG names must exist; with SLUICE_CONFIG unset the built-in defaults apply", () => {
    const missing = join(directory.path, "typo.toml");
    expectPlainFailure(sluiceWith({ SLUICE_CONFIG: missing, SLUICE_PORT: "0" }, "serve"), 1, `${missing} does not exist`);
    expectPlainFailure(sluiceWith({ SLUICE_CONFIG: missing }, "org", "list"), 1, `${missing} does not exist`);
    // From a directory without data/sluice.toml, as a first `make run` is.
    const fresh = Bun.spawnSync([process.execPath, join(repositoryRoot, "src/main.ts"), "org", "list"], {
      env: { ...environment, SLUICE_CONFIG: undefined },
      cwd: directory.path,
      stderr: "pipe",
    });
    expect(fresh.exitCode).toBe(0);
  });

  test("SLUICE_DB naming a file that is not a database, or a directory, is refused and the file is left as it was", async () => {
    const notDatabase = join(directory.path, "notes.txt");
    await Bun.write(notDatabase, "not a database, an operator's notes\n".repeat(200));
    const before = await Bun.file(notDatabase).text();
    for (const command of [["org", "list"], ["serve"]]) {
      expectPlainFailure(
        sluiceWith({ SLUICE_DB: notDatabase, SLUICE_PORT: "0" }, ...command),
        1,
        `cannot open the SQLite database at ${notDatabase}: file is not a database`,
      );
    }
    expect(await Bun.file(notDatabase).text()).toBe(before);
    expectPlainFailure(sluiceWith({ SLUICE_DB: directory.path }, "org", "list"), 1, `cannot open the SQLite database at ${directory.path}: `);
  });

  test("backup: an empty path, a target that cannot be written and a database that does not exist are refused, and nothing is created", async () => {
    const { existsSync } = await import("node:fs");
    expectPlainFailure(sluice("backup", ""), 2, "the backup's path must not be empty");
    const unwritable = join(directory.path, "no-such-directory", "copy.db");
    expectPlainFailure(sluice("backup", unwritable), 1, `cannot write the backup to ${unwritable}: `);
    const absent = join(directory.path, "typo.db");
    expectPlainFailure(
      sluiceWith({ SLUICE_DB: absent }, "backup", join(directory.path, "copy-of-nothing.db")),
      1,
      `there is no database at ${absent} to back up`,
    );
    expect(existsSync(absent)).toBe(false);
    expect(existsSync(join(directory.path, "copy-of-nothing.db"))).toBe(false);
  });

  test("doctor asks the trace collector the OTEL_* variables name whether it takes an export", async () => {
    const collector = startFakeCollector();
    const doctor = async (overrides: Record<string, string>) => {
      const child = Bun.spawn([process.execPath, join(repositoryRoot, "src/main.ts"), "doctor"], { env: { ...environment, ...overrides }, stdout: "pipe" });
      const output = await new Response(child.stdout).text();
      return { code: await child.exited, output };
    };
    try {
      const traced = { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: collector.url, OTEL_EXPORTER_OTLP_HEADERS: "authorization=Bearer%20t" };
      const healthy = await doctor(traced);
      expect(healthy.output).toContain(`traces: the collector at ${collector.url} takes OTLP/JSON (HTTP 200)`);
      expect(healthy.code).toBe(0);
      expect(collector.posts.at(-1)?.headers.authorization).toBe("Bearer t");
      collector.status = 401;
      const refused = await doctor(traced);
      expect(refused.code).toBe(1);
      expect(refused.output).toContain(`traces: ${collector.url} refuses the export (HTTP 401); check OTEL_EXPORTER_OTLP_HEADERS`);
      const unreachable = await doctor({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:1" });
      expect(unreachable.output).toContain("traces: cannot reach http://127.0.0.1:1/v1/traces");
      const mistyped = await doctor({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:1", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" });
      expect(mistyped.output).toContain("environment: OTEL_EXPORTER_OTLP_PROTOCOL must be http/json");
    } finally {
      await collector.stop();
    }
  });

  test("doctor names a mistyped serve variable", () => {
    const result = sluiceWith({ SLUICE_PORT: "eighty" }, "doctor");
    expect(result.code).toBe(1);
    expect(result.stdout).toContain('environment: SLUICE_PORT must be a port number from 0 to 65535, got "eighty"');
  });
});
