import type { Database } from "bun:sqlite";
import { bucketMs, hourMs, monthOf } from "../usage-periods";

/** Adds tokens to an organization's minute: (organization_id, minute, tokens, last ended_at). */
const addToMinuteSql = `INSERT INTO usage_minutes (organization_id, minute, tokens, last_time) VALUES (?1, ?2, ?3, ?4)
  ON CONFLICT (organization_id, minute) DO UPDATE SET tokens = tokens + excluded.tokens, last_time = max(last_time, excluded.last_time)`;

/** Adds tokens to an organization's month: (organization_id, month, tokens). */
const addToMonthSql = `INSERT INTO usage_months (organization_id, month, tokens) VALUES (?1, ?2, ?3)
  ON CONFLICT (organization_id, month) DO UPDATE SET tokens = tokens + excluded.tokens`;

/** What the history's upserts add: the tokens, then the prompt, completion and cached tokens they are made of. */
const historySums = `tokens = tokens + excluded.tokens, prompt_tokens = prompt_tokens + excluded.prompt_tokens,
  completion_tokens = completion_tokens + excluded.completion_tokens, cached_tokens = cached_tokens + excluded.cached_tokens`;

/** Adds tokens to an organization's month of one key and model: (organization_id, month, key_id, model, tokens by kind). */
const addToKeyMonthSql = `INSERT INTO usage_key_months (organization_id, month, key_id, model, tokens, prompt_tokens, completion_tokens, cached_tokens)
  VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (organization_id, month, key_id, model) DO UPDATE SET ${historySums}`;

/**
 * Adds tokens to an organization's hour of one key and model: (organization_id, hour, key_id, model, tokens by kind,
 * quota tokens). The quota tokens are what a key's monthly cap counts (see UsageRepository.keyUsage).
 */
const addToHourSql = `INSERT INTO usage_hours (organization_id, hour, key_id, model, tokens, prompt_tokens, completion_tokens, cached_tokens, quota_tokens)
  VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (organization_id, hour, key_id, model) DO UPDATE SET ${historySums},
  quota_tokens = quota_tokens + excluded.quota_tokens`;

/** A request's tokens (or a group's) by kind, as the history keeps them: cached tokens are part of the prompt's. */
export interface TokenKinds {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
}

export interface MinuteTotal {
  organizationId: string;
  minute: number;
  tokens: number;
  /** The latest `ended_at` in this minute: the whole minute leaves the 5-hour window 5 hours after it. */
  lastTime: number;
}

export interface MonthTotal {
  organizationId: string;
  month: number;
  tokens: number;
}

export interface HourTotal extends TokenKinds {
  organizationId: string;
  hour: number;
  keyId: string;
  model: string;
  /** What these tokens count against the token quotas (its model's quota_weight applied row by row). */
  quotaTokens: number;
}

export interface KeyMonthTotal extends TokenKinds {
  organizationId: string;
  month: number;
  keyId: string;
  model: string;
}

/**
 * Sums ledger rows into the aggregates kept beside them, so that a batch of rows is one upsert per organization and
 * minute, month or hour rather than one per row. `add` feeds the quota's aggregates (usage_minutes, usage_months),
 * which a reset rebuilds; `addToHistory` the history by key and model (usage_hours, usage_key_months), which only new
 * ledger rows feed.
 */
export class UsageFold {
  private readonly minutes = new Map<string, MinuteTotal>();
  private readonly months = new Map<string, MonthTotal>();
  private readonly hours = new Map<string, HourTotal>();
  private readonly keyMonths = new Map<string, KeyMonthTotal>();

  /** `quotaTokens`: what `kinds` count against the token quotas. */
  addToHistory(organizationId: string, keyId: string, model: string, kinds: TokenKinds, quotaTokens: number, endedAt: number): void {
    if (kinds.promptTokens + kinds.completionTokens === 0) return;
    const hour = Math.floor(endedAt / hourMs);
    const hourKey = `${organizationId} ${hour} ${keyId} ${model}`;
    const hourEntry = this.hours.get(hourKey);
    if (hourEntry) {
      addKinds(hourEntry, kinds);
      hourEntry.quotaTokens += quotaTokens;
    } else {
      const entry = { organizationId, hour, keyId, model, promptTokens: 0, completionTokens: 0, cachedTokens: 0, quotaTokens };
      this.hours.set(hourKey, addKinds(entry, kinds));
    }
    const month = monthOf(endedAt);
    const monthKey = `${organizationId} ${month} ${keyId} ${model}`;
    const monthEntry = this.keyMonths.get(monthKey);
    if (monthEntry) addKinds(monthEntry, kinds);
    else this.keyMonths.set(monthKey, addKinds({ organizationId, month, keyId, model, promptTokens: 0, completionTokens: 0, cachedTokens: 0 }, kinds));
  }

  add(organizationId: string, tokens: number, endedAt: number): void {
    if (tokens === 0) return;
    const minute = Math.floor(endedAt / bucketMs);
    const minuteEntry = this.minutes.get(`${organizationId} ${minute}`);
    if (minuteEntry) {
      minuteEntry.tokens += tokens;
      minuteEntry.lastTime = Math.max(minuteEntry.lastTime, endedAt);
    } else this.minutes.set(`${organizationId} ${minute}`, { organizationId, minute, tokens, lastTime: endedAt });
    const month = monthOf(endedAt);
    const monthEntry = this.months.get(`${organizationId} ${month}`);
    if (monthEntry) monthEntry.tokens += tokens;
    else this.months.set(`${organizationId} ${month}`, { organizationId, month, tokens });
  }

  /** In key order, so that concurrent transactions upsert the same rows in the same order and cannot deadlock. */
  minuteTotals(): MinuteTotal[] {
    return inKeyOrder(this.minutes);
  }

  monthTotals(): MonthTotal[] {
    return inKeyOrder(this.months);
  }

  hourTotals(): HourTotal[] {
    return inKeyOrder(this.hours);
  }

  keyMonthTotals(): KeyMonthTotal[] {
    return inKeyOrder(this.keyMonths);
  }
}

/**
 * Adds a fold's totals to SQLite's aggregates (usage_minutes, usage_months, usage_hours, usage_key_months), inside the
 * caller's transaction.
 */
export function addToAggregates(sqlite: Database, fold: UsageFold): void {
  const addMinute = sqlite.query<unknown, [string, number, number, number]>(addToMinuteSql);
  const addMonth = sqlite.query<unknown, [string, number, number]>(addToMonthSql);
  for (const entry of fold.minuteTotals()) addMinute.run(entry.organizationId, entry.minute, entry.tokens, entry.lastTime);
  for (const entry of fold.monthTotals()) addMonth.run(entry.organizationId, entry.month, entry.tokens);
  const hours = fold.hourTotals();
  if (hours.length === 0) return;
  const addHour = sqlite.query<unknown, [string, number, string, string, number, number, number, number, number]>(addToHourSql);
  for (const entry of hours) {
    addHour.run(entry.organizationId, entry.hour, entry.keyId, entry.model, ...historyValues(entry), entry.quotaTokens);
  }
  const addKeyMonth = sqlite.query<unknown, [string, number, string, string, number, number, number, number]>(addToKeyMonthSql);
  for (const entry of fold.keyMonthTotals()) {
    addKeyMonth.run(entry.organizationId, entry.month, entry.keyId, entry.model, ...historyValues(entry));
  }
}

/** An entry's tokens, then their kinds: the last four values of a history upsert. */
function historyValues(entry: TokenKinds): [number, number, number, number] {
  return [entry.promptTokens + entry.completionTokens, entry.promptTokens, entry.completionTokens, entry.cachedTokens];
}

function addKinds<T extends TokenKinds>(entry: T, kinds: TokenKinds): T {
  entry.promptTokens += kinds.promptTokens;
  entry.completionTokens += kinds.completionTokens;
  entry.cachedTokens += kinds.cachedTokens;
  return entry;
}

function inKeyOrder<T>(entries: Map<string, T>): T[] {
  return [...entries].sort(([left], [right]) => (left < right ? -1 : left > right ? 1 : 0)).map(([, value]) => value);
}
