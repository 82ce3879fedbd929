CREATE TABLE `audit_log` (
	`id` text PRIMARY KEY NOT NULL,
	`at` integer NOT NULL,
	`actor_kind` text NOT NULL,
	`actor` text NOT NULL,
	`action` text NOT NULL,
	`target` text NOT NULL,
	`organization_id` text,
	`changes` text
);
--> statement-breakpoint
CREATE INDEX `audit_log_at_idx` ON `audit_log` (`at`);--> statement-breakpoint
ALTER TABLE `usage_ledger` ADD `first_token_ms` integer;--> statement-breakpoint
CREATE INDEX `usage_ledger_time_idx` ON `usage_ledger` (`ended_at`);--> statement-breakpoint
CREATE INDEX `usage_ledger_key_time_idx` ON `usage_ledger` (`key_id`,`ended_at`);--> statement-breakpoint
CREATE INDEX `usage_ledger_model_time_idx` ON `usage_ledger` (`model`,`ended_at`);--> statement-breakpoint
CREATE INDEX `usage_ledger_outcome_time_idx` ON `usage_ledger` (`outcome`,`ended_at`) WHERE outcome <> 'completed';