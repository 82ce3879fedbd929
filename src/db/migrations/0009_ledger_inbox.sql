CREATE TABLE `usage_ledger_inbox` (
	`request_id` text NOT NULL,
	`organization_id` text NOT NULL,
	`key_id` text NOT NULL,
	`model` text NOT NULL,
	`prompt_tokens` integer NOT NULL,
	`completion_tokens` integer NOT NULL,
	`reasoning_tokens` integer NOT NULL,
	`outcome` text NOT NULL,
	`error_code` text,
	`rule_id` text,
	`usage_source` text NOT NULL,
	`started_at` integer NOT NULL,
	`ended_at` integer NOT NULL,
	`first_token_ms` integer
);
