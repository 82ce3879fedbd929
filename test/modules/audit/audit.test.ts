// The audit trail: every administrative change and sign-in, recorded once whoever makes it (console or CLI), with
// the actor and the old and new values, never a secret; read by operators in the console and with `sluice audit`.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { userInfo } from "node:os";
import { join } from "node:path";
import type { AuditEntry } from "../../../src/modules/audit/entry";
import { temporaryDirectory, type TestSluice } from "../../helpers";
import { sluiceCommand } from "../../support/sluice-process";
import { ConsoleClient, consolePassword as password, startConsoleSluice } from "../console/console-client";

let server: Awaited<ReturnType<typeof startConsoleSluice>>;
let sluice: TestSluice;

beforeAll(async () => {
  server = await startConsoleSluice();
  sluice = server.sluice;
});
afterAll(() => server.stop());

async function operator(): Promise<ConsoleClient> {
  const client = new ConsoleClient(sluice.url);
  await client.signIn("op@example.com", password);
  return client;
}

async function trail(client: ConsoleClient, query = ""): Promise<{ entries: AuditEntry[]; nextCursor: string | null }> {
  const response = await client.json<{ entries: AuditEntry[]; nextCursor: string | null }>("GET", `/operator/audit${query}`);
  expect(response.status).toBe(200);
  return response.body;
}

const configDirectory = temporaryDirectory();
const configPath = join(configDirectory.path, "sluice.toml");
await Bun.write(configPath, '[[models]]\nid = "m"\nbackend = "demo"\n\n[[plans]]\nid = "default"\nmodels = ["*"]\n\n[[plans]]\nid = "pro"\nmodels = ["*"]\n');
afterAll(() => configDirectory.remove());

function cli(...args: string[]) {
  return sluiceCommand(
    { ...process.env, SLUICE_DB: sluice.database.sqlite.filename, SLUICE_CONFIG: configPath, SLUICE_OPERATOR_PASSWORD: "another long password" },
    ...args,
  );
}

describe("changes made in the console", () => {
  test("sign-up, activation, plan change, key created and revoked, sign-ins: each recorded once with its actor and values", async () => {
    const member = new ConsoleClient(sluice.url);
    expect((await member.json("POST", "/signup", { email: "Ada@Example.com", password, organization: "Audit Co" })).status).toBe(201);
    await member.signIn("ada@example.com", password);
    expect((await member.request("POST", "/signin", { email: "ada@example.com", password: "wrong password!" })).status).toBe(401);
    const admin = await operator();
    const organization = (await admin.json<{ id: string; name: string }[]>("GET", "/operator/organizations")).body.find(
      (candidate) => candidate.name === "Audit Co",
    ) as { id: string };
    await admin.json("POST", `/operator/organizations/${organization.id}`, { status: "active" });
    await admin.json("POST", `/operator/organizations/${organization.id}`, { plan: "pro" });
    // A change to what it already is changes nothing and records nothing.
    await admin.json("POST", `/operator/organizations/${organization.id}`, { plan: "pro" });
    const created = (await member.json<{ secret: string; key: { id: string } }>("POST", "/keys", { name: "laptop", expires_in: "30d" })).body;
    await member.json("POST", `/keys/${created.key.id}/revoke`, {});
    await member.json("POST", `/keys/${created.key.id}/revoke`, {});

    // Oldest first, to read in the order it happened.
    const entries = (await trail(admin, `?organization=${organization.id}`)).entries.reverse();
    const summary = entries.map((entry) => [entry.actorKind, entry.actor, entry.action, entry.target, entry.address]);
    // Each with the address it came from: the tests' requests come from 127.0.0.1.
    expect(summary).toEqual([
      ["console", "ada@example.com", "organization.created", "Audit Co", "127.0.0.1"],
      ["console", "ada@example.com", "account.created", "ada@example.com", "127.0.0.1"],
      ["console", "ada@example.com", "signin.succeeded", "ada@example.com", "127.0.0.1"],
      ["console", "op@example.com", "organization.updated", "Audit Co", "127.0.0.1"],
      ["console", "op@example.com", "organization.updated", "Audit Co", "127.0.0.1"],
      ["console", "ada@example.com", "key.created", created.key.id, "127.0.0.1"],
      ["console", "ada@example.com", "key.revoked", created.key.id, "127.0.0.1"],
    ]);
    const byAction = (action: string) => entries.filter((entry) => entry.action === action);
    expect(byAction("organization.updated").map((entry) => entry.changes)).toEqual([{ status: ["waitlist", "active"] }, { plan: ["default", "pro"] }]);
    expect(byAction("organization.created")[0]?.changes).toEqual({ plan: [null, "default"], status: [null, "waitlist"] });
    expect(byAction("key.created")[0]?.changes).toMatchObject({ name: [null, "laptop"] });
    // The failed sign-in names no organization: it is found by action.
    const failed = (await trail(admin, "?action=signin.failed")).entries;
    expect(failed.map((entry) => [entry.actor, entry.changes, entry.address])).toContainEqual([
      "ada@example.com",
      { reason: [null, "wrong email or password"] },
      "127.0.0.1",
    ]);
    // Never a secret, never a password: not in any column of any entry.
    const everything = JSON.stringify(sluice.database.sqlite.query("SELECT * FROM audit_log").all());
    expect(everything).not.toContain(created.secret);
    expect(everything).not.toContain(password);
    expect(everything).not.toContain("wrong password!");
  });

  test("filters and cursor paging; members cannot read it", async () => {
    const admin = await operator();
    for (let index = 0; index < 5; index++) await sluice.organizations.create({ name: `paged-${index}` }, { kind: "console", name: "pager@example.com" });
    const first = await trail(admin, "?actor=pager@example.com&limit=2");
    expect(first.entries.map((entry) => entry.target)).toEqual(["paged-4", "paged-3"]);
    const second = await trail(admin, `?actor=pager@example.com&limit=2&cursor=${first.nextCursor}`);
    expect(second.entries.map((entry) => entry.target)).toEqual(["paged-2", "paged-1"]);
    const last = await trail(admin, `?actor=pager@example.com&limit=2&cursor=${second.nextCursor}`);
    expect(last).toMatchObject({ nextCursor: null });
    expect(last.entries.map((entry) => entry.target)).toEqual(["paged-0"]);
    expect((await trail(admin, "?since=2099-01-01")).entries).toEqual([]);
    const cases: [string, string][] = [
      ["?since=yesterday", "since"],
      ["?action=key.stolen", "action"],
      ["?cursor=nope", "cursor"],
      ["?limit=0", "limit"],
    ];
    for (const [query, param] of cases) {
      const response = await admin.json<{ error: { param: string } }>("GET", `/operator/audit${query}`);
      expect({ status: response.status, param: response.body.error.param }).toEqual({ status: 400, param });
    }
    const member = new ConsoleClient(sluice.url);
    await member.signIn("ada@example.com", password);
    expect((await member.request("GET", "/operator/audit")).status).toBe(403);
  });
});

describe("changes made with the CLI", () => {
  test("org, key, usage reset and operator commands are recorded as cli with the OS user; `sluice audit` prints them", () => {
    const user = userInfo().username;
    expect(cli("org", "create", "cli-co", "--status", "waitlist").code).toBe(0);
    expect(cli("org", "update", "cli-co", "--status", "active", "--plan", "pro").code).toBe(0);
    const key = cli("key", "create", "--org", "cli-co", "--name", "ci");
    expect(key.code).toBe(0);
    const secret = key.stdout.trim();
    const keyId = /created key (key_\S+)/.exec(key.stderr)?.[1] as string;
    expect(cli("key", "revoke", keyId).code).toBe(0);
    expect(cli("usage", "reset", "--org", "cli-co").code).toBe(0);
    expect(cli("operator", "create", "second-op@example.com").code).toBe(0);

    const rows = sluice.database.sqlite
      .query<{ actor_kind: string; actor: string; action: string; target: string; changes: string | null; address: string | null }, []>(
        "SELECT actor_kind, actor, action, target, changes, address FROM audit_log WHERE actor_kind = 'cli' AND actor <> 'test' ORDER BY id",
      )
      .all();
    // A command has no address.
    expect(rows.every((row) => row.address === null)).toBe(true);
    expect(rows.map((row) => [row.actor_kind, row.actor, row.action, row.target])).toEqual([
      ["cli", user, "organization.created", "cli-co"],
      ["cli", user, "organization.updated", "cli-co"],
      ["cli", user, "key.created", keyId],
      ["cli", user, "key.revoked", keyId],
      ["cli", user, "usage.reset", "cli-co"],
      ["cli", user, "account.created", "second-op@example.com"],
    ]);
    expect(JSON.parse(rows[1]?.changes as string)).toEqual({ plan: ["default", "pro"], status: ["waitlist", "active"] });
    expect(JSON.stringify(rows)).not.toContain(secret);

    const printed = cli("audit", "--since", "7d");
    expect(printed.code).toBe(0);
    const lines = printed.stdout.trim().split("\n");
    expect(lines[0]).toBe("time\tactor\taction\ttarget\tchanges");
    // Newest first.
    expect(lines[1]).toContain(`${user} (cli)\taccount.created\tsecond-op@example.com`);
    expect(printed.stdout).toContain('status: "waitlist" -> "active"');
    // A console change shows where it came from.
    expect(printed.stdout).toContain("ada@example.com (console, 127.0.0.1)\tsignin.succeeded");
    const filtered = cli("audit", "--action", "key.revoked", "--org", "cli-co");
    expect(
      filtered.stdout
        .trim()
        .split("\n")
        .slice(1)
        .map((line) => line.split("\t")[2]),
    ).toEqual(["key.revoked"]);
    expect(cli("audit", "--since", "soon").code).toBe(2);
    expect(cli("audit", "--action", "nothing").stderr).toContain("--action must be one of");
  });
});
