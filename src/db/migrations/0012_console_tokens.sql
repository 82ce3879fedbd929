CREATE TABLE `console_tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`user_id` text NOT NULL,
	`name` text NOT NULL,
	`token_hash` text NOT NULL,
	`prefix` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer,
	`revoked_at` integer,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `console_tokens_token_hash_unique` ON `console_tokens` (`token_hash`);--> statement-breakpoint
CREATE INDEX `console_tokens_user_idx` ON `console_tokens` (`user_id`);