ALTER TABLE "usage_hours" ADD COLUMN "prompt_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_hours" ADD COLUMN "completion_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_hours" ADD COLUMN "cached_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_key_months" ADD COLUMN "prompt_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_key_months" ADD COLUMN "completion_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_key_months" ADD COLUMN "cached_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_ledger" ADD COLUMN "cached_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
UPDATE "usage_hours" AS h SET "prompt_tokens" = ledger.prompt, "completion_tokens" = ledger.completion
FROM (SELECT "organization_id", "ended_at" / 3600000 AS hour, "key_id", "model", sum("prompt_tokens") AS prompt, sum("completion_tokens") AS completion
      FROM "usage_ledger" WHERE "prompt_tokens" + "completion_tokens" > 0 GROUP BY 1, 2, 3, 4) AS ledger
WHERE h."organization_id" = ledger."organization_id" AND h."hour" = ledger.hour AND h."key_id" = ledger."key_id" AND h."model" = ledger."model";
--> statement-breakpoint
UPDATE "usage_key_months" AS k SET "prompt_tokens" = hours.prompt, "completion_tokens" = hours.completion
FROM (SELECT "organization_id", (extract(year FROM utc) * 12 + extract(month FROM utc) - 1)::bigint AS month, "key_id", "model",
             sum("prompt_tokens") AS prompt, sum("completion_tokens") AS completion
      FROM (SELECT "organization_id", "key_id", "model", "prompt_tokens", "completion_tokens", to_timestamp("hour" * 3600) AT TIME ZONE 'UTC' AS utc FROM "usage_hours") AS each_hour
      GROUP BY 1, 2, 3, 4) AS hours
WHERE k."organization_id" = hours."organization_id" AND k."month" = hours.month AND k."key_id" = hours."key_id" AND k."model" = hours."model";
