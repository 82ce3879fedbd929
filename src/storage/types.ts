// What the services need from a database, whichever runs: SQLite (one instance, the default) or PostgreSQL (several
// instances, with Redis). Routes and services see only these interfaces; the SQL of each dialect lives beside it.
import type { LedgerRow } from "../ledger/ledger";
import type { AuditActor, AuditEntry } from "../modules/audit/entry";
import type { RequestLogRow } from "../modules/requests/row";
import type { KeyLists } from "./key-lists";

export type { AuditActor, AuditEntry, RequestLogRow };

export type OrganizationStatus = "active" | "waitlist" | "suspended";

export interface Organization {
  id: string;
  name: string;
  plan: string;
  status: OrganizationStatus;
  createdAt: number;
  /** The networks its keys may be used from, unless a key names its own; null: anywhere. */
  networks: string[] | null;
}

/** An organization as created: bound to no networks unless given. */
export type NewOrganization = Omit<Organization, "networks"> & { networks?: string[] | null };

/** What an update of an organization sets. */
export type OrganizationChanges = Pick<Organization, "plan" | "status" | "networks">;

/** A key's own caps inside its organization's plan; null: none. */
export interface KeyLimits {
  maxConcurrency: number | null;
  tokensPer5h: number | null;
  tokensPerMonth: number | null;
  requestsPerMinute: number | null;
}

/** A key that has at least one cap of its own. */
export interface LimitedKey extends KeyLimits {
  id: string;
  organizationId: string;
  /** Its label. */
  name: string;
  expiresAt: number | null;
  revokedAt: number | null;
}

export interface ApiKey extends KeyLimits {
  id: string;
  /** The models the key may call (ids, within its plan's); null: every model of its plan. */
  models: string[] | null;
  /** The networks the key may be used from (addresses and CIDR ranges); null: anywhere. */
  networks: string[] | null;
  organizationId: string;
  name: string;
  prefix: string;
  /** SHA-256 of the whole key, hex. The key itself is never stored. */
  hash: string;
  createdAt: number;
  lastUsedAt: number | null;
  expiresAt: number | null;
  revokedAt: number | null;
}

/** What may be shown about a key: everything but its hash. */
export type ApiKeyInfo = Omit<ApiKey, "hash">;

/** A key with what authentication needs of its organization. */
export interface KeyCredentials extends KeyLimits {
  hash: string;
  /** The models the key may call; null: every model of its plan. */
  models: string[] | null;
  /** The networks the key may be used from; null: anywhere (or its organization's, when they are set). */
  networks: string[] | null;
  /** Its organization's networks; null: anywhere. */
  organizationNetworks: string[] | null;
  keyId: string;
  organizationId: string;
  organizationName: string;
  organizationStatus: string;
  planId: string;
  expiresAt: number | null;
  revokedAt: number | null;
}

export type Role = "member" | "operator";

export interface User {
  id: string;
  email: string;
  passwordHash: string;
  role: Role;
  organizationId: string | null;
  createdAt: number;
}

export interface Session {
  tokenHash: string;
  userId: string;
  csrfToken: string;
  createdAt: number;
  expiresAt: number;
}

/** A session's user, as the console needs it. */
export interface SessionUser {
  userId: string;
  email: string;
  role: Role;
  organizationId: string | null;
  csrfToken: string;
}

/** A console access token as stored: its SHA-256, never the token. */
export interface ConsoleToken {
  id: string;
  userId: string;
  name: string;
  tokenHash: string;
  prefix: string;
  createdAt: number;
  expiresAt: number | null;
  revokedAt: number | null;
  /** To the minute; null until first used. */
  lastUsedAt: number | null;
}

/** A token as lists show it: everything but its hash, with its account's email. */
export type ConsoleTokenInfo = Omit<ConsoleToken, "tokenHash"> & { email: string };

/** A token's account, as the console needs it. */
export interface TokenUser {
  tokenId: string;
  tokenName: string;
  userId: string;
  email: string;
  role: Role;
  organizationId: string | null;
}

/** Ledger usage of one organization in one minute, for rebuilding the 5-hour window. */
export interface LedgerBucket {
  tokens: number;
  lastTime: number;
}

export interface OrganizationUsage {
  buckets: LedgerBucket[];
  monthTokens: number;
}

export interface HourlyUsage {
  hour: number;
  model: string;
  keyName: string;
  tokens: number;
}

/** What a usage report covers: whole UTC hours from `firstHour` to before `endHour` (hours since the epoch). */
export interface UsageReportFilter {
  firstHour: number;
  endHour: number;
  /**
   * Set when those hours are one calendar month (its number, as monthOf gives it): read from usage_key_months, a row
   * per key and model, rather than usage_hours, a row per hour of each (a month's report at a million rows: under 10
   * ms rather than 300-450, bench/request-log.ts).
   */
  month?: number;
  /** One organization's rows only. */
  organizationId?: string;
  by: "model" | "key";
}

/** Tokens (prompt + completion) one organization spent on one model, or through one key, in a report's hours. */
export interface UsageReportRow {
  organizationId: string;
  organization: string;
  /** The model's id, or the key's label. */
  group: string;
  /** By key: the key's id (labels may repeat); by model: null. */
  keyId: string | null;
  /** promptTokens + completionTokens. */
  tokens: number;
  promptTokens: number;
  completionTokens: number;
  /** Of the prompt tokens, those the upstream read from its prompt cache. */
  cachedTokens: number;
}

export interface RefusalCount {
  ruleId: string;
  count: number;
  last: number;
}

export interface RecentRefusal {
  endedAt: number;
  requestId: string;
  organization: string | null;
  model: string;
  ruleId: string;
}

export interface OrganizationRepository {
  insert(row: NewOrganization): Promise<void>;
  update(id: string, changes: OrganizationChanges): Promise<void>;
  list(): Promise<Organization[]>;
  findById(id: string): Promise<Organization | undefined>;
  findByName(name: string): Promise<Organization | undefined>;
}

export interface KeyRepository {
  insert(row: ApiKey): Promise<void>;
  listForOrganization(organizationId: string): Promise<ApiKeyInfo[]>;
  find(keyId: string): Promise<ApiKeyInfo | undefined>;
  revoke(keyId: string, at: number): Promise<void>;
  setLimits(keyId: string, limits: KeyLimits): Promise<void>;
  setExpiry(keyId: string, expiresAt: number | null): Promise<void>;
  /** Sets the models a key may call and the networks it may be used from; null: no restriction. */
  setLists(keyId: string, lists: KeyLists): Promise<void>;
  /** Every key with a cap of its own (a partial index holds only them). */
  limited(): Promise<LimitedKey[]>;
  /** The key with this hash and its organization, for authentication. */
  credentials(hash: string): Promise<KeyCredentials | undefined>;
}

export interface AccountRepository {
  findUserByEmail(email: string): Promise<User | undefined>;
  insertUser(user: User): Promise<void>;
  /** Stores a new session and drops expired ones. */
  openSession(session: Session, now: number): Promise<void>;
  sessionUser(tokenHash: string, now: number): Promise<SessionUser | undefined>;
  closeSession(tokenHash: string): Promise<void>;
  /** Failed sign-ins of an email in its current window (shared by every instance on PostgreSQL). */
  failures(email: string): Promise<{ count: number; since: number } | undefined>;
  /** Counts one more failure: in the current window if it started after `windowStart`, else in a new one. */
  addFailure(email: string, now: number, windowStart: number): Promise<void>;
  clearFailures(email: string): Promise<void>;
  insertToken(token: ConsoleToken): Promise<void>;
  /** Every token, or one account's; newest first. */
  listTokens(userId?: string): Promise<ConsoleTokenInfo[]>;
  findToken(id: string): Promise<ConsoleTokenInfo | undefined>;
  revokeToken(id: string, at: number): Promise<void>;
  /** The account of a token with this hash that is neither revoked nor expired. */
  tokenUser(tokenHash: string, now: number): Promise<TokenUser | undefined>;
  /** Records that a token was used at `at` (a later time is never put back). */
  touchToken(id: string, at: number): Promise<void>;
}

export interface UsageRepository {
  /** What each organization (or one) used in the last 5 hours per minute and this month, from the aggregates. */
  read(now: number, organizationId?: string): Promise<Map<string, OrganizationUsage>>;
  /** Drops minute aggregates no window can need any more. */
  prune(now: number): Promise<void>;
  /** An operator's reset: usage that ended before `at` no longer counts, also after a restart. */
  reset(organizationId: string, at: number): Promise<void>;
  /** Every organization's last reset time. */
  resets(): Promise<Map<string, number>>;
  /**
   * What one key used in the last 5 hours per minute (its ledger rows, through the (key, time) index) and this month
   * (usage_hours, and the rows of the hour the month or the last reset starts in), for keys with caps. Rows before
   * the last reset of the key's organization do not count.
   */
  keyUsage(keyId: string, now: number): Promise<OrganizationUsage>;
  /** Tokens per hour, model and key since `since` (an hour's start), from usage_hours: resets do not hide them. */
  hourly(organizationId: string, since: number): Promise<HourlyUsage[]>;
  /**
   * Tokens by organization and model (or key) over whole hours, from usage_hours: organizations by name (ignoring case),
   * then the most tokens first.
   */
  report(filter: UsageReportFilter): Promise<UsageReportRow[]>;
  refusalsByRule(since: number): Promise<RefusalCount[]>;
  recentRefusals(since: number, limit: number): Promise<RecentRefusal[]>;
  /**
   * The requests that started at or after `since`, oldest first, from the ledger: the requests-per-minute buckets are
   * read back from them when a single instance starts (MemoryAdmissionStore's restoreRequests) and when Redis lost its
   * data (RedisAdmissionStore's rebuild).
   */
  startsSince(since: number): Promise<RequestStart[]>;
}

/** When a recorded request started, and whose it was. */
export interface RequestStart {
  organizationId: string;
  keyId: string;
  startedAt: number;
}

export interface AuditFilter {
  since?: number;
  action?: string;
  /** Part of the actor's name (an email, a user). */
  actor?: string;
  organizationId?: string;
  /** The id of the last entry of the previous page. */
  before?: string;
  limit: number;
}

export interface AuditRepository {
  insert(entry: AuditEntry): Promise<void>;
  /** Newest first. */
  list(filter: AuditFilter): Promise<AuditEntry[]>;
}

/** Where a page of the request log starts: just after this row (newest first). */
export interface RequestLogCursor {
  endedAt: number;
  requestId: string;
}

export interface RequestLogFilter {
  /** Always set for a member: the organization it belongs to. */
  organizationId?: string;
  keyId?: string;
  model?: string;
  outcome?: string;
  requestId?: string;
  /** ended_at >= since */
  since?: number;
  /** ended_at < until */
  until?: number;
  after?: RequestLogCursor;
  limit: number;
}

export interface RequestLogRepository {
  /** Newest first (ended_at, then request id), every filter answered from an index. */
  page(filter: RequestLogFilter): Promise<RequestLogRow[]>;
  /**
   * Deletes up to `limit` of the oldest ledger rows that ended before `before` (see ledger/retention.ts); how many.
   * On SQLite a database whose lock another connection holds throws SQLITE_BUSY at once, rather than wait.
   */
  deleteBefore(before: number, limit: number): Promise<number>;
}

/** Told of a ledger commit that failed: the database's error, and how many rows (requests) it refused. */
export type LedgerRefusalListener = (error: unknown, rows: number) => void;

/** The usage ledger: a row per request that reached an upstream, committed before the answer's last byte. */
export interface LedgerStore {
  /** Resolves once the row is committed; rejects if it cannot be. */
  record(row: LedgerRow): Promise<void>;
  /** Records when keys were last used ([key id, time] pairs); nothing waits for it. */
  touchKeys(entries: [string, number][]): void;
  /** Commits everything recorded so far. */
  flush(): Promise<void>;
  /** Flushes and stops; rows recorded later are refused. */
  close(): Promise<void>;
}

/**
 * Tells a process that someone else (the CLI, another instance) changed what it caches: keys, organizations, usage
 * resets.
 */
export interface ChangeFeed {
  onChange(listener: () => void | Promise<void>): void;
  /** Looks for changes now; when there were some, resolves after the listeners finished. */
  check(): void | Promise<void>;
  /** Tells every other process that this one changed something they cache. */
  announce(): Promise<void>;
}

/** One database, whichever engine runs it. */
export interface Storage {
  readonly kind: "sqlite" | "postgres";
  readonly organizations: OrganizationRepository;
  readonly keys: KeyRepository;
  readonly accounts: AccountRepository;
  readonly usage: UsageRepository;
  readonly requestLog: RequestLogRepository;
  readonly audit: AuditRepository;
  readonly changes: ChangeFeed;
  /**
   * The ledger writer of a serving process (one per process). `onRefused` hears of every commit that failed (its rows'
   * requests are refused): the database's own error and how many rows it held, for the log.
   */
  openLedger(onRefused?: LedgerRefusalListener): LedgerStore;
  /** Whether the database was reachable at the last check: requests are not admitted while it is not. */
  available(): boolean;
  /** What stops the database from serving now, in plain words; empty when nothing does. */
  problems(): Promise<string[]>;
  close(): Promise<void>;
}
