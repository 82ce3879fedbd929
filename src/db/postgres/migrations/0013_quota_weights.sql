ALTER TABLE "usage_hours" ADD COLUMN "quota_tokens" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_ledger" ADD COLUMN "quota_tokens" bigint;--> statement-breakpoint
-- Every row so far was counted at weight 1: its quota tokens are its tokens.
UPDATE "usage_hours" SET "quota_tokens" = "tokens";
