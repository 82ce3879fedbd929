import { asc, eq } from "drizzle-orm";
import type { Drizzle } from "../../db/client";
import { organizations } from "../../db/schema";
import { randomId } from "../../ids";

export const organizationStatuses = ["active", "waitlist", "suspended"] as const;
export type OrganizationStatus = (typeof organizationStatuses)[number];
export type Organization = typeof organizations.$inferSelect;

export class OrganizationError extends Error {
  override name = "OrganizationError";
}

/** Organizations: create, change plan or status, list. Plans are checked against the configuration. */
export class OrganizationService {
  constructor(
    private readonly db: Drizzle,
    private readonly planIds: ReadonlySet<string>,
  ) {}

  create(input: { name: string; plan?: string; status?: OrganizationStatus }): Organization {
    const name = input.name.trim();
    if (!name) throw new OrganizationError("organization name must not be empty");
    const plan = this.checkPlan(input.plan ?? "default");
    if (this.findByName(name)) throw new OrganizationError(`organization "${name}" already exists`);
    const row: Organization = { id: randomId("org_", 12), name, plan, status: input.status ?? "active", createdAt: Date.now() };
    this.db.insert(organizations).values(row).run();
    return row;
  }

  update(name: string, changes: { plan?: string; status?: OrganizationStatus }): Organization {
    const existing = this.requireByName(name);
    const plan = changes.plan === undefined ? existing.plan : this.checkPlan(changes.plan);
    const status = changes.status ?? existing.status;
    this.db.update(organizations).set({ plan, status }).where(eq(organizations.id, existing.id)).run();
    return { ...existing, plan, status };
  }

  list(): Organization[] {
    return this.db.select().from(organizations).orderBy(asc(organizations.createdAt)).all();
  }

  findById(id: string): Organization | undefined {
    return this.db.select().from(organizations).where(eq(organizations.id, id)).get();
  }

  findByName(name: string): Organization | undefined {
    return this.db.select().from(organizations).where(eq(organizations.name, name)).get();
  }

  requireByName(name: string): Organization {
    const found = this.findByName(name);
    if (!found) throw new OrganizationError(`no organization named "${name}"`);
    return found;
  }

  private checkPlan(plan: string): string {
    if (!this.planIds.has(plan)) throw new OrganizationError(`unknown plan "${plan}" (configured: ${[...this.planIds].join(", ")})`);
    return plan;
  }
}
