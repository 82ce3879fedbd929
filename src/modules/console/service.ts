import type { PlanConfig } from "../../config/schema";
import { SluiceError, invalidRequest } from "../../errors";
import { randomToken } from "../../ids";
import type { AdmissionStore } from "../admission/store";
import type { AuthService } from "../auth/service";
import { parseDuration, parseGrace, parseTimeBound, timeBoundForms } from "../keys/duration";
import { checkOutcome, defaultPageSize, maxPageSize, type RequestLogPage, type RequestLogService } from "../requests/service";
import { checkNetworks, NetworkListError } from "../keys/networks";
import { capsOf, checkKeyModels, KeyError, type ApiKeyInfo, type KeyService } from "../keys/service";
import type { SingleSignOn } from "./sso";
import type { ModelRegistry } from "../models/registry";
import { OrganizationExistsError, organizationStatuses, type Organization, type OrganizationService, type OrganizationStatus } from "../organizations/service";
import type { Queue } from "../queue/model-queue";
import type { AuditEntry, ConsoleTokenInfo, RequestLogFilter, UsageRepository } from "../../storage/types";
import { auditActions, type AuditActor, type AuditLog } from "../audit/service";
import type { AccountService, Actor } from "./accounts";
import type {
  AuditQueryInput,
  CreateKey,
  CreateOrganization,
  CreateMember,
  CreateToken,
  KeyLimitsInput,
  RequestLogQueryInput,
  RotateKey,
  SignUp,
  UpdateOrganization,
  UsageReportQueryInput,
} from "./model";
import { ReportRequestError, usageReport, type UsageReport } from "../usage/report";
import { tokenNotFound } from "./tokens";
import { restoreKeyFromLedger } from "../admission/ledger-usage";
import type { UsageSnapshot } from "../admission/store";
import { keyLimitsOf } from "../auth/service";
import type { KeyLimits } from "../../storage/types";
import { hourMs } from "../../usage-periods";

export interface ConsoleDependencies {
  accounts: AccountService;
  organizations: OrganizationService;
  keys: KeyService;
  auth: AuthService;
  admission: AdmissionStore;
  models: ModelRegistry;
  queues: ReadonlyMap<string, Queue>;
  /** The configured plans by id; a reloaded configuration's from then on. */
  plans: ReadonlyMap<string, PlanConfig>;
  usage: UsageRepository;
  requestLog: RequestLogService;
  audit: AuditLog;
  clock: () => number;
  /** Whether anyone may sign up (`[console] sign_up`); false: operators create the accounts. */
  signUpOpen: () => boolean;
  /** The company's identity provider (`[console.sso]`), when one is set up. */
  singleSignOn?: () => SingleSignOn | undefined;
  /** `[console] networks`: the only networks the console answers; undefined: anywhere. */
  consoleNetworks?: () => readonly string[] | undefined;
}

/** Tokens per hour over the last day, by model and by key. */
export interface UsageSeries {
  hours: number[];
  byModel: Record<string, number[]>;
  byKey: Record<string, number[]>;
}

function limitsOf(input: KeyLimitsInput): KeyLimits {
  return {
    maxConcurrency: input.max_concurrency ?? null,
    tokensPer5h: input.tokens_per_5h ?? null,
    tokensPerMonth: input.tokens_per_month ?? null,
    requestsPerMinute: input.requests_per_minute ?? null,
  };
}

function pageSize(limit: string | undefined): number {
  const size = limit === undefined ? defaultPageSize : Number(limit);
  if (!(size >= 1 && size <= maxPageSize)) throw invalidRequest(`limit must be from 1 to ${maxPageSize}.`, "limit");
  return size;
}

function auditActor(actor: Actor): AuditActor {
  return actor.tokenName === undefined
    ? { kind: "console", name: actor.email, address: actor.address }
    : { kind: "token", name: `${actor.email} [${actor.tokenName}]`, address: actor.address };
}

function forbidden(): SluiceError {
  return new SluiceError("forbidden", "You do not have access to this.");
}

/** A body's `expires_in` in milliseconds; undefined for none. */
function expiryOf(text: string | null | undefined): number | undefined {
  if (!text) return undefined;
  const milliseconds = parseDuration(text);
  if (milliseconds === undefined) throw invalidRequest("The expiry must look like 90s, 30m, 12h or 30d.", "expires_in");
  return milliseconds;
}

function checkStatus(status: string): void {
  if (!(organizationStatuses as readonly string[]).includes(status))
    throw invalidRequest(`status must be one of ${organizationStatuses.join(", ")}.`, "status");
}

/**
 * What only a signed-in session may do: sign out, and make or revoke console tokens (a leaked token must not be able
 * to mint others that outlive its revocation).
 */
export function requireSession(actor: Actor): void {
  if (actor.tokenName !== undefined) throw new SluiceError("forbidden", "This needs a signed-in session, not a console token.");
}

/**
 * Everything the console can do, with the authorization in one place: a member sees and changes only its own
 * organization; operator operations need the operator role. Routes pass the actor and never decide access.
 */
export class ConsoleService {
  constructor(private readonly deps: ConsoleDependencies) {}

  /** How the sign-in page may let people in: sign-up, the single sign-on button's text (null: none), passwords. */
  signUpSetting(): { open: boolean; sso: string | null; passwords: boolean } {
    const passwords = this.passwordsOn();
    return { open: this.deps.signUpOpen() && passwords, sso: this.singleSignOn()?.settings.label ?? null, passwords };
  }

  /** Whether passwords sign in and sign up: unless `[console.sso] passwords = false` makes single sign-on the only way. */
  passwordsOn(): boolean {
    return this.singleSignOn()?.settings.passwords ?? true;
  }

  /** 403 when passwords are off (see passwordsOn), before any password is looked at. */
  requirePasswords(): void {
    if (!this.passwordsOn()) {
      throw new SluiceError("forbidden", "Passwords are off on this console: sign in with single sign-on ([console.sso] passwords = false).");
    }
  }

  singleSignOn(): SingleSignOn | undefined {
    return this.deps.singleSignOn?.();
  }

  consoleNetworks(): readonly string[] | undefined {
    return this.deps.consoleNetworks?.();
  }

  /**
   * Opens a session for an email the identity provider vouched for. One without an account gets a member account in
   * `[console.sso] organization` when that is set (just in time: nobody has to make two hundred accounts by hand), with
   * a random password nobody knows; otherwise it is refused.
   */
  async signInVerified(email: string, address?: string): Promise<{ token: string; actor: Actor }> {
    const joining = this.singleSignOn()?.settings.organization;
    if (joining !== undefined && !(await this.deps.accounts.findByEmail(email))) {
      const organization = await this.deps.organizations.findByName(joining);
      if (!organization) {
        const reason = `No console account for ${email}, and ${joining}, the organization new members join, does not exist: ask an operator.`;
        await this.deps.accounts.ssoRefused(reason, address);
        throw new SluiceError("not_signed_in", reason);
      }
      const actor: AuditActor = { kind: "console", name: email, address };
      await this.deps.accounts.createUser({ email, password: randomToken(32), role: "member", organizationId: organization.id }, actor);
    }
    return await this.deps.accounts.signInVerified(email, { address });
  }

  /** Sign-up creates the organization on the waitlist and its first member; 403 when sign-up is closed. */
  async signUp(input: SignUp, address?: string): Promise<void> {
    this.requirePasswords();
    if (!this.deps.signUpOpen()) throw new SluiceError("forbidden", "Sign-up is closed here: ask an operator for an account.");
    const name = input.organization.trim();
    if (!name || name.length > 100) throw invalidRequest("Enter your organization's name (at most 100 characters).", "organization");
    // Both checked before anything is created, so that a refused sign-up leaves no organization behind.
    const email = await this.deps.accounts.checkNewAccount(input.email, input.password);
    if (await this.deps.organizations.findByName(name)) throw invalidRequest("An organization with this name already exists.", "organization");
    // The new member is the actor of its own sign-up.
    const actor: AuditActor = { kind: "console", name: email, address };
    const organization = await this.newOrganization({ name, plan: "default", status: "waitlist" }, actor, "organization");
    await this.deps.accounts.createUser({ email, password: input.password, role: "member", organizationId: organization.id }, actor);
  }

  async me(actor: Actor): Promise<{
    email: string;
    role: string;
    csrfToken: string;
    organization: { id: string; name: string; status: string; plan: string; models: string[]; networks: string[] | null } | null;
  }> {
    const organization = actor.organizationId ? await this.organization(actor.organizationId) : undefined;
    return {
      email: actor.email,
      role: actor.role,
      csrfToken: actor.csrfToken,
      organization: organization
        ? {
            id: organization.id,
            name: organization.name,
            status: organization.status,
            plan: organization.plan,
            models: this.planModels(organization.plan),
            networks: organization.networks,
          }
        : null,
    };
  }

  /** The model ids an organization's plan includes: what its keys may be limited to. */
  private planModels(planId: string): string[] {
    const plan = this.deps.plans.get(planId);
    return plan ? this.deps.models.idsIn(plan) : [];
  }

  /** The plan's models whose tokens count other than once against the quotas: model id → its quota weight. */
  private planWeights(planId: string): Record<string, number> {
    const weights: Record<string, number> = {};
    for (const id of this.planModels(planId)) {
      const weight = this.deps.models.named(id)?.config.quotaWeight ?? 1;
      if (weight !== 1) weights[id] = weight;
    }
    return weights;
  }

  /** A key's models as the body gives them, checked against the plan's (400 naming `models` otherwise). */
  private keyModels(planId: string, models: string[] | null | undefined): string[] | null | undefined {
    if (models === undefined) return undefined;
    try {
      return checkKeyModels(models, this.planModels(planId));
    } catch (error) {
      if (error instanceof KeyError) throw invalidRequest(`${error.message} (the models of your plan).`, "models");
      throw error;
    }
  }

  /** A key's or an organization's networks as the body gives them, checked (400 naming `networks` otherwise). */
  private checkedNetworks(networks: string[] | null | undefined): string[] | null | undefined {
    if (networks === undefined) return undefined;
    try {
      return checkNetworks(networks);
    } catch (error) {
      if (error instanceof NetworkListError) throw invalidRequest(`${error.message}.`, "networks");
      throw error;
    }
  }

  /** A member's own organization's keys, or (operators) those of the organization named. */
  async listKeys(actor: Actor, organizationId?: string): Promise<ApiKeyInfo[]> {
    return await this.deps.keys.listForOrganization((await this.organizationFor(actor, organizationId)).id);
  }

  /**
   * Creates a key in a member's own organization, or (operators) in the organization named; its secret is in this
   * answer and nowhere else, ever.
   */
  async createKey(actor: Actor, input: CreateKey, organizationId?: string): Promise<{ key: ApiKeyInfo; secret: string }> {
    const organization = await this.organizationFor(actor, organizationId);
    if (organization.status !== "active") {
      throw new SluiceError(
        "organization_inactive",
        organizationId === undefined
          ? "Your organization is not active yet; keys can be created once an operator activates it."
          : `The organization is ${organization.status}; activate it before creating keys.`,
      );
    }
    const name = input.name.trim();
    if (!name) throw invalidRequest("Give the key a label (at most 100 characters).", "name");
    const expiresInMs = expiryOf(input.expires_in);
    const models = this.keyModels(organization.plan, input.models) ?? null;
    const networks = this.checkedNetworks(input.networks) ?? null;
    return await this.deps.keys.create({ organizationId: organization.id, name, expiresInMs, limits: limitsOf(input), models, networks }, auditActor(actor));
  }

  /**
   * Sets a key's own caps (all four: absent or null is none) and, when given, its models (null: every model of the
   * plan) and networks (null: anywhere); the next request is held to them.
   */
  async setKeyLimits(actor: Actor, keyId: string, input: KeyLimitsInput): Promise<ApiKeyInfo> {
    const { organization } = await this.keyFor(actor, keyId);
    const models = this.keyModels(organization.plan, input.models);
    const networks = this.checkedNetworks(input.networks);
    if (models !== undefined || networks !== undefined) await this.deps.keys.setLists(keyId, { models, networks }, auditActor(actor));
    const updated = await this.deps.keys.setLimits(keyId, limitsOf(input), auditActor(actor));
    this.deps.auth.invalidate();
    // The caps hold from the key's next request, counting what it used before: its usage into the store that
    // enforces them (Redis in shared mode; a server on the same SQLite file in another process notices by itself).
    await restoreKeyFromLedger(this.deps.admission, this.deps.usage, updated, this.deps.clock());
    return updated;
  }

  /**
   * Replaces a key (see KeyService.rotate): the new key's secret is in this answer and nowhere else; the old key works
   * for `grace` more (24 hours unless given).
   */
  async rotateKey(actor: Actor, keyId: string, input: RotateKey): Promise<{ key: ApiKeyInfo; secret: string; previous: ApiKeyInfo }> {
    await this.keyFor(actor, keyId);
    const graceMs = parseGrace(input.grace ?? "24h");
    if (graceMs === undefined) throw invalidRequest("grace must be now, or look like 90s, 30m, 12h or 30d.", "grace");
    const expiresInMs = expiryOf(input.expires_in);
    try {
      const rotated = await this.deps.keys.rotate(keyId, { graceMs, expiresInMs, now: this.deps.clock() }, auditActor(actor));
      this.deps.auth.invalidate();
      return rotated;
    } catch (error) {
      if (error instanceof KeyError) throw invalidRequest(`${error.message}.`);
      throw error;
    }
  }

  async revokeKey(actor: Actor, keyId: string): Promise<ApiKeyInfo> {
    await this.keyFor(actor, keyId);
    const revoked = await this.deps.keys.revoke(keyId, auditActor(actor));
    this.deps.auth.invalidate();
    return revoked;
  }

  /** A member's own organization's usage, or (operators) that of the organization named. */
  async usage(actor: Actor, organizationId?: string) {
    const organization = await this.organizationFor(actor, organizationId);
    const plan = this.deps.plans.get(organization.plan);
    const now = this.deps.clock();
    const snapshot = plan ? await this.deps.admission.snapshot(organization.id, plan, now) : undefined;
    // Each key with caps of its own, against them.
    const keys: { id: string; name: string; limits: KeyLimits; snapshot: UsageSnapshot }[] = [];
    for (const key of await this.deps.keys.listForOrganization(organization.id)) {
      const limits = keyLimitsOf(key);
      if (!limits || key.revokedAt !== null) continue;
      keys.push({
        id: key.id,
        name: key.name,
        limits: capsOf(key),
        snapshot: await this.deps.admission.keySnapshot(organization.id, { id: key.id, limits }, now),
      });
    }
    return { plan: organization.plan, snapshot, keys, weights: this.planWeights(organization.plan), series: await this.series(organization.id) };
  }

  async listOrganizations(actor: Actor) {
    this.requireOperator(actor);
    const now = this.deps.clock();
    const organizations = await this.deps.organizations.list();
    return await Promise.all(
      organizations.map(async (organization) => {
        const plan = this.deps.plans.get(organization.plan);
        const snapshot = plan ? await this.deps.admission.snapshot(organization.id, plan, now) : undefined;
        return {
          ...organization,
          fiveHourTokens: snapshot?.fiveHours.used ?? 0,
          monthTokens: snapshot?.month.used ?? 0,
          // What its keys may be limited to, for the operator's key form.
          models: this.planModels(organization.plan),
        };
      }),
    );
  }

  /** A member account in an organization, made by an operator (where sign-up is closed, the only way to one). */
  async createMember(actor: Actor, organizationId: string, input: CreateMember): Promise<{ email: string; role: string; organizationId: string }> {
    const organization = await this.organizationFor(actor, organizationId);
    const user = await this.deps.accounts.createUser(
      { email: input.email, password: input.password, role: "member", organizationId: organization.id },
      auditActor(actor),
    );
    return { email: user.email, role: user.role, organizationId: organization.id };
  }

  /** Creates an organization (operators): active on the `default` plan unless the body says otherwise. */
  async createOrganization(actor: Actor, input: CreateOrganization): Promise<Organization> {
    this.requireOperator(actor);
    if (input.status !== undefined) checkStatus(input.status);
    const plan = input.plan ?? "default";
    if (!this.deps.plans.has(plan)) throw invalidRequest(input.plan === undefined ? 'No plan is named "default": name one.' : "Unknown plan.", "plan");
    if (!input.name.trim()) throw invalidRequest("Give the organization a name (at most 100 characters).", "name");
    return await this.newOrganization({ name: input.name, plan, status: input.status as OrganizationStatus | undefined }, auditActor(actor), "name");
  }

  /** Creates an organization whose input was checked; a name taken meanwhile (another request, another instance) is 400. */
  private async newOrganization(input: { name: string; plan: string; status?: OrganizationStatus }, actor: AuditActor, param: string): Promise<Organization> {
    try {
      return await this.deps.organizations.create(input, actor);
    } catch (error) {
      if (error instanceof OrganizationExistsError) throw invalidRequest("An organization with this name already exists.", param);
      throw error;
    }
  }

  async updateOrganization(actor: Actor, organizationId: string, input: UpdateOrganization): Promise<Organization> {
    this.requireOperator(actor);
    const organization = await this.organization(organizationId);
    if (!organization) throw new SluiceError("not_found", "No such organization.");
    if (input.status !== undefined) checkStatus(input.status);
    if (input.plan !== undefined && !this.deps.plans.has(input.plan)) throw invalidRequest("Unknown plan.", "plan");
    const networks = this.checkedNetworks(input.networks);
    const updated = await this.deps.organizations.update(
      organization.name,
      { status: input.status as OrganizationStatus | undefined, plan: input.plan, networks },
      auditActor(actor),
    );
    this.deps.auth.invalidate();
    return updated;
  }

  listModels(actor: Actor) {
    this.requireOperator(actor);
    const servers = new Map(this.deps.models.servers().map((entry) => [entry.model, entry.servers]));
    return this.deps.models.all().map((model) => ({
      id: model.id,
      backend: model.backend,
      enabled: model.enabled,
      fallbacks: model.fallbacks,
      contextFallbacks: model.contextFallbacks,
      ...(this.deps.queues.get(model.id)?.stats() ?? { active: 0, queued: 0 }),
      // The limits in force, as the last (re)loaded configuration set them.
      maxConcurrency: model.maxConcurrency ?? null,
      queueSize: model.queueSize,
      quotaWeight: model.quotaWeight,
      servers: servers.get(model.id) ?? [],
    }));
  }

  /** Tokens by organization and model (or key): a member's own organization, or (operators) every one or the one asked for. */
  async usageReport(actor: Actor, query: UsageReportQueryInput): Promise<UsageReport> {
    const organizationId = await this.organizationScope(actor, query.organization);
    try {
      return await usageReport(this.deps.usage, { month: query.month, by: query.by }, this.deps.clock(), organizationId);
    } catch (error) {
      if (error instanceof ReportRequestError) throw invalidRequest(error.message, error.param);
      throw error;
    }
  }

  /** A page of the request log: a member's own organization, or (operators) every one or the one asked for. */
  async requests(actor: Actor, query: RequestLogQueryInput): Promise<RequestLogPage> {
    return await this.deps.requestLog.page(await this.requestFilter(actor, query), { cursor: query.cursor, limit: pageSize(query.limit) });
  }

  /** The same rows as CSV, streamed. */
  async requestsCsv(actor: Actor, query: RequestLogQueryInput): Promise<ReadableStream<string>> {
    return this.deps.requestLog.csv(await this.requestFilter(actor, query));
  }

  /** The audit trail, operators only, newest first. */
  async auditTrail(actor: Actor, query: AuditQueryInput): Promise<{ entries: AuditEntry[]; nextCursor: string | null }> {
    this.requireOperator(actor);
    const limit = pageSize(query.limit);
    if (query.action && !(auditActions as readonly string[]).includes(query.action))
      throw invalidRequest(`action must be one of ${auditActions.join(", ")}.`, "action");
    if (query.cursor !== undefined && !/^aud_[0-9a-f]{32}$/.test(query.cursor))
      throw invalidRequest("This cursor is not one the audit trail gave out.", "cursor");
    const entries = await this.deps.audit.list({
      since: query.since === undefined ? undefined : this.timeBound(query.since, "since"),
      action: query.action || undefined,
      actor: query.actor || undefined,
      organizationId: query.organization || undefined,
      before: query.cursor,
      limit: limit + 1,
    });
    const more = entries.length > limit;
    if (more) entries.length = limit;
    return { entries, nextCursor: more ? (entries.at(-1)?.id ?? null) : null };
  }

  /** Which organization a read covers: a member's own (naming another is 403), or (operators) the one named or all. */
  private async organizationScope(actor: Actor, asked: string | undefined): Promise<string | undefined> {
    if (actor.role === "operator") return asked || undefined;
    const organizationId = (await this.memberOrganization(actor)).id;
    if (asked && asked !== organizationId) throw forbidden();
    return organizationId;
  }

  private async requestFilter(actor: Actor, query: RequestLogQueryInput): Promise<Omit<RequestLogFilter, "limit" | "after">> {
    const organizationId = await this.organizationScope(actor, query.organization);
    return {
      organizationId,
      keyId: query.key || undefined,
      model: query.model || undefined,
      outcome: query.outcome ? checkOutcome(query.outcome) : undefined,
      requestId: query.id?.trim() || undefined,
      since: query.since ? this.timeBound(query.since, "since") : undefined,
      until: query.until ? this.timeBound(query.until, "until") : undefined,
    };
  }

  private timeBound(text: string, param: string): number {
    const time = parseTimeBound(text, this.deps.clock());
    if (time === undefined) throw invalidRequest(`${param} must be ${timeBoundForms}.`, param);
    return time;
  }

  plans(): string[] {
    return [...this.deps.plans.keys()];
  }

  private async series(organizationId: string): Promise<UsageSeries> {
    const now = this.deps.clock();
    const firstHour = Math.floor(now / hourMs) - 23;
    const hours = Array.from({ length: 24 }, (_, index) => (firstHour + index) * hourMs);
    const rows = await this.deps.usage.hourly(organizationId, firstHour * hourMs);
    const series: UsageSeries = { hours, byModel: {}, byKey: {} };
    for (const row of rows) {
      const index = row.hour - firstHour;
      if (index < 0 || index >= 24) continue;
      const byModel = series.byModel[row.model] ?? Array<number>(24).fill(0);
      series.byModel[row.model] = byModel;
      byModel[index] = (byModel[index] ?? 0) + row.tokens;
      const byKey = series.byKey[row.keyName] ?? Array<number>(24).fill(0);
      series.byKey[row.keyName] = byKey;
      byKey[index] = (byKey[index] ?? 0) + row.tokens;
    }
    return series;
  }

  private organization(id: string): Promise<Organization | undefined> {
    return this.deps.organizations.findById(id);
  }

  /** The console tokens an actor may see: an operator's view is every account's, a member's its own. */
  async listTokens(actor: Actor): Promise<ConsoleTokenInfo[]> {
    requireSession(actor);
    return await this.deps.accounts.tokens.list(actor.role === "operator" ? undefined : actor.userId);
  }

  /** A console token for the signed-in account; its secret is in this answer and nowhere else, ever. */
  async createToken(actor: Actor, input: CreateToken): Promise<{ token: ConsoleTokenInfo; secret: string }> {
    requireSession(actor);
    const expiresInMs = expiryOf(input.expires_in);
    const owner = { id: actor.userId, email: actor.email, organizationId: actor.organizationId };
    return await this.deps.accounts.tokens.create({ owner, name: input.name, expiresInMs, now: this.deps.clock() }, auditActor(actor));
  }

  /** Revokes one of the actor's own tokens, or (operators) anyone's. */
  async revokeToken(actor: Actor, tokenId: string): Promise<ConsoleTokenInfo> {
    requireSession(actor);
    const token = await this.deps.accounts.tokens.find(tokenId);
    if (!token || (actor.role !== "operator" && token.userId !== actor.userId)) throw tokenNotFound();
    return await this.deps.accounts.tokens.revoke(token, auditActor(actor), this.deps.clock());
  }

  /** The organization a route acts on: a member's own, or (operators only) the one named. */
  private async organizationFor(actor: Actor, organizationId: string | undefined): Promise<Organization> {
    if (organizationId === undefined) return await this.memberOrganization(actor);
    this.requireOperator(actor);
    const organization = await this.organization(organizationId);
    if (!organization) throw new SluiceError("not_found", "No such organization.");
    return organization;
  }

  /** A key a member's organization holds, or (operators) any key, with its organization. */
  private async keyFor(actor: Actor, keyId: string): Promise<{ key: ApiKeyInfo; organization: Organization }> {
    const key = await this.deps.keys.find(keyId);
    // Another organization's key looks exactly like a key that does not exist.
    if (actor.role === "operator") {
      const organization = key && (await this.organization(key.organizationId));
      if (!key || !organization) throw new SluiceError("not_found", "No such key.");
      return { key, organization };
    }
    const organization = await this.memberOrganization(actor);
    if (!key || key.organizationId !== organization.id) throw new SluiceError("not_found", "No such key.");
    return { key, organization };
  }

  private async memberOrganization(actor: Actor): Promise<Organization> {
    if (actor.role !== "member" || !actor.organizationId) throw forbidden();
    const organization = await this.organization(actor.organizationId);
    if (!organization) throw forbidden();
    return organization;
  }

  private requireOperator(actor: Actor): void {
    if (actor.role !== "operator") throw forbidden();
  }
}
