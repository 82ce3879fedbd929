ALTER TABLE `usage_hours` ADD `quota_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_ledger` ADD `quota_tokens` integer;--> statement-breakpoint
ALTER TABLE `usage_ledger_inbox` ADD `quota_tokens` integer;--> statement-breakpoint
-- Every row so far was counted at weight 1: its quota tokens are its tokens.
UPDATE `usage_hours` SET `quota_tokens` = `tokens`;
