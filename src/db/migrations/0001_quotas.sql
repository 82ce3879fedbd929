CREATE TABLE `usage_resets` (
	`organization_id` text PRIMARY KEY NOT NULL,
	`reset_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `usage_ledger_time_idx` ON `usage_ledger` (`ended_at`);