import type { Database } from "bun:sqlite";
import type { Config } from "../../config/schema";
import { SluiceError, invalidRequest } from "../../errors";
import type { AdmissionStore } from "../admission/store";
import type { AuthService } from "../auth/service";
import { parseDuration } from "../keys/duration";
import type { ApiKeyInfo, KeyService } from "../keys/service";
import type { ModelRegistry } from "../models/registry";
import { organizationStatuses, type Organization, type OrganizationService, type OrganizationStatus } from "../organizations/service";
import type { ModelQueue } from "../queue/model-queue";
import { AccountService, type Actor } from "./accounts";

export interface ConsoleDependencies {
  accounts: AccountService;
  organizations: OrganizationService;
  keys: KeyService;
  auth: AuthService;
  admission: AdmissionStore;
  models: ModelRegistry;
  queues: ReadonlyMap<string, ModelQueue>;
  config: Config;
  sqlite: Database;
  clock: () => number;
}

/** Tokens per hour over the last day, by model and by key. */
export interface UsageSeries {
  hours: number[];
  byModel: Record<string, number[]>;
  byKey: Record<string, number[]>;
}

const hourMs = 3_600_000;

function forbidden(): SluiceError {
  return new SluiceError("organization_inactive", "You do not have access to this.");
}

/**
 * Everything the console can do, with the authorization in one place: a member sees and changes only its own
 * organization; operator operations need the operator role. Routes pass the actor and never decide access.
 */
export class ConsoleService {
  constructor(private readonly deps: ConsoleDependencies) {}

  /** Sign-up creates the organization on the waitlist and its first member. */
  async signUp(input: { email: unknown; password: unknown; organization: unknown }): Promise<void> {
    const name = typeof input.organization === "string" ? input.organization.trim() : "";
    if (!name || name.length > 100) throw invalidRequest("Enter your organization's name (at most 100 characters).", "organization");
    const email = AccountService.checkEmail(input.email);
    AccountService.checkPassword(input.password);
    if (this.deps.accounts.findByEmail(email)) throw invalidRequest("An account with this email already exists.", "email");
    if (this.deps.organizations.findByName(name)) throw invalidRequest("An organization with this name already exists.", "organization");
    const organization = this.deps.organizations.create({ name, plan: "default", status: "waitlist" });
    await this.deps.accounts.createUser({ email, password: input.password as string, role: "member", organizationId: organization.id });
  }

  me(actor: Actor): { email: string; role: string; csrfToken: string; organization: { id: string; name: string; status: string; plan: string } | null } {
    const organization = actor.organizationId ? this.organization(actor.organizationId) : undefined;
    return {
      email: actor.email,
      role: actor.role,
      csrfToken: actor.csrfToken,
      organization: organization ? { id: organization.id, name: organization.name, status: organization.status, plan: organization.plan } : null,
    };
  }

  listKeys(actor: Actor): ApiKeyInfo[] {
    return this.deps.keys.listForOrganization(this.memberOrganization(actor).id);
  }

  /** Creates a key; its secret is in this answer and nowhere else, ever. */
  createKey(actor: Actor, input: { name: unknown; expiresIn: unknown }): { key: ApiKeyInfo; secret: string } {
    const organization = this.memberOrganization(actor);
    if (organization.status !== "active") throw new SluiceError("organization_inactive", "Your organization is not active yet; keys can be created once an operator activates it.");
    const name = typeof input.name === "string" ? input.name.trim() : "";
    if (!name || name.length > 100) throw invalidRequest("Give the key a label (at most 100 characters).", "name");
    let expiresInMs: number | undefined;
    if (input.expiresIn !== undefined && input.expiresIn !== null && input.expiresIn !== "") {
      expiresInMs = typeof input.expiresIn === "string" ? parseDuration(input.expiresIn) : undefined;
      if (expiresInMs === undefined) throw invalidRequest("The expiry must look like 90s, 30m, 12h or 30d.", "expires_in");
    }
    return this.deps.keys.create({ organizationId: organization.id, name, expiresInMs });
  }

  revokeKey(actor: Actor, keyId: string): ApiKeyInfo {
    const organization = this.memberOrganization(actor);
    const key = this.deps.keys.find(keyId);
    // Another organization's key looks exactly like a key that does not exist.
    if (!key || key.organizationId !== organization.id) throw new SluiceError("not_found", "No such key.");
    const revoked = this.deps.keys.revoke(keyId);
    this.deps.auth.invalidate();
    return revoked;
  }

  usage(actor: Actor) {
    const organization = this.memberOrganization(actor);
    const plan = this.deps.config.plans.find((candidate) => candidate.id === organization.plan);
    const snapshot = plan ? this.deps.admission.snapshot(organization.id, plan, this.deps.clock()) : undefined;
    return { plan: organization.plan, snapshot, series: this.series(organization.id) };
  }

  listOrganizations(actor: Actor) {
    this.requireOperator(actor);
    const now = this.deps.clock();
    return this.deps.organizations.list().map((organization) => {
      const plan = this.deps.config.plans.find((candidate) => candidate.id === organization.plan);
      const snapshot = plan ? this.deps.admission.snapshot(organization.id, plan, now) : undefined;
      return { ...organization, fiveHourTokens: snapshot?.fiveHours.used ?? 0, monthTokens: snapshot?.month.used ?? 0 };
    });
  }

  updateOrganization(actor: Actor, organizationId: string, input: { status?: unknown; plan?: unknown }): Organization {
    this.requireOperator(actor);
    const organization = this.organization(organizationId);
    if (!organization) throw new SluiceError("not_found", "No such organization.");
    if (input.status !== undefined && !(organizationStatuses as readonly unknown[]).includes(input.status)) {
      throw invalidRequest(`status must be one of ${organizationStatuses.join(", ")}.`, "status");
    }
    if (input.plan !== undefined && !this.deps.config.plans.some((plan) => plan.id === input.plan)) throw invalidRequest("Unknown plan.", "plan");
    const updated = this.deps.organizations.update(organization.name, { status: input.status as OrganizationStatus | undefined, plan: input.plan as string | undefined });
    this.deps.auth.invalidate();
    return updated;
  }

  listModels(actor: Actor) {
    this.requireOperator(actor);
    return this.deps.models.all().map((model) => ({ id: model.id, backend: model.backend, enabled: model.enabled, ...(this.deps.queues.get(model.id)?.stats() ?? { active: 0, queued: 0 }) }));
  }

  plans(): string[] {
    return this.deps.config.plans.map((plan) => plan.id);
  }

  private series(organizationId: string): UsageSeries {
    const now = this.deps.clock();
    const firstHour = Math.floor(now / hourMs) - 23;
    const hours = Array.from({ length: 24 }, (_, index) => (firstHour + index) * hourMs);
    const rows = this.deps.sqlite
      .query<{ hour: number; model: string; keyName: string; tokens: number }, [string, number]>(
        `SELECT l.ended_at / ${hourMs} AS hour, l.model AS model, coalesce(k.name, l.key_id) AS keyName, sum(l.prompt_tokens + l.completion_tokens) AS tokens
           FROM usage_ledger l LEFT JOIN api_keys k ON k.id = l.key_id
          WHERE l.organization_id = ? AND l.ended_at >= ? GROUP BY hour, l.model, l.key_id`,
      )
      .all(organizationId, firstHour * hourMs);
    const series: UsageSeries = { hours, byModel: {}, byKey: {} };
    for (const row of rows) {
      const index = row.hour - firstHour;
      if (index < 0 || index >= 24) continue;
      const byModel = (series.byModel[row.model] ??= Array<number>(24).fill(0));
      byModel[index] = (byModel[index] ?? 0) + row.tokens;
      const byKey = (series.byKey[row.keyName] ??= Array<number>(24).fill(0));
      byKey[index] = (byKey[index] ?? 0) + row.tokens;
    }
    return series;
  }

  private organization(id: string): Organization | undefined {
    return this.deps.organizations.findById(id);
  }

  private memberOrganization(actor: Actor): Organization {
    if (actor.role !== "member" || !actor.organizationId) throw forbidden();
    const organization = this.organization(actor.organizationId);
    if (!organization) throw forbidden();
    return organization;
  }

  private requireOperator(actor: Actor): void {
    if (actor.role !== "operator") throw forbidden();
  }
}
