import { randomId } from "../../ids";
import type { ChangeFeed, Organization, OrganizationRepository, OrganizationStatus } from "../../storage/types";
import { changedFields, type AuditActor, type AuditLog } from "../audit/service";
import { checkNetworks } from "../keys/networks";

export const organizationStatuses = ["active", "waitlist", "suspended"] as const;
export type { Organization, OrganizationStatus };

export class OrganizationError extends Error {
  override name = "OrganizationError";
}

/** The name asked for is taken, found before the insert or by the name's unique index during it. */
export class OrganizationExistsError extends OrganizationError {
  constructor(name: string) {
    super(`organization "${name}" already exists`);
  }
}

/** The configured plans' ids: a set of them, or the server's plans by id (filled again when it reloads). */
export interface PlanIds {
  has(id: string): boolean;
  keys(): Iterable<string>;
}

/** Organizations: create, change plan or status, list. Plans are checked against the configuration. */
export class OrganizationService {
  constructor(
    private readonly repository: OrganizationRepository,
    private readonly planIds: PlanIds,
    private readonly audit: AuditLog,
    /** Told of every change of plan, status or networks, so that every instance's key cache sees it at once. */
    private readonly changes?: ChangeFeed,
  ) {}

  async create(input: { name: string; plan?: string; status?: OrganizationStatus; networks?: string[] | null }, actor: AuditActor): Promise<Organization> {
    const name = input.name.trim();
    if (!name) throw new OrganizationError("organization name must not be empty");
    const plan = this.checkPlan(input.plan ?? "default");
    const networks = checkNetworks(input.networks ?? null);
    if (await this.findByName(name)) throw new OrganizationExistsError(name);
    const row: Organization = { id: randomId("org_", 12), name, plan, status: input.status ?? "active", createdAt: Date.now(), networks };
    // Nothing caches an organization before it exists: no instance needs telling.
    try {
      await this.repository.insert(row);
    } catch (error) {
      // The same name created at the same moment by another request or instance: the name's unique index said no.
      if (await this.findByName(name)) throw new OrganizationExistsError(name);
      throw error;
    }
    await this.audit.record(actor, "organization.created", row.name, {
      organizationId: row.id,
      changes: { plan: [null, row.plan], status: [null, row.status], ...(networks === null ? {} : { networks: [null, networks] }) },
    });
    return row;
  }

  /**
   * Changes an organization's plan, status or networks (null: anywhere; checked here, a NetworkListError otherwise);
   * every instance applies them from its next request.
   */
  async update(name: string, changes: { plan?: string; status?: OrganizationStatus; networks?: string[] | null }, actor: AuditActor): Promise<Organization> {
    const existing = await this.requireByName(name);
    const plan = changes.plan === undefined ? existing.plan : this.checkPlan(changes.plan);
    const status = changes.status ?? existing.status;
    const networks = changes.networks === undefined ? existing.networks : checkNetworks(changes.networks);
    const updated = { ...existing, plan, status, networks };
    const changed = changedFields(existing, updated, ["plan", "status", "networks"]);
    // Nothing changed, nothing to record or announce.
    if (!changed) return updated;
    await this.repository.update(existing.id, { plan, status, networks });
    await this.changes?.announce();
    await this.audit.record(actor, "organization.updated", existing.name, { organizationId: existing.id, changes: changed });
    return updated;
  }

  list(): Promise<Organization[]> {
    return this.repository.list();
  }

  findById(id: string): Promise<Organization | undefined> {
    return this.repository.findById(id);
  }

  findByName(name: string): Promise<Organization | undefined> {
    return this.repository.findByName(name);
  }

  async requireByName(name: string): Promise<Organization> {
    const found = await this.findByName(name);
    if (!found) throw new OrganizationError(`no organization named "${name}"`);
    return found;
  }

  private checkPlan(plan: string): string {
    if (!this.planIds.has(plan)) throw new OrganizationError(`unknown plan "${plan}" (configured: ${[...this.planIds.keys()].join(", ")})`);
    return plan;
  }
}
